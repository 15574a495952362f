"""Chaos: the multi-process deployment keeps every promise while its parts are killed.

PostgreSQL, Redis, the gateway, the scheduler and two workers run as processes of their
own (``chaos_harness.py``; the ``process`` runtime, so no Podman). A few hundred short
batch sessions with known exit codes are submitted while, in a bounded loop, each
component in turn is killed with SIGKILL and started again, Redis is flushed, and
PostgreSQL is restarted (an immediate shutdown: a crash to recover from). Afterwards:

* every session is terminal, none stuck;
* each ended exactly as its command did: SUCCEEDED with 0, FAILED with its exit code;
* none ran twice at once: every run appends ``start``/``end`` lines with its attempt
  and a clock reading to a marker file of its session, so overlapping runs show;
* the nodes hold nothing and no process of a session is left behind.

It prints the counts (the chaos actions, the sessions by outcome, the runs).
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from chaos_harness import ChaosStack, chaos_stack, pg_bin
from waiting import until_sync

SESSIONS = 200
EXIT_CODES = (0, 0, 1, 2, 3, 42)
#: the chaos loop: each component killed and restarted in turn, Redis flushed, PostgreSQL
#: restarted (an immediate shutdown), the gateway and a worker a second time
ACTIONS = ("gateway", "c1", "flush", "scheduler", "c2", "postgres", "redis", "gateway", "c1")
#: the pause after a component is back before the next action (a slow machine brings
#: them back slowly: the loop waits for each, so it stays bounded in count, not time)
ACTION_EVERY_S = 2.0
TERMINAL = {"SUCCEEDED", "FAILED", "TERMINATED", "CANCELLED", "ERROR"}
SCRIPT = (
    'f="$MARK/$JOBGATE_SESSION_ID"; '
    'echo "start $JOBGATE_ATTEMPT $(date +%s%N)" >> "$f"; '
    "sleep $NAP; "
    'echo "end $JOBGATE_ATTEMPT $(date +%s%N)" >> "$f"; '
    "exit $CODE"
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosStack]:
    bin_dir = pg_bin()
    if bin_dir is None:
        pytest.fail("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin)")
    with chaos_stack(
        tmp_path_factory.mktemp("chaos"),
        bin_dir,
        JOBGATE_TICK_INTERVAL_S="1",
        JOBGATE_REQUEUE_AFTER_S="3",
        JOBGATE_HEARTBEAT_INTERVAL_S="0.5",
        JOBGATE_HEARTBEAT_TTL_S="3",
        JOBGATE_STOP_GRACE_S="2",
        JOBGATE_RETRY_BACKOFF_S="0.5",
        # a killed worker is back long before this: it is restarted, not lost (node loss,
        # whose re-runs may overlap for a while, is tests/integration/.../test_node_loss)
        JOBGATE_NODE_LOST_AFTER_S="60",
    ) as s:
        yield s


class Submitter(threading.Thread):
    """Submits the sessions at a steady pace; retries each (same Idempotency-Key) until
    the gateway takes it, whatever is down at that moment."""

    def __init__(self, stack: ChaosStack, marks: Path, spread_s: float) -> None:
        super().__init__(daemon=True)
        self.stack = stack
        self.marks = marks
        self.spread_s = spread_s
        self.expected: dict[str, int] = {}  # session id -> its exit code
        self.retried = 0
        self.lock = threading.Lock()
        self.error: BaseException | None = None

    def run(self) -> None:
        """Clients in parallel, as a busy cluster has them, each at its own pace."""
        clients = 8
        with ThreadPoolExecutor(clients) as pool:
            for future in [pool.submit(self._client, c, clients) for c in range(clients)]:
                try:
                    future.result()
                except BaseException as exc:
                    self.error = exc

    def _client(self, first: int, step: int) -> None:
        with httpx.Client(
            base_url=self.stack.url,
            headers={"Authorization": f"Bearer {self.stack.admin}"},
            timeout=10,
        ) as api:
            for i in range(first, SESSIONS, step):
                self._submit(api, i)
                time.sleep(self.spread_s * step / SESSIONS)

    def _submit(self, api: httpx.Client, i: int) -> None:
        code = EXIT_CODES[i % len(EXIT_CODES)]
        body = {
            "type": "batch",
            "name": f"chaos-{i}",
            "command": ["sh", "-c", SCRIPT],
            "env": {"MARK": str(self.marks), "CODE": str(code), "NAP": f"0.{i % 5 + 1}"},
            "resources": {"cpu": "0.1", "mem": "32m"},
        }
        key = f"chaos-{uuid.uuid4()}"
        deadline = time.monotonic() + 180
        while True:
            try:
                r = api.post("/v1/sessions", json=body, headers={"Idempotency-Key": key})
                if r.status_code in (200, 201):
                    self.expected[r.json()["id"]] = code
                    return
                assert r.status_code >= 500, r.text  # never a 4xx for a good request
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"session {i} was never accepted"
            with self.lock:
                self.retried += 1
            time.sleep(0.2)


def _all_sessions(api: httpx.Client) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 500, **({"cursor": cursor} if cursor else {})}
        page = api.get("/v1/sessions", params=params).json()
        out += page["items"]
        cursor = page.get("next_cursor")
        if not cursor:
            return out


def _wait_terminal(stack: ChaosStack, ids: set[str], timeout: float) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    with httpx.Client(
        base_url=stack.url, headers={"Authorization": f"Bearer {stack.admin}"}, timeout=10
    ) as api:

        def ended() -> list[dict[str, Any]] | None:
            try:
                seen[:] = [s for s in _all_sessions(api) if s["id"] in ids]
            except httpx.TransportError:
                return None
            done = len(seen) == len(ids) and all(s["status"] in TERMINAL for s in seen)
            return seen if done else None

        def stuck() -> str:
            left = Counter(s["status"] for s in seen if s["status"] not in TERMINAL)
            return f"sessions terminal: {left}\n{stack.logs()}"

        return until_sync(ended, timeout=timeout, interval=0.5, what=stuck)


def _runs(marks: Path, session_id: str) -> list[tuple[int, int, int | None]]:
    """(attempt, start ns, end ns or None) of each run of the session, in start order."""
    path = marks / session_id
    if not path.exists():
        return []
    runs: list[tuple[int, int, int | None]] = []
    open_: dict[int, int] = {}
    for line in path.read_text().splitlines():
        kind, attempt, ns = line.split()
        if kind == "start":
            open_[int(attempt)] = int(ns)
        else:
            runs.append((int(attempt), open_.pop(int(attempt)), int(ns)))
    runs += [(a, start, None) for a, start in open_.items()]
    return sorted(runs, key=lambda r: r[1])


def _overlapping(runs: list[tuple[int, int, int | None]]) -> bool:
    return any(
        prev_end is None or prev_end > start
        for (_, _, prev_end), (_, start, _) in itertools.pairwise(runs)
    )


@pytest.mark.timeout(600)
def test_sessions_end_as_their_commands_did_while_every_component_is_killed(
    stack: ChaosStack,
) -> None:
    marks = stack.tmp / "marks"
    marks.mkdir()
    began = time.monotonic()
    submitter = Submitter(stack, marks, spread_s=len(ACTIONS) * 3.0)
    submitter.start()
    done: Counter[str] = Counter()
    for action in ACTIONS:
        time.sleep(ACTION_EVERY_S)
        if action == "flush":
            client = redis.Redis.from_url(stack.redis_url)
            try:
                client.flushall()
            finally:
                client.close()
        elif action == "postgres":
            stack.restart_postgres()
        else:
            stack.restart(action)
        done[action] += 1
    submitter.join(300)
    assert not submitter.is_alive(), "the submitter did not finish"
    if submitter.error is not None:
        raise submitter.error
    expected = submitter.expected
    assert len(expected) == SESSIONS  # every submission became one session, none twice
    stack.wait_ready()  # every worker is back
    sessions = _wait_terminal(stack, set(expected), timeout=180)
    chaos_s = time.monotonic() - began

    outcomes: Counter[str] = Counter()
    wrong, overlapping, never_ran, reruns, attempts = [], [], [], 0, 0
    for s in sessions:
        code = expected[s["id"]]
        outcomes[s["status"]] += 1
        want = "SUCCEEDED" if code == 0 else "FAILED"
        if s["status"] != want or s["exit_code"] != code:
            wrong.append((s["id"], s["status"], s["exit_code"], code, s["status_reason"]))
        runs = _runs(marks, s["id"])
        if not runs:
            never_ran.append(s["id"])
        if _overlapping(runs):
            overlapping.append((s["id"], runs))
        reruns += max(0, len(runs) - 1)
        attempts += max(k["attempt"] for k in s["kernels"])
        assert s["started_at"] is not None, s
        assert s["ended_at"] is not None, s
        assert s["started_at"] <= s["ended_at"], s
    runs = sum(len(_runs(marks, s)) for s in expected)
    print(
        f"\nchaos: {dict(done)} in {chaos_s:.0f}s; sessions {len(sessions)}: {dict(outcomes)}; "
        f"submissions retried {submitter.retried}; runs {runs} "
        f"(re-runs {reruns}); attempts {attempts}; overlapping {len(overlapping)}; "
        f"wrong outcome {len(wrong)}"
    )
    assert not wrong, f"{len(wrong)} sessions did not end as their command did: {wrong[:10]}"
    assert not never_ran, f"{len(never_ran)} sessions ended without running: {never_ran[:10]}"
    assert not overlapping, f"runs of one session overlapped: {overlapping[:5]}"
    assert outcomes["SUCCEEDED"] == sum(1 for c in expected.values() if c == 0)

    # nothing is left behind: the nodes hold no resources, no session process is alive
    with httpx.Client(
        base_url=stack.url, headers={"Authorization": f"Bearer {stack.admin}"}, timeout=10
    ) as api:
        nodes = {n["id"]: n for n in api.get("/v1/nodes").json()["items"]}
    for node_id in stack.workers:
        assert nodes[node_id]["status"] == "ready"
        assert all(float(v) == 0 for v in nodes[node_id]["occupied"].values()), nodes[node_id]
        state = stack.data_dir / "worker" / node_id
        assert not list((state / "process").glob("*/spec.json")), "a session's process is left"
        assert not list((state / "kernels").glob("*.json")), "a kernel's state file is left"
    for name, component in stack.components.items():
        assert component.alive(), f"{name} died on its own:\n{component.tail()}"

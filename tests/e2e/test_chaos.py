"""Chaos soak: the multi-process deployment keeps every promise while its parts are killed.

PostgreSQL, Redis, the gateway, the scheduler and two workers run as processes of their
own (``chaos_harness.py``; the ``process`` runtime, so no Podman). 300 batch sessions of
1-5 s, with known exit codes, are submitted while, at random times, the gateway, the
scheduler and each worker are killed with SIGKILL (several times each) and started
again after a random 1-10 s, Redis is killed (it comes back empty) and flushed, and
PostgreSQL crashes (an immediate shutdown) and is started again; outages of different
parts overlap. One seed draws it all: it is printed, and ``JOBGATE_SOAK_SEED`` repeats
a run. Each session's command prints ``line 1``, ``line 2``, ... one a second, and
appends ``start``/``end`` lines with its attempt and a clock reading to a marker file
of its session. Afterwards:

* every session is terminal (none stuck), and each ran;
* each ended exactly as its command did: SUCCEEDED with 0, FAILED with its exit code;
* none ran twice (nor overlapped) unless its history shows a node-loss decision (a
  worker killed and back within 10 s is a restart, never a node loss: the keeper lives
  on and ``node_lost_after_s`` is 60 s);
* no line was lost: the stored stdout of each session's final attempt is every line its
  command printed, in order, once;
* the nodes hold nothing and no process of a session is left behind.

It prints the counts (the chaos actions with their times, the sessions by outcome, the
runs and the re-runs with their reasons).
"""

from __future__ import annotations

import itertools
import random
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from chaos_harness import ChaosStack, chaos_stack, pg_bin, soak_seed
from waiting import until_sync

SESSIONS = 300
EXIT_CODES = (0, 0, 1, 2, 3, 42)
#: how many times each part is killed (SIGKILL; the database: an immediate shutdown, a
#: crash to recover from) and started again after a random 1-10 s, at random times
#: within :data:`WINDOW_S`; "flush" is a FLUSHALL. Each part has a lane of its own, so
#: outages of different parts overlap at random; Redis and its FLUSHALL share one.
KILLS = {"gateway": 3, "scheduler": 2, "c1": 3, "c2": 3, "redis": 1, "postgres": 1}
FLUSHES = 1
DOWN_S = (1.0, 10.0)
#: the chaos actions start within this many seconds; the sessions are submitted
#: over :data:`SUBMIT_S` (both bounded: a lane that runs late starts its next action late)
WINDOW_S = 75.0
SUBMIT_S = 70.0
#: each session prints ``line 1`` .. ``line N``, one a second, N drawn from this
LINES = (1, 5)
TERMINAL = {"SUCCEEDED", "FAILED", "TERMINATED", "CANCELLED", "ERROR"}
#: a reason the reconciler writes when it declares a node lost (the only case in which
#: a session may run twice: docs/node-loss.md)
NODE_LOSS = re.compile(r"\bnode \S+ (lost|stopped responding)")
SCRIPT = (
    'f="$MARK/$JOBGATE_SESSION_ID"; '
    'echo "start $JOBGATE_ATTEMPT $(date +%s%N)" >> "$f"; '
    "i=1; "
    'while [ "$i" -le "$LINES" ]; do echo "line $i"; sleep 1; i=$((i + 1)); done; '
    'echo "end $JOBGATE_ATTEMPT $(date +%s%N)" >> "$f"; '
    "exit $CODE"
)


@dataclass(frozen=True)
class Plan:
    """What one seed decides: each session's lines and exit code, each lane's actions."""

    seed: int
    lines: tuple[int, ...]
    codes: tuple[int, ...]
    #: lane -> [(start, action, down_s)], in start order
    lanes: dict[str, list[tuple[float, str, float]]]

    @classmethod
    def draw(cls, seed: int) -> Plan:
        rng = random.Random(seed)
        lines = tuple(rng.randint(*LINES) for _ in range(SESSIONS))
        codes = tuple(rng.choice(EXIT_CODES) for _ in range(SESSIONS))
        lanes: dict[str, list[tuple[float, str, float]]] = {}
        for part, count in KILLS.items():
            actions = [part] * count + (["flush"] * FLUSHES if part == "redis" else [])
            lanes[part] = sorted(
                (rng.uniform(2.0, WINDOW_S), action, rng.uniform(*DOWN_S)) for action in actions
            )
        return cls(seed, lines, codes, lanes)


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

    def __init__(self, stack: ChaosStack, marks: Path, plan: Plan) -> None:
        super().__init__(daemon=True)
        self.stack = stack
        self.marks = marks
        self.plan = plan
        self.expected: dict[str, int] = {}  # session id -> its index in the plan
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
                time.sleep(SUBMIT_S * step / SESSIONS)

    def _submit(self, api: httpx.Client, i: int) -> None:
        body = {
            "type": "batch",
            "name": f"chaos-{i}",
            "command": ["sh", "-c", SCRIPT],
            "env": {
                "MARK": str(self.marks),
                "CODE": str(self.plan.codes[i]),
                "LINES": str(self.plan.lines[i]),
            },
            "resources": {"cpu": "0.1", "mem": "32m"},
        }
        key = f"chaos-{uuid.uuid4()}"
        deadline = time.monotonic() + 180
        while True:
            try:
                r = api.post("/v1/sessions", json=body, headers={"Idempotency-Key": key})
                if r.status_code in (200, 201):
                    with self.lock:
                        self.expected[r.json()["id"]] = i
                    return
                assert r.status_code >= 500, r.text  # never a 4xx for a good request
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"session {i} was never accepted"
            with self.lock:
                self.retried += 1
            time.sleep(0.2)


class Lane(threading.Thread):
    """One part's chaos actions, each at its planned time after *began* (or as soon as
    the one before is done, if that ran late)."""

    def __init__(
        self, stack: ChaosStack, actions: list[tuple[float, str, float]], began: float
    ) -> None:
        super().__init__(daemon=True)
        self.stack = stack
        self.actions = actions
        self.began = began
        #: (action, seconds after *began* it started, seconds down, seconds until back)
        self.done: list[tuple[str, float, float, float]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for at, action, down_s in self.actions:
                time.sleep(max(0.0, self.began + at - time.monotonic()))
                started = time.monotonic()
                if action == "flush":
                    down_s = 0.0
                    client = redis.Redis.from_url(self.stack.redis_url)
                    try:
                        client.flushall()
                    finally:
                        client.close()
                elif action == "postgres":
                    self.stack.restart_postgres(down_s)
                else:
                    self.stack.restart(action, down_s)
                back = time.monotonic() - started
                self.done.append((action, started - self.began, down_s, back))
        except BaseException as exc:
            self.error = exc


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
            left = [(s["id"], s["status"]) for s in seen if s["status"] not in TERMINAL]
            return f"sessions not terminal: {left[:20]}\n{stack.logs()}"

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
            if int(attempt) in open_:  # the same attempt started again: a run that never ended
                runs.append((int(attempt), open_.pop(int(attempt)), None))
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


def _printed(lines: int) -> str:
    return "".join(f"line {n}\n" for n in range(1, lines + 1))


@dataclass
class Findings:
    """What the sessions' ends, marker files, histories and stored output show."""

    plan: Plan
    marks: Path
    outcomes: Counter[str] = field(default_factory=Counter)
    wrong: list[Any] = field(default_factory=list)
    never_ran: list[str] = field(default_factory=list)
    #: ran more than once (or overlapped) with no node-loss decision in its history
    twice: list[Any] = field(default_factory=list)
    #: (id, runs, the node-loss reasons in its history) of each session that ran again
    reruns: list[tuple[str, int, list[str]]] = field(default_factory=list)
    lost_lines: list[Any] = field(default_factory=list)
    attempts: int = 0

    def check(self, api: httpx.Client, s: dict[str, Any], i: int) -> None:
        code = self.plan.codes[i]
        self.outcomes[s["status"]] += 1
        want = "SUCCEEDED" if code == 0 else "FAILED"
        if s["status"] != want or s["exit_code"] != code:
            self.wrong.append((s["id"], s["status"], s["exit_code"], code, s["status_reason"]))
        runs = _runs(self.marks, s["id"])
        if not runs:
            self.never_ran.append(s["id"])
        if len(runs) > 1 or _overlapping(runs):
            history = api.get(f"/v1/sessions/{s['id']}").json()["history"]
            losses = [h["reason"] for h in history if NODE_LOSS.search(h["reason"])]
            self.reruns.append((s["id"], len(runs), losses))
            if not losses:
                self.twice.append((s["id"], runs, [h["reason"] for h in history]))
        self.attempts += max(k["attempt"] for k in s["kernels"])
        assert s["started_at"] is not None, s
        assert s["ended_at"] is not None, s
        assert s["started_at"] <= s["ended_at"], s
        # no line lost: the final attempt's stored stdout is every line, in order
        r = api.get(f"/v1/sessions/{s['id']}/logs", params={"format": "json", "stream": "stdout"})
        assert r.status_code == 200, r.text
        stored = "".join(e["data"] for e in r.json()["items"])
        if stored != _printed(self.plan.lines[i]):
            self.lost_lines.append((s["id"], self.plan.lines[i], stored))


@pytest.mark.timeout(600)
def test_sessions_end_as_their_commands_did_while_every_component_is_killed(
    stack: ChaosStack,
) -> None:
    plan = Plan.draw(soak_seed())
    print(f"\nsoak seed {plan.seed} (JOBGATE_SOAK_SEED={plan.seed} repeats it)")
    marks = stack.tmp / "marks"
    marks.mkdir()
    began = time.monotonic()
    submitter = Submitter(stack, marks, plan)
    submitter.start()
    lanes = [Lane(stack, actions, began) for actions in plan.lanes.values()]
    for lane in lanes:
        lane.start()
    for lane in lanes:  # each action: its time + at most 10 s down + a (slow) start
        lane.join(WINDOW_S + 300)
        assert not lane.is_alive(), f"a chaos lane did not finish: {lane.actions}"
        if lane.error is not None:
            raise lane.error
    submitter.join(300)
    assert not submitter.is_alive(), "the submitter did not finish"
    if submitter.error is not None:
        raise submitter.error
    expected = submitter.expected
    assert len(expected) == SESSIONS  # every submission became one session, none twice
    chaos_s = time.monotonic() - began
    stack.wait_ready()  # every worker is back
    sessions = _wait_terminal(stack, set(expected), timeout=180)
    drained_s = time.monotonic() - began

    found = Findings(plan, marks)
    with httpx.Client(
        base_url=stack.url, headers={"Authorization": f"Bearer {stack.admin}"}, timeout=30
    ) as api:
        for s in sessions:
            found.check(api, s, expected[s["id"]])
        nodes = {n["id"]: n for n in api.get("/v1/nodes").json()["items"]}

    done = sorted(
        (round(at, 1), action, round(down, 1), round(back, 1))
        for lane in lanes
        for action, at, down, back in lane.done
    )
    runs_total = sum(len(_runs(marks, s)) for s in expected)
    print(
        f"soak seed {plan.seed}: actions (at s, action, down s, back after s): {done}\n"
        f"chaos over after {chaos_s:.0f}s, all terminal after {drained_s:.0f}s; "
        f"sessions {len(sessions)}: {dict(found.outcomes)}; submissions retried "
        f"{submitter.retried}; runs {runs_total}; attempts {found.attempts}; re-runs "
        f"{[(sid[:8], n, why) for sid, n, why in found.reruns]}; ran twice without node "
        f"loss {len(found.twice)}; lines lost {len(found.lost_lines)}; wrong outcome "
        f"{len(found.wrong)}"
    )
    wrong, never_ran, twice, lost_lines = (
        found.wrong,
        found.never_ran,
        found.twice,
        found.lost_lines,
    )
    assert not wrong, f"{len(wrong)} sessions did not end as their command did: {wrong[:10]}"
    assert not never_ran, f"{len(never_ran)} sessions ended without running: {never_ran[:10]}"
    assert not twice, f"{len(twice)} sessions ran twice without a node loss: {twice[:5]}"
    assert not lost_lines, f"{len(lost_lines)} sessions' stored output: {lost_lines[:5]}"
    assert found.outcomes["SUCCEEDED"] == sum(1 for i in expected.values() if plan.codes[i] == 0)

    # nothing is left behind: the nodes hold no resources, no session process is alive
    for node_id in stack.workers:
        assert nodes[node_id]["status"] == "ready"
        assert all(float(v) == 0 for v in nodes[node_id]["occupied"].values()), nodes[node_id]
        state = stack.data_dir / "worker" / node_id
        assert not list((state / "process").glob("*/spec.json")), "a session's process is left"
        assert not list((state / "kernels").glob("*.json")), "a kernel's state file is left"
    for name, component in stack.components.items():
        assert component.alive(), f"{name} died on its own:\n{component.tail()}"

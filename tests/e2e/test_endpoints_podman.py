"""Inference endpoints end to end: `jobgate up` on rootless Podman, the real app proxy.

One stack for the module. An endpoint on the httpbench model-server stand-in starts at
zero and wakes on its first request; tokens are created, used, expire and are revoked;
another user gets 404; a rolling update under constant load fails no request; a replica
killed with SIGKILL under load is replaced, and every request after that is served.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from up_harness import UpStack
from waiting import until_sync

pytestmark = pytest.mark.podman

IMAGE = "localhost/jobgate-httpbench:latest"
PODMAN_USER = "jobgate"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory, podman_socket: str) -> Iterator[UpStack]:
    stack = UpStack(
        tmp_path_factory.mktemp("endpoints"),
        runtime="podman",
        env={"JOBGATE_PODMAN_SOCKET": podman_socket, "JOBGATE_TICK_INTERVAL_S": "1"},
    )
    stack.start(timeout=180)
    try:
        yield stack
    finally:
        stack.close()


@pytest.fixture(scope="module")
def endpoint(up: UpStack) -> str:
    """`hello` at zero (min 0), its URL printed last."""
    result = up.cli(
        "endpoints", "create", "hello", "--image", IMAGE, "--port", "8000",
        "--health-path", "/ping", "--min", "0", "--max", "2", "--target-concurrency", "8",
        "--wait", check=True,
    )  # fmt: skip
    url = result.stdout.strip().splitlines()[-1]
    assert url == f"http://127.0.0.1:{up.proxy_port}/e/hello/"
    return url


def show(up: UpStack) -> dict[str, Any]:
    shown: dict[str, Any] = up.cli_json("endpoints", "show", "hello")
    return shown


def token(up: UpStack, *args: str) -> str:
    made = up.cli("endpoints", "tokens", "create", "hello", *args, check=True)
    return made.stdout.strip().splitlines()[-1]


@dataclass
class Load:
    """Requests in a loop from a few threads, counting what failed and who answered."""

    url: str
    key: str
    threads: int = 4
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    replicas: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> Load:
        for _ in range(self.threads):
            worker = threading.Thread(target=self._run, daemon=True)
            worker.start()
            self._workers.append(worker)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(30)

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(headers=headers, timeout=30) as client:
            while not self._stop.is_set():
                try:
                    r = client.post(self.url + "invocations?delay_ms=20", content=b"x")
                    outcome = "" if r.status_code == 200 else f"HTTP {r.status_code} {r.text[:80]}"
                    replica = r.headers.get("x-replica", "")
                except httpx.HTTPError as exc:
                    outcome, replica = f"{type(exc).__name__}: {exc}", ""
                with self._lock:
                    if outcome:
                        self.failed.append(outcome)
                    else:
                        self.ok += 1
                        self.replicas.add(replica)

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.ok, len(self.failed)


def test_first_request_wakes_it_and_tokens_decide_who_calls(up: UpStack, endpoint: str) -> None:
    assert show(up)["status"] == "SCALED_TO_ZERO"
    key = token(up, "--name", "app")
    assert httpx.post(endpoint + "invocations", content=b"{}").status_code == 401
    bad = httpx.post(endpoint + "invocations", headers={"Authorization": "Bearer jge_nope"})
    assert bad.status_code == 401
    # the first request is held while one replica starts, then answered
    r = httpx.post(
        endpoint + "invocations",
        content=b'{"x": 1}',
        headers={"Authorization": f"Bearer {key}"},
        timeout=90,
    )
    assert r.status_code == 200, r.text
    assert r.json()["body"] == '{"x": 1}'
    shown = show(up)
    assert len(shown["replicas"]) == 1
    assert any("woken" in e["message"] for e in shown["events"] if e["kind"] == "scale")

    # a token that expires, and one that is revoked
    brief = token(up, "--expires", "3s")
    assert (
        httpx.get(endpoint + "ping", headers={"Authorization": f"Bearer {brief}"}).status_code
        == 200
    )
    revoked = token(up)
    listed = up.cli_json("endpoints", "tokens", "ls", "hello")
    up.cli("endpoints", "tokens", "revoke", "hello", listed[-1]["id"], check=True)
    until_sync(
        lambda: (
            httpx.get(endpoint + "ping", headers={"Authorization": f"Bearer {revoked}"}).status_code
            == 401
        ),
        timeout=10,
        interval=0.25,
        what="revoked token refused",
    )
    until_sync(
        lambda: (
            httpx.get(endpoint + "ping", headers={"Authorization": f"Bearer {brief}"}).status_code
            == 401
        ),
        timeout=10,
        interval=0.25,
        what="expired token refused",
    )

    # another user: the API says 404, and the proxy does not let their key in
    up.cli("admin", "users", "create", "bob", "--no-key", check=True)
    bob = up.cli("admin", "users", "key", "bob", check=True).stdout.strip()
    denied = up.cli("endpoints", "show", "hello", env={"JOBGATE_API_KEY": bob})
    assert denied.returncode == 1
    assert "no endpoint hello" in denied.stderr
    stranger = httpx.get(endpoint + "ping", headers={"Authorization": f"Bearer {bob}"})
    assert stranger.status_code == 404


def test_an_image_that_does_not_exist_is_unavailable_with_the_reason(up: UpStack) -> None:
    up.cli(
        "endpoints", "create", "ghost", "--image", "localhost/jobgate-no-such-image:1",
        "--port", "8000", check=True,
    )  # fmt: skip

    def unavailable() -> dict[str, Any] | None:
        shown: dict[str, Any] = up.cli_json("endpoints", "show", "ghost")
        failed = [e for e in shown["events"] if e["kind"] == "replica-failed"]
        return shown if shown["status"] == "UNAVAILABLE" and len(failed) >= 2 else None

    shown = until_sync(unavailable, timeout=90, interval=0.25, what="ghost UNAVAILABLE")
    assert "no-such-image" in shown["status_reason"]
    # failures back off (1 s, then 2 s …), no crash loop
    backoffs = [e["inputs"]["backoff_s"] for e in shown["events"] if e["kind"] == "replica-failed"]
    assert sorted(backoffs)[:2] == [1.0, 2.0]
    up.cli("endpoints", "rm", "ghost", check=True)


def test_rolling_update_and_a_killed_replica_under_load(up: UpStack, endpoint: str) -> None:
    key = token(up)
    up.cli("endpoints", "scale", "hello", "--replicas", "2", check=True)
    until_sync(
        lambda: show(up)["ready_replicas"] == 2,
        timeout=90,
        interval=0.25,
        what="two ready replicas",
    )

    with Load(endpoint, key) as load:
        until_sync(lambda: load.counts()[0] > 20, timeout=30, interval=0.25, what="load running")
        before = set(load.replicas)
        done = up.cli("endpoints", "update", "hello", "--env", "VERSION=2", "--wait", check=True)
        assert "revision 2" in done.stdout
        settled = load.counts()
        time.sleep(1)  # requests after the old replicas went
    assert load.failed == [], load.failed[:5]
    assert settled[0] > 50
    assert load.replicas - before, "no answer came from a new replica"
    events = [e["kind"] for e in show(up)["events"]]
    assert {"drain", "promote", "stop"} <= set(events)

    # kill -9 one replica's container while requests flow
    shown = show(up)
    victim = shown["replicas"][0]
    with Load(endpoint, key) as load:
        until_sync(lambda: load.counts()[0] > 20, timeout=30, interval=0.25, what="load running")
        subprocess.run(
            ["runuser", "-u", PODMAN_USER, "--", "podman", "ps", "-q", "--filter",
             f"label=jobgate.session={victim['session_id']}"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        kill = subprocess.run(
            ["runuser", "-u", PODMAN_USER, "--", "sh", "-c",
             "podman kill -s KILL $(podman ps -q --filter label=jobgate.session=$0)",
             victim["session_id"]],
            capture_output=True, text=True,
        )  # fmt: skip
        assert kill.returncode == 0, kill.stderr

        def replaced() -> dict[str, Any] | None:
            now = show(up)
            ids = {r["session_id"] for r in now["replicas"] if r["ready"]}
            new = len(ids) == 2 and victim["session_id"] not in ids
            return now if new and now["status"] == "HEALTHY" else None

        try:
            until_sync(replaced, timeout=90, interval=0.25, what="the killed replica replaced")
        except AssertionError:
            print(show(up), up.output()[-4000:])
            raise
        at_replacement = load.counts()
        time.sleep(2)  # every request from here on must be served
        after = load.counts()
    in_flight_failures = at_replacement[1]
    print(f"requests failed around the kill: {in_flight_failures}")
    assert after[1] == at_replacement[1], load.failed[-5:]
    assert after[0] > at_replacement[0]
    failed = [e for e in show(up)["events"] if e["kind"] == "replica-failed"]
    assert failed, "the controller did not note the failure"
    # a SIGKILL is no OOM: the replica has a memory limit, but its cgroup saw no OOM kill
    assert "killed by signal 9" in failed[0]["message"], failed[0]
    assert "out of memory" not in failed[0]["message"], failed[0]

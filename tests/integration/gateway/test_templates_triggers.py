"""Job templates and inbound CI triggers through the real gateway (PostgreSQL, Redis, a
process-runtime worker): parameters reach the job as environment variables, and saved
GitHub and GitLab payloads, signed as those services sign, start sessions once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from harness import Stack
from sqlalchemy import text

from gateway.db.engine import create_engine, create_session_factory
from gateway.domain.signatures import signature_header
from gateway.services.blobs import referenced_digests
from gateway.services.hooks import prune_deliveries

SAMPLES = Path(__file__).resolve().parents[2] / "hook_samples"
TRICKY = "$(touch /tmp/jobgate-pwned); echo 'x' `id` > y"


def _github(secret: str, event: str, body: bytes, delivery: str) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/5a1f8e2",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-GitHub-Hook-ID": "292430182",
        "X-Hub-Signature-256": f"sha256={digest}",
    }


def _gitlab(token: str, event: str, delivery: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": "GitLab/17.5.0",
        "X-Gitlab-Event": event,
        "X-Gitlab-Event-UUID": delivery,
        "X-Gitlab-Instance": "https://gitlab.example.com",
        "X-Gitlab-Token": token,
    }


async def _post(api: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str]) -> Any:
    return await api.post(url, content=body, headers=headers)


async def test_template_runs_with_params_in_the_env_and_names_bad_params(stack: Stack) -> None:
    await stack.start_worker()
    async with stack.client() as api:
        r = await api.post(
            "/v1/templates",
            json={
                "name": "show",
                "description": "prints its parameters",
                "params": [{"name": "ref"}, {"name": "epochs", "default": "3"}],
                "session": {
                    "command": [
                        "sh",
                        "-c",
                        'printf "ref=%s epochs=%s\\n" "$JOBGATE_PARAM_REF" "$JOBGATE_PARAM_EPOCHS"',
                    ],
                    "resources": {"cpu": "0.1", "mem": "64m"},
                    "env": {"STAGE": "ci"},
                },
            },
        )
        assert r.status_code == 201, r.text
        assert r.json()["params"] == [
            {"name": "ref", "default": None},
            {"name": "epochs", "default": "3"},
        ]
        again = await api.post(
            "/v1/templates", json={"name": "show", "session": {"command": ["true"]}}
        )
        assert again.status_code == 409
        assert again.json()["field"] == "name"
        listed = (await api.get("/v1/templates")).json()
        assert [t["name"] for t in listed] == ["show"]

        # a value full of shell syntax is data: it reaches the job as it was given
        r = await api.post("/v1/templates/show/run", json={"params": {"ref": TRICKY}})
        assert r.status_code == 201, r.text
        session = r.json()
        assert session["env"]["JOBGATE_PARAM_REF"] == TRICKY
        assert session["env"]["JOBGATE_TEMPLATE"] == "show"
        assert session["env"]["STAGE"] == "ci"
        done = await stack.wait_status(session["id"], {"SUCCEEDED"})
        assert done["exit_code"] == 0
        assert f"ref={TRICKY} epochs=3" in await stack.logs(session["id"])
        assert not os.path.exists("/tmp/jobgate-pwned")  # noqa: ASYNC240

        for params, field, words in (
            ({"ref": "a", "bogus": "1"}, "params.bogus", "unknown parameter(s) bogus"),
            ({"epochs": "9"}, "params.ref", "missing parameter(s) ref"),
        ):
            r = await api.post("/v1/templates/show/run", json={"params": params})
            assert r.status_code == 409, r.text  # the template's parameters, as it is now
            assert r.json()["field"] == field
            assert words in r.json()["detail"]
        assert (await api.post("/v1/templates/nope/run", json={})).status_code == 404

        # a template's working directory must be uploaded, and is kept while it exists
        blob = b"not really a tar, but content-addressed all the same"
        digest = "sha256:" + hashlib.sha256(blob).hexdigest()
        spec = {"command": ["true"], "working_dir": digest}
        r = await api.post("/v1/templates", json={"name": "wd", "session": spec})
        assert r.status_code == 404, r.text  # not uploaded yet
        assert r.json()["field"] == "working_dir"
        assert (await api.put(f"/v1/blobs/{digest}", content=blob)).status_code in (200, 201)
        r = await api.post("/v1/templates", json={"name": "wd", "session": spec})
        assert r.status_code == 201, r.text
        engine = create_engine(stack.settings.effective_database_url)
        try:
            assert digest in await referenced_digests(create_session_factory(engine))
        finally:
            await engine.dispose()

        # another user sees none of it
        bob = await stack.create_user("bob")
        async with stack.client(bob) as other:
            assert (await other.get("/v1/templates")).json() == []
            assert (await other.post("/v1/templates/show/run", json={})).status_code == 404


async def test_triggers_verify_filter_dedupe_and_start_sessions(stack: Stack) -> None:
    async with stack.client() as api:
        r = await api.post(
            "/v1/templates",
            json={
                "name": "ci",
                "params": [
                    {"name": "repository"},
                    {"name": "ref"},
                    {"name": "sha"},
                    {"name": "event"},
                    {"name": "sender", "default": ""},
                ],
                "session": {"command": ["true"], "resources": {"cpu": "0.1", "mem": "64m"}},
            },
        )
        assert r.status_code == 201, r.text
        r = await api.post(
            "/v1/triggers",
            json={
                "name": "gh",
                "template": "ci",
                "source": "github",
                "events": ["push", "pull_request"],
                "branches": ["main", "release/*"],
            },
        )
        assert r.status_code == 201, r.text
        gh = r.json()
        assert gh["url"] == f"{stack.url}/v1/hooks/{gh['id']}"
        assert gh["secret"]
        shown = (await api.get("/v1/triggers/gh")).json()
        assert shown["secret"] is None  # shown once, at create
        r = await api.post(
            "/v1/triggers",
            json={"name": "gl", "template": "ci", "source": "gitlab", "branches": ["main"]},
        )
        gl = r.json()
        r = await api.post(
            "/v1/triggers", json={"name": "sw", "template": "ci", "source": "standard"}
        )
        sw = r.json()
        assert sw["secret"].startswith("whsec_")
        r = await api.post(
            "/v1/templates",
            json={
                "name": "strict",
                "params": [{"name": "epochs"}],
                "session": {"command": ["true"]},
            },
        )
        assert r.status_code == 201, r.text
        r = await api.post(
            "/v1/triggers", json={"name": "strict-gh", "template": "strict", "source": "github"}
        )
        strict = r.json()
        bad = await api.post(
            "/v1/triggers", json={"name": "x", "template": "nope", "source": "github"}
        )
        assert bad.status_code == 404  # no such template
        assert bad.json()["field"] == "template"
        # filters that could never fire: refused the same way webhooks' events are
        for source, filters, field, said in (
            ("github", {"events": ["pushh"]}, "events", "did you mean 'push'?"),
            ("github", {"events": ["PUSH"]}, "events", "lower-case letters"),
            ("gitlab", {"events": ["merge_request"]}, "events", "calls it 'pull_request'"),
            ("github", {"branches": ["["]}, "branches", "'[' is in no branch name"),
        ):
            body = {"name": "never", "template": "ci", "source": source, **filters}
            r = await api.post("/v1/triggers", json=body)
            assert (r.status_code, r.json()["field"]) == (422, field), r.text
            assert said in r.json()["detail"], r.text
            assert r.headers["content-type"].startswith("application/problem+json")
        assert (await api.get("/v1/triggers/never")).status_code == 404

    hook = httpx.AsyncClient(base_url=stack.url, timeout=30)  # no API key: the signature is it
    async with hook:
        push = (SAMPLES / "github_push.json").read_bytes()
        url = f"/v1/hooks/{gh['id']}"
        # unsigned, wrongly signed, signed with another secret: 401, only counted
        for headers in (
            {"X-GitHub-Event": "push", "X-GitHub-Delivery": "evil-1"},
            _github("wrong secret", "push", push, "evil-2"),
            {**_github(gh["secret"], "push", push, "evil-3"), "X-Hub-Signature-256": "sha256=00"},
        ):
            r = await _post(hook, url, push, headers)
            assert r.status_code == 401, r.text
            assert r.headers["content-type"].startswith("application/problem+json")
        # a signature over another body does not carry over
        r = await _post(hook, url, push + b"\n", _github(gh["secret"], "push", push, "evil-4"))
        assert r.status_code == 401

        delivery = str(uuid.uuid4())
        r = await _post(hook, url, push, _github(gh["secret"], "push", push, delivery))
        assert r.status_code == 202, r.text
        first = r.json()
        assert first["verdict"] == "started"
        assert first["delivery"] == delivery
        session_id = first["session_id"]
        # the same delivery again (GitHub's "redeliver"): nothing new, the same session
        r = await _post(hook, url, push, _github(gh["secret"], "push", push, delivery))
        assert r.status_code == 200
        assert r.json()["verdict"] == "duplicate"
        assert r.json()["session_id"] == session_id

        pr = json.loads((SAMPLES / "github_pull_request.json").read_text())
        pr_body = json.dumps(pr).encode()
        r = await _post(hook, url, pr_body, _github(gh["secret"], "pull_request", pr_body, "pr-1"))
        assert r.status_code == 202, r.text
        assert r.json()["verdict"] == "started"
        pr_session = r.json()["session_id"]
        pr["pull_request"]["base"]["ref"] = "experimental"
        other = json.dumps(pr).encode()
        r = await _post(hook, url, other, _github(gh["secret"], "pull_request", other, "pr-2"))
        assert r.status_code == 200
        assert r.json()["verdict"] == "filtered"
        assert "experimental" in r.json()["detail"]
        ping = b'{"zen":"Keep it logically awesome.","hook_id":292430182}'
        r = await _post(hook, url, ping, _github(gh["secret"], "ping", ping, "ping-1"))
        assert r.status_code == 200
        assert r.json()["verdict"] == "filtered"

        # a template that needs what no event carries: refused, and the delivery says why
        strict_url = f"/v1/hooks/{strict['id']}"
        r = await _post(hook, strict_url, push, _github(strict["secret"], "push", push, "s-1"))
        assert r.status_code == 422, r.text
        assert "missing parameter(s) epochs" in r.json()["detail"]

        # GitLab: the token header; the push is to release/2.1, which "gl" does not take
        gl_url = f"/v1/hooks/{gl['id']}"
        gl_push = (SAMPLES / "gitlab_push.json").read_bytes()
        r = await _post(hook, gl_url, gl_push, _gitlab("nope", "Push Hook", "g-0"))
        assert r.status_code == 401
        r = await _post(hook, gl_url, gl_push, _gitlab(gl["secret"], "Push Hook", "g-1"))
        assert r.status_code == 200, r.text
        assert r.json()["verdict"] == "filtered"
        mr = (SAMPLES / "gitlab_merge_request.json").read_bytes()
        r = await _post(hook, gl_url, mr, _gitlab(gl["secret"], "Merge Request Hook", "g-2"))
        assert r.status_code == 202, r.text
        assert r.json()["verdict"] == "started"
        mr_session = r.json()["session_id"]

        # Standard Webhooks: signed now; a stale timestamp is refused
        sw_url = f"/v1/hooks/{sw['id']}"
        body = json.dumps(
            {
                "type": "release",
                "timestamp": "2026-11-25T12:00:00Z",
                "data": {"repository": "acme-ml/trainer", "ref": "refs/tags/v2", "sha": "abc"},
            }
        ).encode()
        for stamp, code in ((int(time.time()) - 600, 401), (int(time.time()), 202)):
            headers = {
                "webhook-id": "msg_release_1",
                "webhook-timestamp": str(stamp),
                "webhook-signature": signature_header([sw["secret"]], "msg_release_1", stamp, body),
            }
            r = await _post(hook, sw_url, body, headers)
            assert r.status_code == code, r.text

        # oversized bodies are refused before they are read whole
        huge = b"{" + b" " * (stack.settings.max_hook_bytes + 10) + b"}"
        r = await _post(hook, url, huge, _github(gh["secret"], "push", huge, "big-1"))
        assert r.status_code == 413

        async def chunks() -> Any:
            for _ in range(stack.settings.max_hook_bytes // 65536 + 2):
                yield b" " * 65536

        r = await hook.post(url, content=chunks(), headers={"X-GitHub-Event": "push"})
        assert r.status_code == 413
        assert (await hook.post("/v1/hooks/no-such-trigger", content=b"{}")).status_code == 404

    async with stack.client() as api:
        s = (await api.get(f"/v1/sessions/{session_id}")).json()
        env = s["env"]
        assert env["JOBGATE_PARAM_REPOSITORY"] == "acme-ml/trainer"
        assert env["JOBGATE_PARAM_REF"] == "refs/heads/main"
        assert env["JOBGATE_PARAM_SHA"] == "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"
        assert env["JOBGATE_PARAM_EVENT"] == "push"
        assert env["JOBGATE_PARAM_SENDER"] == "octocat"
        assert s["status"] == "PENDING"  # no worker here: it waits in the queue
        pr_env = (await api.get(f"/v1/sessions/{pr_session}")).json()["env"]
        assert pr_env["JOBGATE_PARAM_REF"] == "refs/pull/42/head"
        mr_env = (await api.get(f"/v1/sessions/{mr_session}")).json()["env"]
        assert mr_env["JOBGATE_PARAM_REPOSITORY"] == "ml/trainer"
        assert mr_env["JOBGATE_PARAM_EVENT"] == "pull_request"

        deliveries = (await api.get("/v1/triggers/gh/deliveries")).json()
        verdicts = [(d["delivery"], d["verdict"], d["session_id"]) for d in deliveries]
        assert verdicts == [
            ("ping-1", "filtered", None),
            ("pr-2", "filtered", None),
            ("pr-1", "started", pr_session),
            (delivery, "started", session_id),
        ]  # the refused ones left nothing but a count
        assert (await api.get("/v1/triggers/gh")).json()["refused"] == 4
        (rejected,) = (await api.get("/v1/triggers/strict-gh/deliveries")).json()
        assert rejected["verdict"] == "rejected"
        assert rejected["session_id"] is None
        assert "missing parameter(s) epochs" in rejected["detail"]
        assert (await api.get("/v1/triggers/gl")).json()["refused"] == 1
        everything = (await api.get("/v1/sessions", params={"limit": 50})).json()["items"]
        assert len(everything) == 4  # push, pull request, merge request, release

        r = await api.delete("/v1/triggers/gh")
        assert r.status_code == 204
    async with httpx.AsyncClient(base_url=stack.url) as hook:
        r = await _post(hook, url, push, _github(gh["secret"], "push", push, "after-rm"))
        assert r.status_code == 404


async def test_old_hook_deliveries_are_pruned_after_the_retention(stack: Stack) -> None:
    """JOBGATE_HOOK_DELIVERY_RETENTION_DAYS: deliveries older than it go, newer stay."""
    async with stack.client() as api:
        r = await api.post("/v1/templates", json={"name": "ci", "session": {"command": ["true"]}})
        assert r.status_code == 201, r.text
        r = await api.post(
            "/v1/triggers", json={"name": "gh", "template": "ci", "source": "github"}
        )
        trigger = r.json()
    push = (SAMPLES / "github_push.json").read_bytes()
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as hook:
        for delivery in ("old-1", "old-2", "new-1"):
            headers = _github(trigger["secret"], "push", push, delivery)
            r = await _post(hook, f"/v1/hooks/{trigger['id']}", push, headers)
            assert r.status_code == 202, r.text
    engine = create_engine(stack.settings.effective_database_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "UPDATE hook_deliveries SET created_at = created_at - interval '31 days'"
                    " WHERE delivery_id LIKE 'old-%'"
                )
            )
        factory = create_session_factory(engine)
        assert await prune_deliveries(factory, days=0) == 0  # 0: kept forever
        assert await prune_deliveries(factory, days=30, batch=1) == 2  # a row per transaction
    finally:
        await engine.dispose()
    async with stack.client() as api:
        kept = (await api.get("/v1/triggers/gh/deliveries")).json()
    assert [d["delivery"] for d in kept] == ["new-1"]

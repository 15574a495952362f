"""The pure parts of pipelines: signatures both ways, CI event parsing and filters,
the retry schedule, Retry-After, which addresses a webhook may reach, template params."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import random
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.domain.errors import Conflict
from gateway.domain.hooks import BadPayload, branch_matches, check_filters, parse_event, passes
from gateway.domain.signatures import (
    BadSignature,
    new_secret,
    signature_header,
    verify_github,
    verify_gitlab,
    verify_standard,
)
from gateway.domain.templates import TemplateRun, param_env, session_request
from gateway.domain.webhooks import (
    RETRY_SCHEDULE_S,
    address_refusal,
    check_url,
    next_delay,
    parse_networks,
    retry_after_s,
)

SAMPLES = Path(__file__).resolve().parents[3] / "hook_samples"
BODY = b'{"type":"push","data":{"ref":"refs/heads/main"}}'


def _reference_sign(secret: str, msg_id: str, stamp: int, body: bytes) -> str:
    """The Standard Webhooks spec's algorithm, written out independently."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


# -- signatures ---------------------------------------------------------------------------
def test_standard_webhooks_signature_matches_the_spec_and_rotation_sends_both() -> None:
    old, new = new_secret(), new_secret()
    assert old.startswith("whsec_")
    assert old != new
    now = int(time.time())
    header = signature_header([new, old], "msg_1", now, BODY)
    assert header.split() == [
        _reference_sign(new, "msg_1", now, BODY),
        _reference_sign(old, "msg_1", now, BODY),
    ]
    for secret in (old, new):  # a receiver holding either secret verifies it
        headers = {
            "webhook-id": "msg_1",
            "webhook-timestamp": str(now),
            "webhook-signature": header,
        }
        assert verify_standard(secret, headers, BODY, now) == "msg_1"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"webhook-timestamp": "OFFSET-301"}, "5 minutes"),
        ({"webhook-timestamp": "OFFSET+301"}, "5 minutes"),
        ({"webhook-timestamp": "yesterday"}, "not a number"),
        ({"webhook-signature": "v1,AAAA"}, "no webhook-signature matches"),
        ({"webhook-signature": None}, "no webhook-signature header"),
        ({"webhook-id": "msg_other"}, "no webhook-signature matches"),
        ({"body": b'{"type":"push","data":{"ref":"refs/heads/evil"}}'}, "matches"),
    ],
)
def test_standard_webhooks_refuses_wrong_or_stale(change: dict[str, object], message: str) -> None:
    secret = new_secret()
    now = int(time.time())
    headers: dict[str, str] = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(now),
        "webhook-signature": _reference_sign(secret, "msg_1", now, BODY),
    }
    body = BODY
    for key, value in change.items():
        if key == "body":
            assert isinstance(value, bytes)
            body = value
        elif value is None:
            headers.pop(key)
        elif isinstance(value, str) and value.startswith("OFFSET"):
            headers[key] = str(now + int(value[6:]))
        else:
            assert isinstance(value, str)
            headers[key] = value
    with pytest.raises(BadSignature, match=message):
        verify_standard(secret, headers, body, now)


def test_github_and_gitlab_signatures() -> None:
    body = (SAMPLES / "github_push.json").read_bytes()
    good = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    verify_github("s3cret", {"x-hub-signature-256": good}, body)
    for headers in ({"x-hub-signature-256": good.replace("a", "b")}, {}):
        with pytest.raises(BadSignature):
            verify_github("s3cret", headers, body)
    with pytest.raises(BadSignature):
        verify_github("s3cret", {"x-hub-signature-256": good}, body + b" ")
    verify_gitlab("tok", {"x-gitlab-token": "tok"})
    for headers in ({"x-gitlab-token": "to"}, {}):
        with pytest.raises(BadSignature):
            verify_gitlab("tok", headers)


# -- CI events ----------------------------------------------------------------------------
def test_saved_payloads_become_the_same_fields_whatever_the_source() -> None:
    push = parse_event(
        "github",
        {"x-github-event": "push", "x-github-delivery": "d-1"},
        (SAMPLES / "github_push.json").read_bytes(),
    )
    assert push.params() == {
        "event": "push",
        "delivery": "d-1",
        "repository": "acme-ml/trainer",
        "ref": "refs/heads/main",
        "branch": "main",
        "sha": "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c",
        "sender": "octocat",
    }
    pr = parse_event(
        "github",
        {"x-github-event": "pull_request", "x-github-delivery": "d-2"},
        (SAMPLES / "github_pull_request.json").read_bytes(),
    )
    assert (pr.event, pr.ref, pr.branch, pr.sha, pr.sender) == (
        "pull_request",
        "refs/pull/42/head",
        "release/2.1",  # filtered on the branch it targets, as GitHub Actions does
        "34c5c7793cb3b279e22454cb6750c80560547b3a",
        "hubot",
    )
    gl = parse_event(
        "gitlab",
        {"x-gitlab-event-uuid": "u-1"},
        (SAMPLES / "gitlab_push.json").read_bytes(),
    )
    assert (gl.event, gl.repository, gl.branch, gl.sha, gl.sender, gl.delivery) == (
        "push",
        "ml/trainer",
        "release/2.1",
        "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
        "jsmith",
        "u-1",
    )
    mr = parse_event("gitlab", {}, (SAMPLES / "gitlab_merge_request.json").read_bytes())
    assert (mr.event, mr.branch, mr.ref, mr.sender) == (
        "pull_request",
        "main",
        "refs/merge-requests/7/head",
        "root",
    )
    assert len(mr.delivery) == 64  # no event UUID: the body's digest stands in
    std = parse_event("standard", {"webhook-id": "msg_9"}, BODY)
    assert (std.event, std.branch, std.delivery) == ("push", "main", "msg_9")
    for source, body in (("github", b"[1]"), ("gitlab", b"{}"), ("standard", b"not json")):
        with pytest.raises(BadPayload):
            parse_event(source, {"x-github-event": "push", "x-github-delivery": "d"}, body)


@pytest.mark.parametrize(
    ("branch", "patterns", "matches"),
    [
        ("main", [], True),
        ("main", ["main"], True),
        ("mainline", ["main"], False),
        ("release/2.1", ["release/*"], True),
        ("release/2.1/hotfix", ["release/*"], False),
        ("release/2.1/hotfix", ["release/**"], True),
        ("feature-a", ["feature-?"], True),
        ("feature/a", ["feature?a"], False),
        ("v1.0", ["v1.0"], True),
        ("v1x0", ["v1.0"], False),  # a dot is a dot, not any character
        ("dev", ["main", "dev"], True),
        ("", ["main"], False),
    ],
)
def test_branch_globs(branch: str, patterns: list[str], matches: bool) -> None:
    assert branch_matches(branch, patterns) is matches


def test_filters_say_why_a_delivery_is_passed_over() -> None:
    headers = {"x-github-event": "push", "x-github-delivery": "d"}
    push = parse_event("github", headers, (SAMPLES / "github_push.json").read_bytes())
    assert passes(push, [], []) is None
    assert passes(push, ["push"], ["main"]) is None
    assert "pull_request" in (passes(push, ["pull_request"], []) or "")
    assert "release/*" in (passes(push, [], ["release/*"]) or "")
    ping = parse_event("github", {"x-github-event": "ping", "x-github-delivery": "p"}, b"{}")
    assert passes(ping, [], []) == "a ping: nothing to run"


# -- retries ------------------------------------------------------------------------------
def test_the_retry_schedule_is_standard_webhooks_with_jitter_and_a_scale() -> None:
    rng = random.Random(7)
    assert RETRY_SCHEDULE_S == (5, 300, 1800, 7200, 18000, 36000, 36000)
    for attempt, base in enumerate(RETRY_SCHEDULE_S, start=1):
        for _ in range(20):
            delay = next_delay(attempt, None, 1.0, rng)
            assert delay is not None
            assert 0.8 * base <= delay <= 1.2 * base
    delays = {next_delay(2, None, 1.0, rng) for _ in range(20)}
    assert len(delays) > 1  # jitter: not every receiver's retry at the same instant
    assert next_delay(8, None, 1.0, rng) is None  # 8 attempts, then failed
    small = next_delay(1, None, 0.01, rng)
    assert small is not None
    assert small <= 0.06
    # Retry-After longer than the schedule wins; a shorter one does not hurry it
    assert next_delay(1, 90, 1.0, rng) == 90
    late = next_delay(3, 1, 1.0, rng)
    assert late is not None
    assert late >= 1440


def test_retry_after_seconds_or_http_date() -> None:
    now = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)
    assert retry_after_s("120", now) == 120
    assert retry_after_s("Wed, 25 Nov 2026 12:01:00 GMT", now) == 60
    assert retry_after_s("Wed, 25 Nov 2026 11:00:00 GMT", now) == 0
    assert retry_after_s("soon", now) is None
    assert retry_after_s(None, now) is None


# -- where deliveries may go --------------------------------------------------------------
@pytest.mark.parametrize(
    ("address", "allowed", "refused"),
    [
        ("10.0.0.1", [], "private"),
        ("192.168.1.5", [], "private"),
        ("127.0.0.1", [], "loopback"),
        ("::1", [], "loopback"),
        ("169.254.169.254", ["169.254.0.0/16"], "metadata"),  # never, whatever is allowed
        ("169.254.10.1", [], "link-local"),
        ("fe80::1", [], "link-local"),
        ("::ffff:10.0.0.1", [], "private"),
        ("0.0.0.0", [], "unspecified"),
        ("100.64.0.1", [], "public"),
        ("127.0.0.1", ["127.0.0.0/8"], None),
        ("10.0.0.1", ["10.0.0.0/8"], None),
        ("8.8.8.8", [], None),
        ("2606:4700:4700::1111", [], None),
    ],
)
def test_address_refusal(address: str, allowed: list[str], refused: str | None) -> None:
    why = address_refusal(ipaddress.ip_address(address), parse_networks(allowed))
    if refused is None:
        assert why is None
    else:
        assert why is not None
        assert refused in why


def test_check_url() -> None:
    loopback = parse_networks(["127.0.0.0/8"])
    assert check_url("https://ci.example.com/hook", []) is None  # names: checked when sent
    assert check_url("http://127.0.0.1:9000/x", loopback) is None
    for url, why in (
        ("ftp://example.com/", "http"),
        ("http:///nohost", "no host"),
        ("http://user:pw@example.com/", "user"),
        ("http://10.0.0.1/", "private"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://[::1]:8080/", "loopback"),
        ("http://example.com:99999/", "URL"),
        ("http://a\x91b.example/", "not a valid host name"),  # no IDNA encoding
        ("http://\U0010e02b/", "not a valid host name"),
        ("http://" + "a" * 64 + ".example/", "not a valid host name"),  # a label > 63
    ):
        assert why in (check_url(url, loopback) or ""), url
    assert check_url("https://bücher.example/hook", []) is None  # IDNA: xn--bcher-kva


@pytest.mark.parametrize(
    ("source", "events", "branches", "refused"),
    [
        ("github", ["push", "pull_request", "tag", "release"], ["main", "release/**"], None),
        ("gitlab", ["push", "pull_request", "tag", "pipeline"], ["feature-?"], None),
        ("standard", ["invoice.paid", "anything_at_all"], [], None),  # the sender's types
        (
            "github",
            ["pushh"],
            [],
            ("events", "github sends no event 'pushh' (did you mean 'push'?"),
        ),
        ("gitlab", ["pushh"], [], ("events", "gitlab sends no event 'pushh'")),
        ("gitlab", ["merge_request"], [], ("events", "a gitlab trigger calls it 'pull_request'")),
        ("gitlab", ["workflow_run"], [], ("events", "gitlab sends no event 'workflow_run'")),
        (
            "github",
            ["PUSH"],
            [],
            ("events", "1-64 lower-case letters, '_' or '.'; did you mean 'push'?"),
        ),
        ("standard", ["Invoice Paid"], [], ("events", "an event name is 1-64 lower-case")),
        ("github", [], ["["], ("branches", "'[' is in no branch name")),
        ("github", [], ["main", "rel ease"], ("branches", "' ' is in no branch name")),
        ("github", [], ["!main"], ("branches", "'!' (not) is not supported")),
        ("github", [], ["release/"], ("branches", "no branch name starts or ends with '/'")),
        ("github", [], ["a..b"], ("branches", "'..'")),
    ],
)
def test_trigger_filters_that_could_never_fire_are_refused(
    source: str, events: list[str], branches: list[str], refused: tuple[str, str] | None
) -> None:
    got = check_filters(source, events, branches)
    if refused is None:
        assert got is None
    else:
        assert got is not None
        assert got[0] == refused[0]
        assert refused[1] in got[1], got
        assert "{1,64}" not in got[1]  # the rule in words, no regex


# -- templates ----------------------------------------------------------------------------
DECLARED = [{"name": "ref", "default": None}, {"name": "epochs", "default": "3"}]


def test_params_become_env_and_never_touch_the_command() -> None:
    env = param_env(DECLARED, {"ref": "$(rm -rf /); echo pwned"})
    assert env == {"JOBGATE_PARAM_REF": "$(rm -rf /); echo pwned", "JOBGATE_PARAM_EPOCHS": "3"}
    spec = {"command": ["sh", "-c", 'echo "$JOBGATE_PARAM_REF"'], "env": {"A": "1"}}
    request = session_request("train", spec, env, TemplateRun())
    assert request.command == ["sh", "-c", 'echo "$JOBGATE_PARAM_REF"']
    assert request.env == {"A": "1", "JOBGATE_TEMPLATE": "train", **env}
    assert json.loads(request.model_dump_json())["command"] == spec["command"]


def test_unknown_and_missing_params_are_named() -> None:
    """A 409: the request is well-formed, the template (as it is now) takes others."""
    with pytest.raises(Conflict) as unknown:
        param_env(DECLARED, {"ref": "x", "bogus": "1", "zz": "2"})
    assert unknown.value.extra["field"] == "params.bogus"
    assert "bogus, zz" in unknown.value.detail
    assert "epochs, ref" in unknown.value.detail
    with pytest.raises(Conflict) as missing:
        param_env(DECLARED, {"epochs": "5"})
    assert missing.value.extra["field"] == "params.ref"
    assert "missing" in missing.value.detail

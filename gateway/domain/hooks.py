"""Inbound CI events: what a GitHub, GitLab or Standard Webhooks delivery says, and
whether a trigger's filters let it through. Pure: no I/O.

Every source's payload becomes one :class:`HookEvent`, whose fields are the template
parameters a trigger can fill (``repository``, ``ref``, ``branch``, ``sha``, ``event``,
``delivery``, ``sender``). Event names are one vocabulary across sources: ``push``,
``pull_request`` (GitLab's merge requests too), ``tag``, ``ping``, or the source's own.

Branch filters are globs as GitHub Actions writes them: ``*`` matches within one path
segment, ``**`` across ``/``, ``?`` one character. A pull request is filtered on the
branch it targets (its base), a push on the branch pushed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

__all__ = [
    "EVENT_FIELDS",
    "SOURCES",
    "BadPayload",
    "HookEvent",
    "branch_matches",
    "parse_event",
    "passes",
]

SOURCES = ("github", "gitlab", "standard")
EVENT_FIELDS = ("repository", "ref", "branch", "sha", "event", "delivery", "sender")


class BadPayload(Exception):
    """A verified delivery whose body is not what its source sends."""


@dataclass(frozen=True, slots=True)
class HookEvent:
    event: str
    delivery: str
    repository: str = ""
    ref: str = ""
    branch: str = ""
    sha: str = ""
    sender: str = ""

    def params(self) -> dict[str, str]:
        return {k: str(v) for k, v in asdict(self).items()}


def _get(data: Any, *path: str) -> str:
    for key in path:
        if not isinstance(data, dict):
            return ""
        data = data.get(key)
    return data if isinstance(data, str) else ("" if data is None else str(data))


def _branch_of(ref: str) -> str:
    return ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else ""


def _json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadPayload("the body is not JSON") from None
    if not isinstance(data, dict):
        raise BadPayload("the body is not a JSON object")
    return data


def parse_event(source: str, headers: Mapping[str, str], body: bytes) -> HookEvent:
    """The event of a verified delivery (*headers* with lower-case names)."""
    data = _json(body)
    if source == "github":
        return _github(headers, data)
    if source == "gitlab":
        delivery = headers.get("x-gitlab-event-uuid") or hashlib.sha256(body).hexdigest()
        return _gitlab(delivery, data)
    return _standard(headers.get("webhook-id", ""), data)


def _github(headers: Mapping[str, str], data: dict[str, Any]) -> HookEvent:
    kind = headers.get("x-github-event", "")
    delivery = headers.get("x-github-delivery", "")
    if not kind or not delivery:
        raise BadPayload("no X-GitHub-Event or X-GitHub-Delivery header")
    common = {
        "delivery": delivery,
        "repository": _get(data, "repository", "full_name"),
        "sender": _get(data, "sender", "login"),
    }
    if kind == "push":
        ref = _get(data, "ref")
        event = "tag" if ref.startswith("refs/tags/") else "push"
        return HookEvent(event, ref=ref, branch=_branch_of(ref), sha=_get(data, "after"), **common)
    if kind == "pull_request":
        number = _get(data, "number") or _get(data, "pull_request", "number")
        return HookEvent(
            "pull_request",
            ref=f"refs/pull/{number}/head",
            branch=_get(data, "pull_request", "base", "ref"),
            sha=_get(data, "pull_request", "head", "sha"),
            **common,
        )
    return HookEvent(kind, **common)


def _gitlab(delivery: str, data: dict[str, Any]) -> HookEvent:
    kind = _get(data, "object_kind")
    common = {
        "delivery": delivery,
        "repository": _get(data, "project", "path_with_namespace"),
    }
    if kind in ("push", "tag_push"):
        ref = _get(data, "ref")
        sha = _get(data, "checkout_sha") or _get(data, "after")
        sender = _get(data, "user_username")
        event = "push" if kind == "push" else "tag"
        return HookEvent(event, ref=ref, branch=_branch_of(ref), sha=sha, sender=sender, **common)
    if kind == "merge_request":
        iid = _get(data, "object_attributes", "iid")
        return HookEvent(
            "pull_request",
            ref=f"refs/merge-requests/{iid}/head",
            branch=_get(data, "object_attributes", "target_branch"),
            sha=_get(data, "object_attributes", "last_commit", "id"),
            sender=_get(data, "user", "username"),
            **common,
        )
    if not kind:
        raise BadPayload("no object_kind in the body")
    return HookEvent(kind, sender=_get(data, "user", "username"), **common)


def _standard(delivery: str, data: dict[str, Any]) -> HookEvent:
    kind = _get(data, "type")
    if not kind:
        raise BadPayload('no "type" in the body ({"type", "timestamp", "data"})')
    inner = data.get("data") if isinstance(data.get("data"), dict) else {}
    ref = _get(inner, "ref")
    return HookEvent(
        kind,
        delivery=delivery,
        repository=_get(inner, "repository"),
        ref=ref,
        branch=_get(inner, "branch") or _branch_of(ref),
        sha=_get(inner, "sha"),
        sender=_get(inner, "sender"),
    )


@lru_cache(maxsize=256)
def _glob(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def branch_matches(branch: str, patterns: Sequence[str]) -> bool:
    """No patterns: every branch. Otherwise one glob must match the whole name."""
    return not patterns or any(_glob(p).fullmatch(branch) for p in patterns)


def passes(event: HookEvent, events: Sequence[str], branches: Sequence[str]) -> str | None:
    """None when the trigger should run for *event*; otherwise why not."""
    if event.event == "ping":
        return "a ping: nothing to run"
    if events and event.event not in events:
        return f"event {event.event!r} is not one of {', '.join(events)}"
    if branches and not branch_matches(event.branch, branches):
        shown = event.branch or "(none)"
        return f"branch {shown} matches none of {', '.join(branches)}"
    return None

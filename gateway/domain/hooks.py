"""Inbound CI events: what a GitHub, GitLab or Standard Webhooks delivery says, and
whether a trigger's filters let it through. Pure: no I/O.

Every source's payload becomes one :class:`HookEvent`, whose fields are the template
parameters a trigger can fill (``repository``, ``ref``, ``branch``, ``sha``, ``event``,
``delivery``, ``sender``). Event names are one vocabulary across sources: ``push``,
``pull_request`` (GitLab's merge requests too), ``tag``, ``ping``, or the source's own.

Branch filters are globs as GitHub Actions writes them: ``*`` matches within one path
segment, ``**`` across ``/``, ``?`` one character. A pull request is filtered on the
branch it targets (its base), a push on the branch pushed.

A trigger's filters are checked when it is made (:func:`check_filters`), so one that
could never fire is refused: GitHub and GitLab triggers take the event names those
sources send (``GITHUB_EVENTS``, ``GITLAB_EVENTS``); a Standard Webhooks ``type`` is
the sender's own, so any well-formed name goes. A branch glob holds only what a branch
name may hold (git check-ref-format), plus ``*`` and ``?``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

__all__ = [
    "EVENT_FIELDS",
    "EVENT_NAME_PATTERN",
    "GITHUB_EVENTS",
    "GITLAB_EVENTS",
    "SOURCES",
    "BadPayload",
    "HookEvent",
    "branch_matches",
    "check_filters",
    "parse_event",
    "passes",
]

SOURCES = ("github", "gitlab", "standard")
EVENT_FIELDS = ("repository", "ref", "branch", "sha", "event", "delivery", "sender")
#: an event name as a trigger lists it, in words: 1-64 lower-case letters, "_" or "."
EVENT_NAME_PATTERN = r"^[a-z_.]{1,64}$"
_EVENT_NAME_RULE = "1-64 lower-case letters, '_' or '.'"
#: what a GitHub delivery can be (its X-GitHub-Event), ``tag`` being a push of a tag
GITHUB_EVENTS = frozenset(
    [
        "branch_protection_rule",
        "check_run",
        "check_suite",
        "code_scanning_alert",
        "commit_comment",
        "create",
        "delete",
        "dependabot_alert",
        "deploy_key",
        "deployment",
        "deployment_status",
        "discussion",
        "discussion_comment",
        "fork",
        "gollum",
        "installation",
        "installation_repositories",
        "issue_comment",
        "issues",
        "label",
        "member",
        "membership",
        "merge_group",
        "meta",
        "milestone",
        "organization",
        "package",
        "page_build",
        "ping",
        "project",
        "project_card",
        "project_column",
        "public",
        "pull_request",
        "pull_request_review",
        "pull_request_review_comment",
        "pull_request_review_thread",
        "push",
        "registry_package",
        "release",
        "repository",
        "repository_dispatch",
        "repository_ruleset",
        "secret_scanning_alert",
        "security_advisory",
        "sponsorship",
        "star",
        "status",
        "tag",
        "team",
        "team_add",
        "watch",
        "workflow_dispatch",
        "workflow_job",
        "workflow_run",
    ]
)
#: what a GitLab delivery can be (its object_kind): merge requests are ``pull_request``
#: and tag pushes ``tag``, as for GitHub
GITLAB_EVENTS = frozenset(
    [
        "push",
        "tag",
        "pull_request",
        "note",
        "issue",
        "work_item",
        "wiki_page",
        "pipeline",
        "build",
        "deployment",
        "feature_flag",
        "release",
        "emoji",
        "access_token",
        "member",
        "subgroup",
        "project",
        "vulnerability",
    ]
)
_KNOWN = {"github": GITHUB_EVENTS, "gitlab": GITLAB_EVENTS}
#: names a user may know from the source itself, and the one a trigger lists instead
_ALIASES = {"merge_request": "pull_request", "tag_push": "tag", "push_tag": "tag"}
#: characters no branch name holds (git check-ref-format), so no glob needs them
_NOT_IN_BRANCHES = frozenset(" ~^:[\\")


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


def _check_event(source: str, name: str) -> str | None:
    if not re.fullmatch(EVENT_NAME_PATTERN, name):
        lower = name.lower()
        hint = f"; did you mean {lower!r}?" if re.fullmatch(EVENT_NAME_PATTERN, lower) else ""
        return f"event {name!r}: an event name is {_EVENT_NAME_RULE}{hint}"
    known = _KNOWN.get(source)
    if known is None or name in known:
        return None  # standard: the sender names its own types
    alias = _ALIASES.get(name)
    if alias is not None:
        return f"event {name!r}: a {source} trigger calls it {alias!r}"
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{source} sends no event {name!r} ({hint}known: {', '.join(sorted(known))})"


def _check_glob(pattern: str) -> str | None:
    bad = sorted({c for c in pattern if c in _NOT_IN_BRANCHES or c < " " or c == "\x7f"})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        return (
            f"branch glob {pattern!r}: {shown} is in no branch name; a glob is a branch "
            "name with * (any characters within a segment), ** (across /) or ? (one "
            "character)"
        )
    if pattern.startswith("!"):
        return f"branch glob {pattern!r}: '!' (not) is not supported; list the branches to run"
    if pattern.startswith("/") or pattern.endswith("/") or "//" in pattern or ".." in pattern:
        return (
            f"branch glob {pattern!r}: no branch name starts or ends with '/', "
            "or holds '//' or '..'"
        )
    return None


def check_filters(
    source: str, events: Sequence[str], branches: Sequence[str]
) -> tuple[str, str] | None:
    """Why a trigger with these filters would never fire as meant: (field, why), or None."""
    for name in events:
        why = _check_event(source, name)
        if why is not None:
            return "events", why
    for pattern in branches:
        why = _check_glob(pattern)
        if why is not None:
            return "branches", why
    return None

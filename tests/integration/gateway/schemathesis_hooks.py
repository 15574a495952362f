"""What the OpenAPI document cannot say, told to schemathesis (``SCHEMATHESIS_HOOKS``).

Each hook names the server's rule it stands for, and touches only cases schemathesis
generated as schema-valid (negative cases stay as they were drawn):

* JSON Schema cannot compare two fields: an endpoint's autoscaling needs
  ``min_replicas <= max_replicas`` and ``panic_window_s <= stable_window_s``; valid
  cases that break them are not drawn (``filter_case``).
* A template's parameters are environment variables: two names that differ only in
  case (``a``, ``A``) are one variable, refused; valid cases with both are not drawn.
* A webhook's address literal (``http://10.0.0.1/``) is refused by the gateway's
  policy (``JOBGATE_WEBHOOK_ALLOW_CIDRS``, ``gateway.domain.webhooks``), which the
  document leaves to the server: valid cases with such a URL are not drawn; nor are
  those whose host has no IDNA encoding (no lookup could find it: ``host_refusal``).
* A trigger's events must be names its source sends, and its branch globs may hold
  only what a branch name can (``gateway.domain.hooks.check_filters``, which depends on
  the source): valid cases that break it are not drawn.
* A resource group's ``scheduler`` is typed by the plugins loaded (names, each one's
  options, ``fits`` among the filters, no plugin twice: ``plugins.scheduling.schema``),
  but a plugin's Settings may compare two of its options: heuristic-fifo needs
  ``reserve_after > max_skips``; valid cases that break it are not drawn.
* A blob's name is the sha256 of its body, and an upload names its path base64-encoded
  in ``Upload-Metadata``: a valid case gets the digest of the body it carries, and the
  base64 of a path (``map_case``).
* An ``Idempotency-Key`` reused with a different body is refused (422, as the IETF
  draft says): a valid case's key is made its own per request body, so a repeated
  request is still a replay and a different one never collides.
* Raw bodies are bytes: a blob (``application/octet-stream``) and a resumable upload's
  chunk (``application/offset+octet-stream``).
* An API key's ``expires_at`` is in the future (a past one is a 422): a valid case
  that asks for a past one asks for a year from now instead (``map_case``).
* A usage report's ``from`` comes before its ``to`` and the range holds at most 2,000
  buckets of its granularity (``gateway.domain.usage.report_range``): valid cases that
  break it are not drawn; nor audit log searches whose ``from`` is not before their
  ``to`` (``gateway.domain.audit.time_range``).
* Only a batch session waits for others (``depends_on``; the admission check): valid
  interactive sessions with dependencies are not drawn. A scale that gives both
  ``min_replicas`` and ``max_replicas`` gives them in order (a 422 naming min_replicas):
  valid cases that cross them are not drawn.
* Text never holds a NUL (``\\u0000``): PostgreSQL cannot store one in text or JSON, and
  the gateway answers a 422 naming it wherever a field's pattern does not already say
  so (``gateway.api.problems``): valid cases with a NUL in any string are not drawn.
* A budget's member sub-limits name kinds its project's budget limits and add up to at
  most it, and only a project's budget has members (``gateway.domain.budgets``): valid
  ``PUT /v1/budgets/...`` cases that break it are not drawn.
* An identity provider's issuer is fetched when a token is brought to it: a valid
  ``PUT /v1/auth/providers/{name}`` gets a loopback issuer where nothing listens
  (``map_case``), so the gateway never reaches off this machine for a made-up one.
* A container's cpu and mem are at least its resource group's ``min_cpu`` and
  ``min_mem`` (0.01 and 6 MiB unless the group raises them: a group's configuration is
  state, 422 at submit): valid sessions, templates and endpoints that ask for less
  (``"cpu": 0``, ``"mem": "1k"``) are not drawn.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import schemathesis
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from contract.blobs import DIGEST_PATTERN
from gateway.domain.audit import time_range
from gateway.domain.budgets import check_budget
from gateway.domain.errors import Invalid
from gateway.domain.hooks import check_filters
from gateway.domain.usage import report_range
from gateway.domain.webhooks import address_refusal, host_refusal
from plugins.resources import CPU, MEM, InvalidResource, ResourceSlots
from plugins.scheduling.config import MIN_CPU, MIN_MEM
from plugins.scheduling.sequencers import HeuristicFifoSettings

#: where a fuzzed identity provider lives: a loopback port nothing listens on, so a token
#: brought to it costs the gateway one refused connection, never traffic off this machine
NOWHERE = "http://127.0.0.1:9"

schemathesis.openapi.media_type("application/offset+octet-stream", st.binary(max_size=64))
schemathesis.openapi.media_type("application/octet-stream", st.binary(max_size=64))

_AUTOSCALE_DEFAULTS = {
    "min_replicas": 1,
    "max_replicas": 1,
    "panic_window_s": 6.0,
    "stable_window_s": 60.0,
}


def _positive(case: Any) -> bool:
    meta = case.meta
    return meta is not None and bool(meta.generation.mode.is_positive)


def _route(case: Any) -> tuple[str, str]:
    return str(case.method).upper(), str(case.operation.path)


def _urls(route: tuple[str, str], body: dict[str, Any]) -> list[object]:
    if route == ("POST", "/v1/webhooks"):
        return [body.get("url")]
    if route in (("POST", "/v1/sessions"), ("POST", "/v1/templates/{name}/run")):
        return [body.get("callback_url")]
    if route == ("POST", "/v1/templates") and isinstance(body.get("session"), dict):
        return [body["session"].get("callback_url")]
    return []


def _refused_literal(url: object) -> bool:
    """An address literal the default policy refuses (nothing else is left out)."""
    if not isinstance(url, str):
        return False
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    if host_refusal(host) is not None:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address_refusal(address, []) is not None


def _trigger_fires(body: dict[str, Any]) -> bool:
    events, branches = body.get("events") or [], body.get("branches") or []
    if not isinstance(events, list) or not isinstance(branches, list):
        return True
    return check_filters(str(body.get("source")), events, branches) is None


def _fifo_ordered(scheduler: object) -> bool:
    """heuristic-fifo's own rule (its Settings model), when the sequencer is given so."""
    sequencer = scheduler.get("sequencer") if isinstance(scheduler, dict) else None
    if not isinstance(sequencer, dict) or sequencer.get("name") != "heuristic-fifo":
        return True
    try:
        HeuristicFifoSettings.model_validate(sequencer.get("options") or {})
    except ValidationError:
        return False
    return True


#: the bodies (by route) whose ``resources`` a container gets, and where they are
_RESOURCES = {
    ("POST", "/v1/sessions"): (),
    ("POST", "/v1/templates"): ("session",),
    ("POST", "/v1/endpoints"): (),
    ("POST", "/v1/endpoints/{name}/revisions"): (),
}


def _below_floors(route: tuple[str, str], body: dict[str, Any]) -> bool:
    """cpu or mem under the default group minimums (the gateway's own parser reads them)."""
    if route not in _RESOURCES:
        return False
    for key in _RESOURCES[route]:
        body = body.get(key) if isinstance(body.get(key), dict) else {}
    raw = body.get("resources")
    if not isinstance(raw, dict):
        return False
    try:
        slots = ResourceSlots.parse({k: v for k, v in raw.items() if k in (CPU, MEM)})
    except InvalidResource:
        return False
    return (CPU in raw and slots[CPU] < MIN_CPU) or (MEM in raw and slots[MEM] < MIN_MEM)


_DATETIME = TypeAdapter(datetime)


def _usage_refused(query: dict[str, Any]) -> bool:
    """Whether the server refuses this range (the rule the document cannot say)."""
    try:
        given = [
            _DATETIME.validate_python(query[k]) if query.get(k) else None for k in ("from", "to")
        ]
        report_range(given[0], given[1], datetime.now(UTC), query.get("granularity", "day"))
    except (Invalid, ValidationError):
        return True
    return False


def _audit_refused(query: dict[str, Any]) -> bool:
    """Whether the server refuses this audit search's range (``from`` not before ``to``)."""
    try:
        given = [
            _DATETIME.validate_python(query[k]) if query.get(k) else None for k in ("from", "to")
        ]
        time_range(given[0], given[1])
    except (Invalid, ValidationError):
        return True
    return False


def _budget_sound(scope: object, body: dict[str, Any]) -> bool:
    """Whether the server takes this budget's members (kinds its limits hold, adding up to
    at most them; a project's budget only)."""
    try:
        check_budget(
            str(scope),
            body.get("period"),
            body.get("window", "calendar"),
            body.get("limits"),
            body.get("members"),
        )
    except Invalid:
        return False
    return True


def _holds_nul(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    return False


def _scale_ordered(body: dict[str, Any]) -> bool:
    low, high = body.get("min_replicas"), body.get("max_replicas")
    return not (isinstance(low, int) and isinstance(high, int) and low > high)


@schemathesis.hook
def filter_case(ctx: Any, case: Any) -> bool:
    if not _positive(case):
        return True
    route = _route(case)
    body = case.body if isinstance(case.body, dict) else {}
    if _holds_nul(case.body) or _holds_nul(case.query) or _below_floors(route, body):
        return False
    if route == ("GET", "/v1/usage") and _usage_refused(dict(case.query or {})):
        return False
    if route == ("GET", "/v1/audit") and _audit_refused(dict(case.query or {})):
        return False
    if any(_refused_literal(u) for u in _urls(route, body)):
        return False
    if route[1] == "/v1/resource-groups/{name}" and not _fifo_ordered(body.get("scheduler")):
        return False
    if route == ("PUT", "/v1/budgets/{scope}/{subject}") and not _budget_sound(
        (case.path_parameters or {}).get("scope"), body
    ):
        return False
    return _body_accepted(route, body)


#: routes whose body may name user secrets (a template's in its session request)
_SECRETS_AT = {
    ("POST", "/v1/sessions"): (),
    ("POST", "/v1/endpoints"): (),
    ("POST", "/v1/endpoints/{name}/revisions"): (),
    ("POST", "/v1/templates"): ("session",),
}


def _names_secrets(route: tuple[str, str], body: dict[str, Any]) -> bool:
    """Whether *body* names a user secret: by a made-up name, a 422 naming it, by design
    (the fuzzer has made none)."""
    if route not in _SECRETS_AT:
        return False
    holder: Any = body
    for key in _SECRETS_AT[route]:
        holder = holder.get(key) if isinstance(holder, dict) else None
    return isinstance(holder, dict) and bool(holder.get("secrets"))


def _body_accepted(route: tuple[str, str], body: dict[str, Any]) -> bool:
    """The rules that compare a body's own fields, by route."""
    if _names_secrets(route, body):
        return False
    if route == ("POST", "/v1/sessions"):
        return not body.get("depends_on") or body.get("type", "batch") == "batch"
    if route == ("POST", "/v1/endpoints/{name}/scale"):
        return _scale_ordered(body)

    if route == ("POST", "/v1/triggers"):
        return _trigger_fires(body)
    if route == ("POST", "/v1/templates") and isinstance(body.get("params"), list):
        names = [str(p.get("name", "")).upper() for p in body["params"] if isinstance(p, dict)]
        return len(names) == len(set(names))
    if route != ("POST", "/v1/endpoints"):
        return True
    autoscale = body.get("autoscale")
    if not isinstance(autoscale, dict):
        return True
    a = _AUTOSCALE_DEFAULTS | {k: v for k, v in autoscale.items() if v is not None}
    return bool(
        a["min_replicas"] <= a["max_replicas"] and a["panic_window_s"] <= a["stable_window_s"]
    )


@schemathesis.hook
def map_case(ctx: Any, case: Any) -> Any:
    if not _positive(case):
        return case
    route = _route(case)
    if case.headers and case.headers.get("Idempotency-Key"):
        request = json.dumps([route, case.path_parameters, case.body], default=repr)
        own = hashlib.sha256(request.encode()).hexdigest()[:16]
        case.headers["Idempotency-Key"] = f"{str(case.headers['Idempotency-Key'])[:200]}-{own}"
    if route == ("PUT", "/v1/blobs/{digest}"):
        given = str(case.path_parameters.get("digest", ""))
        if re.fullmatch(DIGEST_PATTERN, unquote(given)):  # (the coverage phase quotes it)
            body = case.body if isinstance(case.body, bytes) else b""
            digest = "sha256:" + hashlib.sha256(body).hexdigest()
            case.path_parameters["digest"] = digest if given == unquote(given) else quote(digest)
    elif route == ("POST", "/v1/keys") and isinstance(case.body, dict):
        case.body = _future_expiry(case.body)
    elif route == ("PUT", "/v1/auth/providers/{name}") and isinstance(case.body, dict):
        case.body = case.body | {"issuer": NOWHERE}
    elif route == ("POST", "/v1/folders/{folder}/uploads") and case.headers:
        given = str(case.headers.get("Upload-Metadata", ""))
        path = "upload-" + hashlib.sha256(given.encode()).hexdigest()[:12]
        case.headers["Upload-Metadata"] = "path " + base64.b64encode(path.encode()).decode()
    return case


def _future_expiry(body: dict[str, Any]) -> dict[str, Any]:
    at = body.get("expires_at")
    if not isinstance(at, str):
        return body
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        return body
    if when.tzinfo is None or when > datetime.now(UTC):
        return body
    return body | {"expires_at": (datetime.now(UTC) + timedelta(days=365)).isoformat()}

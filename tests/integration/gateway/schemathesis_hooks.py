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
  document leaves to the server: valid cases with such a URL are not drawn.
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
* Resumable uploads send ``application/offset+octet-stream``: bytes.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import re
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import schemathesis
from hypothesis import strategies as st
from pydantic import ValidationError

from contract.blobs import DIGEST_PATTERN
from gateway.domain.webhooks import address_refusal
from plugins.scheduling.sequencers import HeuristicFifoSettings

schemathesis.openapi.media_type("application/offset+octet-stream", st.binary(max_size=64))
schemathesis.openapi.media_type("application/x-tar", st.binary(max_size=64))

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
    if route == ("POST", "/v1/sessions"):
        return [body.get("callback_url")]
    if route == ("POST", "/v1/templates") and isinstance(body.get("session"), dict):
        return [body["session"].get("callback_url")]
    return []


def _refused_literal(url: object) -> bool:
    """An address literal the default policy refuses (nothing else is left out)."""
    if not isinstance(url, str):
        return False
    try:
        address = ipaddress.ip_address(urlsplit(url).hostname or "")
    except ValueError:
        return False
    return address_refusal(address, []) is not None


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


@schemathesis.hook
def filter_case(ctx: Any, case: Any) -> bool:
    if not _positive(case):
        return True
    route = _route(case)
    body = case.body if isinstance(case.body, dict) else {}
    if any(_refused_literal(u) for u in _urls(route, body)):
        return False
    if route[1] == "/v1/resource-groups/{name}" and not _fifo_ordered(body.get("scheduler")):
        return False
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
    elif route == ("POST", "/v1/folders/{folder}/uploads") and case.headers:
        given = str(case.headers.get("Upload-Metadata", ""))
        path = "upload-" + hashlib.sha256(given.encode()).hexdigest()[:12]
        case.headers["Upload-Metadata"] = "path " + base64.b64encode(path.encode()).decode()
    return case

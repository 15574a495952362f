"""RFC 7807 problem responses: domain errors and validation errors mapped at the edge.

Every error body is ``application/problem+json`` with ``type``, ``title``, ``status``,
``detail`` and, for bad input, the ``field`` at fault (dotted, e.g. ``resources.cpu``)
and the full list of ``errors``; a value that does not match a pattern is told the rule
in words (``rules.py``), never the regex. Unexpected exceptions become a 500 whose body says
nothing about the internals; the log has the traceback. The database or Redis being
unreachable (a restart, a failover) is a 503 with ``Retry-After``: try again. A value
the database refuses (out of a column's range: the edge should have bounded it) is a 422,
logged as the bug it is.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema
from sqlalchemy.exc import DataError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.api.rules import in_words
from gateway.db.engine import unavailable
from gateway.db.retry import sqlstate
from gateway.domain.errors import Invalid, JobgateError

__all__ = [
    "PROBLEM_RESPONSES",
    "BodyLimit",
    "Problem",
    "ProblemError",
    "http_problem",
    "install",
    "problem",
    "schemas",
]

log = logging.getLogger(__name__)
MEDIA = "application/problem+json"
REF_TEMPLATE = "#/components/schemas/{model}"


def _absent_not_null(schema: dict[str, Any]) -> None:
    """An optional key the server leaves out is absent, never ``null``: no ``default``."""
    for prop in schema.get("properties", {}).values():
        if "default" in prop and prop["default"] is None:
            del prop["default"]


class ProblemError(BaseModel):
    """One invalid field of a request (a 422 lists every one)."""

    field: str = Field(description="the field at fault, dotted (`resources.cpu`)")
    message: str = Field(description="what is wrong with it")


class Problem(BaseModel):
    """An RFC 7807 problem, as every error answer of the API has it (some add keys of
    their own, such as a 409's ``offset``)."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_absent_not_null)

    type: str
    title: str
    status: int
    detail: str
    instance: str
    field: str | SkipJsonSchema[None] = Field(
        None, description="bad input: the field at fault, dotted (`resources.cpu`)"
    )
    errors: list[ProblemError] | SkipJsonSchema[None] = Field(
        None, description="bad input: every invalid field"
    )


def schemas() -> dict[str, dict[str, Any]]:
    """The named schemas of an error body (``Problem`` and what it refers to), for the
    document's ``components`` (``gateway.api.openapi``)."""
    schema = Problem.model_json_schema(ref_template=REF_TEMPLATE)
    return {**schema.pop("$defs", {}), "Problem": schema}


def _described(text: str) -> dict[str, Any]:
    ref = {"$ref": REF_TEMPLATE.format(model="Problem")}
    return {"description": text, "content": {MEDIA: {"schema": ref}}}


#: the error answers any /v1 operation may give, declared in the OpenAPI document so
#: generated clients (and schemathesis) know them; routes add their own success codes
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _described("the body could not be parsed"),
    401: _described("no API key, or a wrong, malformed or revoked one"),
    403: _described("the key's user may not do this"),
    404: _described("no such resource (someone else's session is answered the same way)"),
    405: _described("the method is not allowed here"),
    409: _described("the resource's state or name conflicts with the request"),
    413: _described("the body is too large"),
    422: _described("a field is invalid; `field` names it, `errors` lists every one"),
    429: _described("a quota or rate limit was reached"),
    503: _described("the database or Redis cannot be reached right now; retry (Retry-After)"),
}


def _slug(title: str) -> str:
    return title.lower().replace(" ", "-")


def problem(
    status: int,
    title: str,
    detail: str,
    instance: str,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body = {
        "type": f"urn:jobgate:problem:{_slug(title)}",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": instance,
        **{k: v for k, v in extra.items() if v is not None},
    }
    headers = dict(headers or {})
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(body, status_code=status, media_type=MEDIA, headers=headers)


def _field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or "body"


async def _domain(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, JobgateError)
    extra = dict[str, Any](exc.extra)
    field = exc.field if isinstance(exc, Invalid) else extra.pop("field", None)
    return problem(exc.status, exc.title, exc.detail, request.url.path, field=field, **extra)


async def _validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"field": _field(tuple(e.get("loc", ()))), "message": _message(e)} for e in exc.errors()
    ]
    first = errors[0] if errors else {"field": "body", "message": "invalid"}
    return problem(
        422,
        "Invalid request",
        f"{first['field']}: {first['message']}",
        request.url.path,
        field=first["field"],
        errors=errors,
    )


def _message(error: dict[str, Any]) -> str:
    if error.get("type") == "extra_forbidden":
        return "unknown field"
    if error.get("type") == "json_invalid":
        return "the body is not valid JSON"
    if error.get("type") == "string_pattern_mismatch":
        words = in_words(str((error.get("ctx") or {}).get("pattern", "")))
        if words is not None:
            return f"must be {words}"
    message = str(error.get("msg", "invalid"))
    return message.removeprefix("Value error, ")


async def http_problem(request: Request, exc: Exception) -> JSONResponse:
    """A Starlette HTTPException (no route, wrong method ...) as problem+json."""
    assert isinstance(exc, StarletteHTTPException)
    titles = {404: "Not found", 405: "Method not allowed", 413: "Payload too large"}
    title = titles.get(exc.status_code, "HTTP error")
    detail = str(exc.detail)
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"nothing at {request.url.path}"
    elif exc.status_code == 405 and detail == "Method Not Allowed":
        detail = f"{request.method} is not allowed on {request.url.path}"
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # RFC 9110: every method the resource has
        headers["Allow"] = _allowed(request)
    return problem(exc.status_code, title, detail, request.url.path, headers=headers)


def _allowed(request: Request) -> str:
    """The methods of every route on this path (Starlette's 405 names only those of the
    first route that matched, while a path's methods are often separate routes)."""
    path = request.scope.get("path", "")
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, Route) and route.methods and route.path_regex.match(path):
            methods |= route.methods
    return ", ".join(sorted(methods))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    if unavailable(exc):
        log.warning("%s %s: %s", request.method, request.url.path, _cause(exc))
        detail = "the gateway cannot reach its database or Redis right now; retry shortly"
        return problem(
            503, "Service unavailable", detail, request.url.path, headers={"Retry-After": "1"}
        )
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return problem(500, "Internal error", "the gateway failed; see its log", request.url.path)


#: SQLSTATEs of text PostgreSQL cannot hold: a NUL (``\u0000``) in text or JSON
_NUL_STATES = frozenset({"22P05", "22021"})


async def _unstorable(request: Request, exc: Exception) -> JSONResponse:
    """A value the edge let through that the database refuses (a ``DataError``): the
    request's fault, so a 422 saying what, and a warning naming the SQLSTATE (handled
    here rather than by ``_unexpected``, which Starlette re-raises into a traceback)."""
    log.warning(
        "%s %s: a value the edge let through: %s", request.method, request.url.path, _cause(exc)
    )
    if sqlstate(exc) in _NUL_STATES:
        detail = (
            "text in the request holds a NUL character (\\u0000), which the gateway cannot store"
        )
    else:
        detail = "a value in the request is outside what the gateway can store"
    return problem(422, "Invalid request", detail, request.url.path)


def _cause(exc: Exception) -> str:
    """What went wrong, for the log: the exception's class and, for a database error, the
    driver's class and SQLSTATE (never its message, which can carry statement parameters)."""
    orig = getattr(exc, "orig", None)
    if orig is None:
        return exc.__class__.__name__
    root = orig.__cause__ or orig
    code = sqlstate(exc)
    state = f", SQLSTATE {code}" if code else ""
    return f"{exc.__class__.__name__} ({type(root).__module__}.{type(root).__name__}{state})"


def install(app: FastAPI) -> None:
    app.add_exception_handler(JobgateError, _domain)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, http_problem)
    app.add_exception_handler(DataError, _unstorable)
    app.add_exception_handler(Exception, _unexpected)


class BodyLimit:
    """Refuse request bodies over *limit* bytes with a 413 problem.

    A declared Content-Length over the limit is answered before anything is read; a
    streamed body that grows past it stops the read with an HTTP 413 that the exception
    handlers render as problem+json like every other error. (FastAPI's own
    ``max_body_size`` answers in plain text.)
    """

    def __init__(
        self, app: ASGIApp, limit: int, prefixes: tuple[tuple[str, int], ...] = ()
    ) -> None:
        self.app = app
        self.limit = limit
        self.prefixes = prefixes  # (path prefix, its own limit): blob uploads are larger

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        limit = next((n for prefix, n in self.prefixes if path.startswith(prefix)), self.limit)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            detail = f"the body is {int(declared)} bytes; the limit is {limit}"
            response = problem(413, "Payload too large", detail, scope.get("path", ""))
            await response(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise StarletteHTTPException(413, f"the body is over {limit} bytes")
            return message

        await self.app(scope, counted, send)

"""Job templates (parameterized jobs, as Nomad's dispatch): what a template is, and the
session request one run of it makes. Pure.

A template is a session request (:class:`~gateway.domain.requests.SessionCreate`, the
same schema ``POST /v1/sessions`` takes) plus named parameters, each required or with
a default. A run gives values; each reaches the job as the environment variable
``JOBGATE_PARAM_<NAME>`` (upper case). Values are never spliced into the command: a
command that wants one reads it from its environment (``sh -c 'echo "$JOBGATE_PARAM_REF"'``),
so no value can change what runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, ValidationError, field_validator

from gateway.domain.errors import Conflict, Invalid
from gateway.domain.requests import NAME_PATTERN, NO_NUL, Input, SessionCreate
from gateway.domain.webhooks import URL_PATTERN

__all__ = [
    "PARAM_PREFIX",
    "TemplateCreate",
    "TemplateParam",
    "TemplateRun",
    "param_env",
    "session_request",
]

PARAM_PREFIX = "JOBGATE_PARAM_"
PARAM_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"


class TemplateParam(Input):
    name: str = Field(pattern=PARAM_NAME)
    default: str | None = Field(
        default=None, max_length=4096, description="none: the parameter is required"
    )


class TemplateCreate(Input):
    name: str = Field(pattern=NAME_PATTERN)
    description: str = Field(default="", max_length=1024, pattern=NO_NUL)
    params: list[TemplateParam] = Field(default_factory=list, max_length=64)
    session: SessionCreate = Field(description="the session each run submits")

    @field_validator("params")
    @classmethod
    def _unique(cls, value: list[TemplateParam]) -> list[TemplateParam]:
        seen: set[str] = set()
        for p in value:
            if p.name.upper() in seen:
                raise ValueError(f"two parameters are {PARAM_PREFIX}{p.name.upper()}")
            seen.add(p.name.upper())
        return value


class TemplateRun(Input):
    params: dict[str, str] = Field(
        default_factory=dict,
        json_schema_extra={"additionalProperties": {"type": "string", "pattern": "^[^\\x00]*$"}},
        description="name -> value (the template's own parameters)",
    )
    name: str | None = Field(default=None, pattern=NAME_PATTERN, description="the session's")
    callback_url: str | None = Field(
        default=None, max_length=2048, json_schema_extra={"pattern": URL_PATTERN}
    )


def param_env(declared: list[dict[str, Any]], given: Mapping[str, str]) -> dict[str, str]:
    """``JOBGATE_PARAM_*`` for a run; unknown or missing parameters are a 409 naming them
    (they are the template's, as it is now)."""
    names = {p["name"] for p in declared}
    unknown = sorted(set(given) - names)
    if unknown:
        allowed = ", ".join(sorted(names)) or "none"
        raise Conflict(
            f"unknown parameter(s) {', '.join(unknown)} (the template takes: {allowed})",
            field=f"params.{unknown[0]}",
        )
    missing = sorted(p["name"] for p in declared if p["name"] not in given and p["default"] is None)
    if missing:
        raise Conflict(f"missing parameter(s) {', '.join(missing)}", field=f"params.{missing[0]}")
    env = {}
    for p in declared:
        value = given.get(p["name"], p["default"])
        if "\x00" in value:
            raise Invalid(f"parameter {p['name']} contains a NUL byte", field=f"params.{p['name']}")
        env[PARAM_PREFIX + p["name"].upper()] = value
    return env


def session_request(
    template_name: str, spec: dict[str, Any], env: dict[str, str], run: TemplateRun
) -> SessionCreate:
    """The session one run submits: the template's request, its parameters in the env."""
    values = dict(spec)
    values["env"] = {**spec.get("env", {}), "JOBGATE_TEMPLATE": template_name, **env}
    if run.name is not None:
        values["name"] = run.name
    if run.callback_url is not None:
        values["callback_url"] = run.callback_url
    try:
        return SessionCreate.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise Invalid(f"{where}: {first.get('msg', 'invalid')}", field=where) from None

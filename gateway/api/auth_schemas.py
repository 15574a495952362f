"""Bodies of ``/v1/auth``: identity providers, their binding rules, and trading an ID
token for an API key (docs/auth.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.api.rules import CLAIM_PATTERN, ISSUER_PATTERN, SCOPES_PATTERN, SHORT_NAME_PATTERN
from gateway.domain.requests import NO_NUL, Input

__all__ = [
    "BindingPublic",
    "BindingPut",
    "ProviderPublic",
    "ProviderPut",
    "ProviderSignIn",
    "TokenExchange",
    "TokenExchanged",
]


class ProviderPut(Input):
    model_config = ConfigDict(extra="forbid")

    issuer: str = Field(
        max_length=512, pattern=ISSUER_PATTERN, description="https:// (http only on loopback)"
    )
    client_id: str = Field(
        min_length=1, max_length=256, pattern=NO_NUL, description="the console's client"
    )
    client_secret: str | None = Field(
        None,
        max_length=1024,
        pattern=NO_NUL,
        description="the console's client secret, sealed at rest and never shown again; "
        'left out: the stored one stays; "": a public client (PKCE only)',
    )
    cli_client_id: str = Field(
        "",
        max_length=256,
        pattern=NO_NUL,
        description="a public client for `jobgate login` (device flow)",
    )
    display_name: str = Field(
        "", max_length=128, pattern=NO_NUL, description='the button\'s "Sign in with …"'
    )
    scopes: str = Field(
        "openid profile email",
        max_length=512,
        pattern=SCOPES_PATTERN,
        description="space-separated; must hold openid",
    )
    username_claim: str = Field("preferred_username", pattern=CLAIM_PATTERN)
    groups_claim: str = Field("groups", pattern=CLAIM_PATTERN)


class ProviderPublic(BaseModel):
    name: str
    display_name: str
    issuer: str
    client_id: str
    cli_client_id: str
    scopes: str
    username_claim: str
    groups_claim: str
    has_client_secret: bool
    created_at: datetime


class ProviderSignIn(BaseModel):
    """What a sign-in page and ``jobgate login`` are told of a provider (no secret)."""

    name: str
    display_name: str
    issuer: str
    cli_client_id: str
    scopes: str


class BindingPut(Input):
    model_config = ConfigDict(
        extra="forbid",
        # a rule gives a project, the admin role, or both
        json_schema_extra={
            "anyOf": [
                {"required": ["project"], "properties": {"project": {"type": "string"}}},
                {"required": ["role"], "properties": {"role": {"const": "admin"}}},
            ]
        },
    )

    value: str = Field(
        min_length=1, max_length=256, pattern=NO_NUL, description="the claim's value to match"
    )
    claim: str | None = Field(
        None, pattern=CLAIM_PATTERN, description="left out: the provider's groups claim"
    )
    project: str | None = Field(None, pattern=SHORT_NAME_PATTERN, description="a project to join")
    role: Literal["user", "admin"] = "user"


class BindingPublic(BaseModel):
    name: str
    claim: str
    value: str
    project: str | None
    role: str


class TokenExchange(Input):
    model_config = ConfigDict(extra="forbid")

    provider: str = Field(pattern=SHORT_NAME_PATTERN)
    id_token: str = Field(min_length=16, max_length=16384, description="the provider's ID token")


class TokenExchanged(BaseModel):
    key: str = Field(description="an API key of the signed-in user, shown this once")
    key_name: str
    expires_at: datetime
    user: str
    role: str
    projects: list[str]
    created: bool = Field(description="the user was made by this sign-in")

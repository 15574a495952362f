"""Bodies of ``/v1/keys``: a key asked for, as listed, and as made (shown once); and
``/v1/users/me``, which says what the calling key may do."""

from __future__ import annotations

from datetime import datetime

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from gateway.api.rules import SHORT_NAME_PATTERN
from gateway.api.schemas import UserPublic
from gateway.domain.autoscale import both_given
from gateway.domain.keys import DURATION_PATTERN, ScopeName
from gateway.domain.requests import Input

__all__ = ["KeyCreate", "KeyCreated", "KeyInUse", "KeyPublic", "Me"]


class KeyCreate(Input):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"not": both_given("expires_in", "expires_at")},
    )

    name: str = Field(pattern=SHORT_NAME_PATTERN, description="unique among the user's keys")
    scopes: list[ScopeName] | None = Field(
        None,
        min_length=1,
        description="what the key may do; left out: the scopes of the key that makes it "
        "(a key never makes one with more)",
    )
    expires_in: str | None = Field(
        None,
        max_length=32,
        json_schema_extra={"pattern": DURATION_PATTERN},  # checked by the service: one message
        description="a lifetime such as 30d, 12h, 90m or 3600s, at most 10 years, or never",
    )
    expires_at: AwareDatetime | None = Field(
        None,
        strict=False,  # an ISO 8601 string, with its offset (Z or +hh:mm)
        description="in the future; instead of expires_in (neither: when the key that "
        "makes it does)",
    )

    @field_validator("expires_at", mode="before")
    @classmethod
    def _iso_only(cls, value: object) -> object:
        if isinstance(value, bool | int | float):  # the schema says a string: no epochs
            raise ValueError("an ISO 8601 time with its offset, such as 2027-01-01T00:00:00Z")
        return value


class KeyPublic(BaseModel):
    """A key as listings show it: never the key, only its first characters."""

    id: str
    user: str
    name: str
    prefix: str
    scopes: list[str] = Field(description="what it may do (a key made before scopes: all)")
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None = Field(description="to within a minute")
    revoked_at: datetime | None


class KeyCreated(KeyPublic):
    key: str = Field(description="shown once; store it now")


class KeyInUse(BaseModel):
    """The key a request came with: what it may do and until when."""

    scopes: list[str] = Field(
        description="what it may do, in the order read, sessions, endpoints, folders, admin "
        "(a key made before scopes: all its user may)"
    )
    expires_at: datetime | None = Field(description="null: never")


class Me(UserPublic):
    """The caller, and the key it called with (the app proxy checks its scopes)."""

    key: KeyInUse

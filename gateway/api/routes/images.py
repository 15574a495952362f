"""/v1/images: the image registry - which apps an image serves and how to start them.

An entry overrides the image's own ``jobgate.service-ports`` label. Known app names
(jupyter, code-server, terminal) get jobgate's start definitions unless given one.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Path, Response, status
from pydantic import BaseModel, ConfigDict, Field, field_validator

from contract.apps import with_defaults
from gateway.api.deps import Admin, CurrentUser, Images
from gateway.api.rules import PROTOCOL_PATTERN
from gateway.domain.errors import Invalid
from gateway.domain.requests import Input
from gateway.domain.validation import IMAGE_PATTERN, valid_image_reference
from gateway.services.images import Image
from plugins.runtimes.base import PORT_NAME_PATTERN, parse_service_ports

router = APIRouter(prefix="/v1/images", tags=["images"])
#: checked by the route (naming the field); the pattern is for the OpenAPI document
ImageName = Annotated[str, Path(json_schema_extra={"pattern": IMAGE_PATTERN, "maxLength": 255})]


class AppDefinition(Input):
    port: int = Field(ge=1, le=65535)
    protocol: str = Field(default="http", pattern=PROTOCOL_PATTERN)
    start: str | None = Field(
        default=None, max_length=4096, description="command template with {port} and {base_url}"
    )
    strip_prefix: bool = False


_PORT = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_SERVICE_PORT = rf"{PORT_NAME_PATTERN}:(?:http|tcp):{_PORT}"
#: ``name:protocol:port`` items, comma-separated (the label's grammar, strictly)
SERVICE_PORTS_PATTERN = rf"^(?:{_SERVICE_PORT}(?:,{_SERVICE_PORT})*)?$"


class ImageSet(Input):
    # an entry serves at least one app: from service_ports, or apps
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"properties": {"apps": {"minProperties": 1}}, "required": ["apps"]},
                {
                    "properties": {"service_ports": {"type": "string", "minLength": 1}},
                    "required": ["service_ports"],
                },
            ]
        }
    )

    service_ports: str | None = Field(
        default=None,
        json_schema_extra={"pattern": SERVICE_PORTS_PATTERN},
        description="jupyter:http:8888,code-server:http:8080 (as the label)",
    )
    apps: dict[str, AppDefinition] = Field(default_factory=dict)

    @field_validator("service_ports")
    @classmethod
    def _ports(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(SERVICE_PORTS_PATTERN, value):
            raise ValueError("not a list of name:protocol:port (protocol http or tcp)")
        return value


class ImagePublic(BaseModel):
    name: str
    apps: dict[str, AppDefinition]
    visibility: str = Field(default="public", description="public | private (to its owner)")
    owner: str | None = Field(default=None, description="the owner's user name (private)")
    state: str = Field(default="ready", description="committing | ready | failed")
    session_id: str | None = Field(default=None, description="the session committed")
    detail: str = Field(default="", description="the pushed digest, or why it failed")


def image_view(row: Image, owner: str | None = None) -> ImagePublic:
    return ImagePublic(
        name=row.name,
        apps={k: AppDefinition(**v) for k, v in row.apps.items()},
        visibility=row.visibility,
        owner=owner,
        state=row.state,
        session_id=row.session_id,
        detail=row.detail,
    )


@router.get("", operation_id="images-list", response_model=list[ImagePublic])
async def list_images(principal: CurrentUser, images: Images) -> list[ImagePublic]:
    """Public images and the caller's private ones (committed sessions); admins see all."""
    return [image_view(row, owner) for row, owner in await images.listing(principal)]


@router.put("/{name:path}", operation_id="images-set", response_model=ImagePublic)
async def set_image(name: ImageName, body: ImageSet, _: Admin, images: Images) -> ImagePublic:
    """Register the apps of an image (``service_ports``, and/or full ``apps`` definitions)."""
    if not valid_image_reference(name):
        raise Invalid(f"not an image reference: {name!r}", field="name")
    apps: dict[str, AppDefinition] = {}
    for port in parse_service_ports(body.service_ports or ""):
        app = with_defaults(port.name, port.container_port, port.protocol)
        apps[app.name] = AppDefinition(
            port=app.port, protocol=app.protocol, start=app.start, strip_prefix=app.strip_prefix
        )
    apps.update(body.apps)
    if not apps:
        raise Invalid("give service_ports or apps", field="apps")
    return image_view(await images.set(name, {k: v.model_dump() for k, v in apps.items()}))


@router.delete(
    "/{name:path}",
    operation_id="images-delete",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
async def delete_image(name: ImageName, principal: CurrentUser, images: Images) -> Response:
    """Forget a public image's apps (admins), or delete a private image (its owner, admins;
    another user's is a 404). 204 with no body (and no content type)."""
    await images.delete(principal, name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)

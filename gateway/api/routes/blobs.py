"""/v1/blobs: content-addressed uploads (working directories).

``PUT`` and ``HEAD`` take a user's API key; ``GET`` is for worker nodes (their own
credential), and only for blobs of sessions placed on that node, so a user can check
whether a tree is already here but never read another user's files.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response, status
from fastapi.responses import FileResponse

from contract.blobs import DIGEST_PATTERN
from gateway.api.deps import Blobs, CurrentNode, CurrentUser, NodeCredentials
from gateway.domain.errors import NotFound

router = APIRouter(prefix="/v1/blobs", tags=["blobs"])

BINARY = {"type": "string", "format": "binary"}
Digest = Annotated[str, Path(pattern=DIGEST_PATTERN, description="sha256:<64 lowercase hex>")]


@router.head("/{digest}", operation_id="blobs-check", status_code=status.HTTP_200_OK)
async def check_blob(digest: Digest, principal: CurrentUser, blobs: Blobs) -> Response:
    """200 if the gateway holds this blob (upload it only on 404)."""
    if not blobs.exists(digest, touch=True):
        raise NotFound(f"no blob {digest}")
    return Response(status_code=status.HTTP_200_OK)


@router.put(
    "/{digest}",
    operation_id="blobs-upload",
    status_code=status.HTTP_201_CREATED,
    response_class=Response,
    responses={200: {"description": "already stored; the body was not kept"}},
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "the bytes (a working directory's tar); their sha256 is *digest*",
            "content": {"application/octet-stream": {"schema": BINARY}},
        }
    },
)
async def upload_blob(
    digest: Digest, request: Request, principal: CurrentUser, blobs: Blobs
) -> Response:
    """Store the body under its sha256; 422 if the body's digest is not *digest*."""
    stored = await blobs.put(digest, request.stream())
    return Response(
        status_code=status.HTTP_201_CREATED if stored else status.HTTP_200_OK,
        headers={"Location": f"/v1/blobs/{digest}"},
    )


@router.get("/{digest}", operation_id="blobs-download")
async def download_blob(
    digest: Digest, node: CurrentNode, credentials: NodeCredentials, blobs: Blobs
) -> FileResponse:
    """The blob's bytes, for a worker node with a session that uses it placed there."""
    await credentials.check_blob(node, digest)
    path = blobs.path(digest)
    if not path.is_file():
        raise NotFound(f"no blob {digest}")
    return FileResponse(path, media_type="application/x-tar")

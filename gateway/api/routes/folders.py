"""/v1/folders: data folders, their files and shares; /v1/uploads: resumable uploads.

Uploads follow the tus 1.0 core protocol with its creation and termination extensions
(https://tus.io/protocols/resumable-upload): ``POST /v1/folders/{folder}/uploads`` with
``Upload-Length`` and ``Upload-Metadata: path <base64>`` answers 201 and a ``Location``;
``PATCH`` that location with ``Upload-Offset`` and an ``application/offset+octet-stream``
body appends (streamed to disk, never held in memory); ``HEAD`` tells how much arrived,
so an interrupted upload resumes there; the file appears in the folder, atomically, when
the last byte arrives. The quota is checked when the upload is created, against its
declared length: nothing is written for an upload that would not fit.

Downloads go from the file to the socket by ``sendfile`` (``Range: bytes=a-b`` answers
206). The bytes move in ``api/tus.py`` (and ``api/http11.py``); these routes check who
may do what.
"""

from __future__ import annotations

import asyncio
import os
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response, status
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from contract.folders import (
    FOLDER_NAME_PATTERN,
    FOLDER_PATH_OR_ROOT_PATTERN,
    FOLDER_PATH_PATTERN,
    is_automount,
)
from gateway.api.deps import CurrentUser, Folders
from gateway.api.rules import UPLOAD_ID_PATTERN
from gateway.api.tus import (
    TUS_MEDIA,
    FileRange,
    Unsatisfiable,
    append,
    byte_range,
    metadata,
    settled_offset,
    tus_headers,
)
from gateway.auth import Principal
from gateway.domain.errors import Invalid, JobgateError, NotFound
from gateway.domain.requests import FOLDER_REF_PATTERN, MAX_JSON_INT, Input
from gateway.services.folderfs import Entry, Upload
from gateway.services.folders import FolderService, FolderView

router = APIRouter(tags=["folders"])

FolderRef = Annotated[
    str,
    Path(
        pattern=FOLDER_REF_PATTERN,
        description="the folder's name or id",
    ),
]
FilePath = Annotated[
    str,
    Path(
        description="a path inside the folder",
        max_length=4096,
        json_schema_extra={"pattern": FOLDER_PATH_PATTERN},
    ),
]
UploadId = Annotated[str, Path(pattern=UPLOAD_ID_PATTERN)]
Perm = Literal["ro", "rw", "wd"]


class UnsupportedMedia(JobgateError):
    status = 415
    title = "Unsupported media type"


class FolderCreate(Input):
    name: str = Field(
        pattern=FOLDER_NAME_PATTERN,
        description="a leading dot makes it an automount folder (.local, .cache)",
    )
    project: str | None = Field(default=None, description="owned by this project, not you")
    usage: Literal["general", "model", "data"] = "general"


class FolderPublic(BaseModel):
    id: str
    name: str
    owner: str
    usage: str
    permission: Perm
    automount: bool
    created_at: datetime
    trashed_at: datetime | None
    shares: dict[str, str] = Field(description="user -> permission")
    size: int | None = Field(default=None, description="bytes (show only)")
    sessions: list[str] | None = Field(default=None, description="live sessions mounting it")


class FolderList(BaseModel):
    items: list[FolderPublic]


class ShareSet(Input):
    perm: Perm


class MoveBody(Input):
    source: str = Field(max_length=4096, json_schema_extra={"pattern": FOLDER_PATH_PATTERN})
    target: str = Field(max_length=4096, json_schema_extra={"pattern": FOLDER_PATH_PATTERN})


class PathBody(Input):
    path: str = Field(max_length=4096, json_schema_extra={"pattern": FOLDER_PATH_PATTERN})


class EntryPublic(BaseModel):
    path: str
    type: str
    size: int
    mtime: float


class EntryList(BaseModel):
    items: list[EntryPublic]


class UploadPublic(BaseModel):
    id: str
    folder: str
    path: str
    length: int
    offset: int


async def _visible(folder: FolderRef, principal: CurrentUser, folders: Folders) -> None:
    """404 for a folder the caller cannot see, before the body is even read."""
    await folders.visible(principal, folder)


Visible = Depends(_visible)


def _public(v: FolderView) -> FolderPublic:
    f = v.folder
    return FolderPublic(
        id=f.id,
        name=f.name,
        owner=v.owner,
        usage=f.usage,
        permission=v.perm,
        automount=is_automount(f.name),
        created_at=f.created_at,
        trashed_at=f.trashed_at,
        shares=v.shares,
        size=v.size,
        sessions=v.sessions,
    )


# -- folders ---------------------------------------------------------------------------
@router.post(
    "/v1/folders",
    operation_id="folders-create",
    status_code=status.HTTP_201_CREATED,
    response_model=FolderPublic,
)
async def create_folder(
    body: FolderCreate, principal: CurrentUser, folders: Folders
) -> FolderPublic:
    """A new, empty folder owned by you (or by a project you belong to)."""
    return _public(await folders.create(principal, body.name, body.project, body.usage))


@router.get("/v1/folders", operation_id="folders-list", response_model=FolderList)
async def list_folders(
    principal: CurrentUser,
    folders: Folders,
    trashed: Annotated[bool, Query(description="list the trash instead")] = False,
) -> FolderList:
    """The folders you can use: yours, your projects', shared with you (admins: all)."""
    views = await folders.listing(principal, trashed=trashed)
    return FolderList(items=[_public(v) for v in views])


@router.get("/v1/folders/{folder}", operation_id="folders-show", response_model=FolderPublic)
async def show_folder(folder: FolderRef, principal: CurrentUser, folders: Folders) -> FolderPublic:
    """One folder with its size, its shares and the live sessions that mount it."""
    return _public(await folders.show(principal, folder))


@router.delete(
    "/v1/folders/{folder}",
    operation_id="folders-remove",
    response_model=FolderPublic,
    responses={409: {"description": "mounted by live sessions (listed in `sessions`)"}},
)
async def remove_folder(
    folder: FolderRef, principal: CurrentUser, folders: Folders
) -> FolderPublic:
    """Move the folder to the trash (refused while a live session mounts it)."""
    return _public(await folders.trash(principal, folder))


@router.post(
    "/v1/folders/{folder}/restore", operation_id="folders-restore", response_model=FolderPublic
)
async def restore_folder(
    folder: FolderRef, principal: CurrentUser, folders: Folders
) -> FolderPublic:
    """Take the folder out of the trash."""
    return _public(await folders.restore(principal, folder))


@router.post(
    "/v1/folders/{folder}/purge",
    operation_id="folders-purge",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
async def purge_folder(folder: FolderRef, principal: CurrentUser, folders: Folders) -> Response:
    """Delete a folder in the trash, and its files, for good."""
    await folders.purge(principal, folder)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.put(
    "/v1/folders/{folder}/shares/{user}",
    operation_id="folders-share",
    dependencies=[Visible],
    response_model=FolderPublic,
)
async def share_folder(
    folder: FolderRef, user: str, body: ShareSet, principal: CurrentUser, folders: Folders
) -> FolderPublic:
    """Give a user ro, rw or wd on the folder (owners only)."""
    return _public(await folders.share(principal, folder, user, body.perm))


@router.delete(
    "/v1/folders/{folder}/shares/{user}",
    operation_id="folders-unshare",
    response_model=FolderPublic,
)
async def unshare_folder(
    folder: FolderRef, user: str, principal: CurrentUser, folders: Folders
) -> FolderPublic:
    """Take a user's share away (owners only)."""
    return _public(await folders.share(principal, folder, user, None))


# -- files -----------------------------------------------------------------------------
def _entry(e: Entry) -> EntryPublic:
    return EntryPublic(path=e.path, type=e.type, size=e.size, mtime=e.mtime)


@router.get("/v1/folders/{folder}/files", operation_id="folders-files", response_model=EntryList)
async def list_files(
    folder: FolderRef,
    principal: CurrentUser,
    folders: Folders,
    path: Annotated[
        str,
        Query(
            max_length=4096,
            json_schema_extra={"pattern": FOLDER_PATH_OR_ROOT_PATTERN},
            description="a directory or file",
        ),
    ] = "",
    recursive: bool = False,
) -> EntryList:
    """What a directory of the folder holds (symbolic links are shown, never followed)."""
    row = await folders.access(principal, folder, "ro")
    entries = await asyncio.to_thread(folders.fs.list, row.id, path, recursive=recursive)
    return EntryList(items=[_entry(e) for e in entries])


@router.get(
    "/v1/folders/{folder}/files/{path:path}",
    operation_id="folders-download",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "the file"},
        206: {"content": {"application/octet-stream": {}}, "description": "a byte range"},
        416: {"description": "the range is outside the file"},
    },
)
async def download_file(
    folder: FolderRef,
    path: FilePath,
    principal: CurrentUser,
    folders: Folders,
    range_: Annotated[str | None, Header(alias="Range")] = None,
) -> StreamingResponse:
    """The file's bytes, streamed; ``Range: bytes=START-END`` gives a part (206)."""
    row = await folders.access(principal, folder, "ro")
    fd, info = await asyncio.to_thread(folders.fs.open_file, row.id, path)
    size = info.st_size
    try:
        wanted = byte_range(range_, size)
    except Unsatisfiable:
        os.close(fd)
        raise
    start, end = wanted if wanted is not None else (0, size - 1)
    headers = {"Accept-Ranges": "bytes", "Content-Length": str(max(0, end - start + 1))}
    code = status.HTTP_200_OK
    if wanted is not None:
        code = status.HTTP_206_PARTIAL_CONTENT
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    return FileRange(fd, start, end, status_code=code, headers=headers)


@router.delete(
    "/v1/folders/{folder}/files/{path:path}",
    operation_id="folders-remove-path",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
async def remove_path(
    folder: FolderRef, path: FilePath, principal: CurrentUser, folders: Folders
) -> Response:
    """Delete a file, a link or a directory tree (needs wd)."""
    row = await folders.access(principal, folder, "wd")
    await asyncio.to_thread(folders.fs.remove, row.id, path)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/v1/folders/{folder}/move",
    operation_id="folders-move",
    dependencies=[Visible],
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
async def move_path(
    folder: FolderRef, body: MoveBody, principal: CurrentUser, folders: Folders
) -> Response:
    """Rename a file or directory inside the folder (an existing target is kept: 409)."""
    row = await folders.access(principal, folder, "rw")
    await asyncio.to_thread(folders.fs.move, row.id, body.source, body.target)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/v1/folders/{folder}/mkdir",
    operation_id="folders-mkdir",
    dependencies=[Visible],
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
async def make_dir(
    folder: FolderRef, body: PathBody, principal: CurrentUser, folders: Folders
) -> Response:
    """Create a directory (and its parents) inside the folder."""
    row = await folders.access(principal, folder, "rw")
    await asyncio.to_thread(folders.fs.mkdir, row.id, body.path)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


# -- resumable uploads (tus 1.0) ------------------------------------------------------
@router.post(
    "/v1/folders/{folder}/uploads",
    operation_id="folders-upload-create",
    dependencies=[Visible],
    status_code=status.HTTP_201_CREATED,
    response_model=UploadPublic,
    responses={413: {"description": "over the byte quota (quota, used, requested)"}},
)
async def create_upload(
    folder: FolderRef,
    principal: CurrentUser,
    folders: Folders,
    response: Response,
    upload_length: Annotated[int, Header(alias="Upload-Length", ge=0, le=MAX_JSON_INT)],
    upload_metadata: Annotated[
        str,
        Header(
            alias="Upload-Metadata",
            description="path <base64 of the path>",
            json_schema_extra={"pattern": r"^path [A-Za-z0-9+/]+={0,2}$"},
        ),
    ],
) -> UploadPublic:
    """Announce an upload of ``Upload-Length`` bytes to ``path``; PATCH its Location."""
    path = metadata(upload_metadata).get("path")
    if not path:
        raise Invalid(
            "Upload-Metadata must name the path: 'path <base64>'", field="Upload-Metadata"
        )
    row = await folders.access(principal, folder, "rw")
    await folders.check_quota(row, upload_length)
    fs = folders.fs
    upload = await asyncio.to_thread(
        fs.start_upload, row.id, path, upload_length, principal.user_id
    )
    if upload_length == 0:
        await asyncio.to_thread(fs.finish_upload, upload)
    response.headers.update(tus_headers({"Location": f"/v1/uploads/{upload.id}"}))
    return UploadPublic(id=upload.id, folder=row.name, path=path, length=upload_length, offset=0)


async def _own_upload(folders: FolderService, principal: Principal, upload_id: str) -> Upload:
    upload = await asyncio.to_thread(folders.fs.upload, upload_id)
    if upload.user_id != principal.user_id:
        raise NotFound(f"no upload {upload_id!r} (finished, abandoned or never made)")
    return upload


@router.head("/v1/uploads/{upload_id}", operation_id="folders-upload-offset")
async def upload_offset(upload_id: UploadId, principal: CurrentUser, folders: Folders) -> Response:
    """How many bytes of the upload arrived (``Upload-Offset``): resume from there."""
    upload = await _own_upload(folders, principal, upload_id)
    fd = await asyncio.to_thread(folders.fs.open_part, upload.id, write=False)
    offset = await settled_offset(fd)
    return Response(
        headers=tus_headers({"Upload-Offset": str(offset), "Upload-Length": str(upload.length)})
    )


@router.patch(
    "/v1/uploads/{upload_id}",
    operation_id="folders-upload-append",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={415: {"description": "not application/offset+octet-stream"}},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {TUS_MEDIA: {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def append_upload(
    upload_id: UploadId,
    request: Request,
    principal: CurrentUser,
    folders: Folders,
    upload_offset: Annotated[int, Header(alias="Upload-Offset", ge=0)],
) -> Response:
    """Append the body at ``Upload-Offset`` (which must be what HEAD says)."""
    if request.headers.get("content-type") != TUS_MEDIA:
        raise UnsupportedMedia("send the bytes as Content-Type: application/offset+octet-stream")
    upload = await _own_upload(folders, principal, upload_id)
    await folders.access(principal, upload.folder_id, "rw")
    fd = await asyncio.to_thread(folders.fs.open_part, upload.id)
    offset = await append(fd, upload_offset, upload.length, request)
    if offset == upload.length:
        await asyncio.to_thread(folders.fs.finish_upload, upload)
    return Response(
        status_code=status.HTTP_204_NO_CONTENT,
        headers=tus_headers({"Upload-Offset": str(offset)}),
    )


@router.delete(
    "/v1/uploads/{upload_id}",
    operation_id="folders-upload-cancel",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
async def cancel_upload(upload_id: UploadId, principal: CurrentUser, folders: Folders) -> Response:
    """Give up an upload (what arrived is deleted)."""
    upload = await _own_upload(folders, principal, upload_id)
    await asyncio.to_thread(folders.fs.cancel_upload, upload.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT, headers=tus_headers())

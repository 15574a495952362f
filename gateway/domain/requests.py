"""What a client asks for when it submits a session, validated field by field.

The API takes this model as its request body (``gateway.api.schemas`` re-exports it) and
the session service works from it. Unknown fields are refused (``extra="forbid"``) so a
typo such as ``comand`` is a 422 naming the field, never a silently ignored option.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from contract.blobs import DIGEST_PATTERN
from contract.cluster import ClusterMode, StopWhen
from contract.folders import FOLDER_ID_PATTERN, FOLDER_NAME_PATTERN
from contract.secrets import SECRET_NAME_PATTERN
from gateway.domain.validation import (
    DELAY_PATTERN,
    ENV_NAME,
    IMAGE_PATTERN,
    check_arguments,
    check_env,
    check_image,
    parse_start,
)
from gateway.domain.webhooks import URL_PATTERN
from plugins.resources import slot_map_schema

__all__ = [
    "CALLBACK_SECRET_PATTERN",
    "FOLDER_REF_PATTERN",
    "MAX_JSON_INT",
    "NAME_PATTERN",
    "NO_NUL",
    "WORKDIR_PATTERN",
    "Arguments",
    "Environment",
    "FolderMount",
    "ImageReference",
    "Input",
    "ListedType",
    "MountSpec",
    "SecretMount",
    "SessionCreate",
    "SessionType",
]

SessionType = Literal["batch", "interactive"]
#: what a session can be: one asked for, or an inference endpoint's replica (made by the
#: endpoint controller, never asked for; listed and filtered like the others)
ListedType = Literal["batch", "interactive", "inference"]
#: free text the database stores: anything but NUL (PostgreSQL text cannot hold it)
NO_NUL = r"^[^\x00]*$"
#: a command's first argument as the document says it: no NUL, and not only white space
FIRST_ARGUMENT_PATTERN = r"^[^\x00]*[^\x00 \t\n\r\f\v][^\x00]*$"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
WORKDIR_PATTERN = r"^/[^\x00]*$"
CALLBACK_SECRET_PATTERN = r"^whsec_[A-Za-z0-9+/=]{16,120}$"
#: a data folder by its name or its id
FOLDER_REF_PATTERN = f"({FOLDER_NAME_PATTERN})|({FOLDER_ID_PATTERN})"

# what sessions and endpoint revisions both run: checked alike wherever they are sent
ImageReference = Annotated[
    str,
    Field(json_schema_extra={"pattern": IMAGE_PATTERN, "maxLength": 255}),
    AfterValidator(check_image),
]
Arguments = Annotated[
    list[str],
    Field(
        max_length=4096,
        json_schema_extra={
            "items": {"type": "string", "pattern": "^[^\\x00]*$"},
            # the first: a word (not only white space) and, like every argument, no NUL
            "prefixItems": [{"type": "string", "pattern": FIRST_ARGUMENT_PATTERN}],
        },
    ),
    AfterValidator(check_arguments),
]
Environment = Annotated[
    dict[str, str],
    Field(
        json_schema_extra={
            "propertyNames": {"pattern": ENV_NAME.pattern},
            "additionalProperties": {"type": "string", "pattern": "^[^\\x00]*$"},
        }
    ),
    AfterValidator(check_env),
]


#: the largest integer every JSON number holds exactly (a bound above it reaches clients
#: as a float, and a client's float comparison lets through values over it)
MAX_JSON_INT = 2**53


class Input(BaseModel):
    """A request body: unknown fields refused, and JSON types as the schema says them
    (strict: no ``0`` for ``false``, no ``"5"`` for ``5``; times are still ISO strings).
    A JSON number with no fraction (``3.0``) is an integer, as JSON Schema says."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _integral_numbers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        ints = _integer_fields(cls)
        return {
            k: int(v) if k in ints and type(v) is float and v.is_integer() else v
            for k, v in data.items()
        }


@functools.cache
def _integer_fields(model: type[BaseModel]) -> frozenset[str]:
    """The fields of *model* that take an integer and not a float."""
    out = set()
    for name, info in model.model_fields.items():
        kinds = set(get_args(info.annotation)) | {info.annotation}
        if int in kinds and float not in kinds:
            out.add(info.alias or name)
    return frozenset(out)


#: an absolute path with no ".." part and not "/" alone (what the validators below take)
_PART = r"(?:[^/\x00.][^/\x00]*|\.(?:[^/\x00.][^/\x00]*)?|\.\.[^/\x00]+)"
ABSOLUTE_PATH_PATTERN = rf"^/+(?:{_PART}/+)*{_PART}/*$"
#: the same, naming a file: no "/" at its end
FILE_PATH_PATTERN = rf"^/+(?:{_PART}/+)*{_PART}$"


class MountSpec(Input):
    source: str = Field(
        json_schema_extra={"pattern": ABSOLUTE_PATH_PATTERN},
        description="absolute host path inside an operator-allowed root",
    )
    target: str = Field(
        json_schema_extra={"pattern": ABSOLUTE_PATH_PATTERN},
        description="absolute path in the session",
    )
    read_only: bool = False

    @field_validator("source", "target")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or "\x00" in value or ".." in value.split("/"):
            raise ValueError("must be an absolute path without '..'")
        return value


class FolderMount(Input):
    """A data folder to mount in every container of the session."""

    name: str = Field(
        description="the folder's name (yours first, then your projects', then shared) or id",
        pattern=FOLDER_REF_PATTERN,
    )
    target: str | None = Field(
        default=None,
        max_length=1024,
        json_schema_extra={"pattern": ABSOLUTE_PATH_PATTERN},
        description="absolute path; default /home/work/NAME",
    )
    read_only: bool = False

    @field_validator("target")
    @classmethod
    def _target(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith("/") or "\x00" in value or ".." in value.split("/"):
            raise ValueError("must be an absolute path without '..'")
        if value.rstrip("/") == "":
            raise ValueError("must not be /")
        return value.rstrip("/")


class SecretMount(Input):
    """A user secret the session receives (docs/secrets.md): as the environment variable
    *env* (default: its name), or as a file of mode 0400 at *path*."""

    model_config = ConfigDict(json_schema_extra={"not": {"required": ["env", "path"]}})

    name: str = Field(
        pattern=SECRET_NAME_PATTERN, description="the secret's name (yours, then your projects')"
    )
    env: str | None = Field(
        default=None, pattern=SECRET_NAME_PATTERN, description="environment variable; default NAME"
    )
    path: str | None = Field(
        default=None,
        max_length=1024,
        json_schema_extra={"pattern": FILE_PATH_PATTERN},
        description="absolute path of a file (mode 0400) instead of a variable",
    )

    @field_validator("path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith("/") or "\x00" in value or ".." in value.split("/"):
            raise ValueError("must be an absolute path without '..'")
        if value.rstrip("/") == "" or value.endswith("/"):
            raise ValueError("must name a file")
        return value

    @model_validator(mode="after")
    def _one_target(self) -> SecretMount:
        if self.env is not None and self.path is not None:
            raise ValueError("give env or path, not both")
        return self


class SessionCreate(Input):
    """What a client asks for. Resources are per container (kernel)."""

    # a batch session runs something: its command, or its image's own (the service
    # says the same, naming the field)
    # and a cluster mode goes with a cluster of 2 or more, and only with one
    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                {
                    "anyOf": [
                        {"properties": {"type": {"const": "interactive"}}, "required": ["type"]},
                        {"properties": {"command": {"minItems": 1}}, "required": ["command"]},
                        {"properties": {"image": {"type": "string"}}, "required": ["image"]},
                    ]
                },
                {
                    "anyOf": [
                        {
                            "properties": {
                                "cluster_mode": {"type": "null"},
                                "cluster_size": {"maximum": 1},
                            }
                        },
                        {
                            "properties": {
                                "cluster_mode": {"type": "string"},
                                "cluster_size": {"minimum": 2},
                            },
                            "required": ["cluster_mode", "cluster_size"],
                        },
                    ]
                },
            ]
        }
    )

    type: SessionType = "batch"
    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    image: ImageReference | None = Field(
        default=None, description="image reference; runtime default if absent"
    )
    command: Arguments = Field(default_factory=list)
    env: Environment = Field(default_factory=dict)
    workdir: str | None = Field(default=None, max_length=1024, pattern=WORKDIR_PATTERN)
    working_dir: str | None = Field(
        default=None,
        pattern=DIGEST_PATTERN,
        description="sha256:<hex> of a working-directory tar uploaded to /v1/blobs; the job "
        "starts inside a fresh copy of it",
    )
    resources: dict[str, str | int | float] = Field(
        default_factory=dict,
        json_schema_extra=slot_map_schema(),
        description='e.g. {"cpu": "2", "mem": "4g", "cuda.shares": "0.5"}',
    )
    mounts: list[MountSpec] = Field(default_factory=list, max_length=64)
    folders: list[FolderMount] = Field(
        default_factory=list, max_length=64, description="data folders to mount (docs/folders.md)"
    )
    secrets: list[SecretMount] = Field(
        default_factory=list,
        max_length=32,
        description="user secrets it receives (docs/secrets.md); values never travel here",
    )
    automount: bool = Field(
        default=True, description="also mount the owner's dot-folders (.local, .cache ...)"
    )
    resource_group: str = Field(default="default", pattern=NAME_PATTERN)
    project: str | None = Field(default=None, pattern=NAME_PATTERN)
    priority: int = Field(default=50, ge=0, le=100)
    cluster_size: int = Field(
        default=1, ge=1, le=64, description="containers (resources are per container)"
    )
    cluster_mode: ClusterMode | None = Field(
        default=None,
        validate_default=True,
        description="single-node: every container on one node, on a private network; "
        "multi-node: across nodes of the group (docs/cluster-sessions.md). Required with "
        "cluster_size > 1, refused without",
    )
    stop_when: StopWhen = Field(
        default="main-done",
        description="a cluster session ends when main1 ends (main-done) or when every "
        "container has ended (all-done)",
    )
    constraints: dict[str, str] = Field(default_factory=dict, description="node labels to match")
    depends_on: list[str] = Field(default_factory=list, max_length=256)
    starts_at: Annotated[
        datetime | timedelta | None,
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "string", "format": "date-time"},
                    {"type": "string", "pattern": DELAY_PATTERN},
                    {"type": "null"},
                ]
            }
        ),
    ] = Field(default=None, description="ISO 8601 time or a delay such as +10m (database clock)")
    idle_timeout: int | None = Field(
        default=None, ge=60, le=2**31 - 1, description="seconds (interactive)"
    )
    count: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="an array: this many sessions from one request, all or none, each "
        "with JOBGATE_ARRAY_INDEX (0..count-1); the operator's limit is "
        "JOBGATE_MAX_ARRAY_COUNT (docs/arrays.md)",
    )
    max_retries: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description="re-runs of a batch session after its node was lost "
        "(default: the resource group's, docs/node-loss.md)",
    )
    preemptible: bool | None = Field(
        default=None,
        description="may the scheduler stop it for a higher-ranked session and queue it "
        "again, in groups with preemption on (default: batch sessions yes, interactive "
        "no; docs/fair-share.md)",
    )
    callback_url: str | None = Field(
        default=None,
        max_length=2048,
        json_schema_extra={"pattern": URL_PATTERN},
        description="http(s) URL told when the session ends: a Standard Webhooks v1 signed "
        "POST {type, timestamp, data} (docs/pipelines.md)",
    )
    callback_secret: str | None = Field(
        default=None,
        pattern=CALLBACK_SECRET_PATTERN,
        description="whsec_... secret the callback is signed with (default: a new one, "
        "in the create answer)",
    )

    @field_validator("cluster_mode")
    @classmethod
    def _mode_goes_with_size(cls, value: str | None, info: ValidationInfo) -> str | None:
        size = info.data.get("cluster_size")
        if size is None:  # cluster_size itself is invalid: that error says enough
            return value
        if value is not None and size < 2:
            raise ValueError("a cluster mode needs cluster_size of 2 or more")
        if value is None and size > 1:
            raise ValueError(f"cluster_size {size} needs a cluster_mode: single-node or multi-node")
        return value

    @field_validator("workdir", mode="before")  # before the pattern: a clearer message
    @classmethod
    def _workdir(cls, value: object) -> object:
        if isinstance(value, str) and (not value.startswith("/") or "\x00" in value):
            raise ValueError("must be an absolute path")
        return value

    @field_validator("starts_at", mode="before")
    @classmethod
    def _starts_at(cls, value: object) -> object:
        if isinstance(value, bool | int | float):  # the schema says a string: no epochs
            raise ValueError("an ISO 8601 time or a delay such as +10m")
        return parse_start(value) if isinstance(value, str) else value

    @field_validator("depends_on")
    @classmethod
    def _deps(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))

"""Worker settings, from ``JOBGATE_*`` environment variables (or ``jobgate worker run`` flags)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import platformdirs
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from workers.identity import load_identity

__all__ = ["WorkerSettings"]


def _split(value: object) -> object:
    if isinstance(value, str):
        return [p.strip() for p in value.split(",") if p.strip()]
    return value


class WorkerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JOBGATE_", extra="ignore")

    redis_url: str = "redis://127.0.0.1:6379/0"
    gateway_url: str = "http://127.0.0.1:8420"
    #: what the worker presents once per node to join and get the node's own credential
    #: (kept in DATA_DIR/worker/{node}/node-credential; workers/credential.py)
    join_token: SecretStr = SecretStr("")
    #: deprecated: the old shared node token, taken as the join token when unset
    node_token: SecretStr = SecretStr("")
    data_dir: Path = Field(default_factory=lambda: Path(platformdirs.user_data_dir("jobgate")))

    #: empty: ``<hostname>-<suffix>``, the suffix kept in the data dir (workers/identity.py)
    node_id: str = ""
    #: set from DATA_DIR/worker/instance by :meth:`resolved`; labels every container
    instance_id: str = ""
    #: the address the app proxy reaches this node's published ports on
    node_address: str = "127.0.0.1"
    resource_group: str = "default"
    node_labels: Annotated[list[str], NoDecode] = Field(default_factory=list)  # k=v,k=v
    worker_runtime: str = "process"
    #: accelerator plugins: "auto" (those that find devices), "none", or names: cuda,mock
    accelerators: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["auto"])
    #: override what the node offers (default: what the machine has)
    worker_cpu: str | None = None
    worker_mem: str | None = None

    #: the node is alive while its heartbeat key is: the gateway counts it lost once the
    #: key expired and its ``node_lost_after_s`` passed (docs/node-loss.md)
    heartbeat_interval_s: float = 2.0
    heartbeat_ttl_s: float = 6.0
    #: the node's keeper (workers/keeper.py) keeps it alive while its worker restarts,
    #: and gives up once the worker was silent this long (the gateway's setting of the
    #: same name declares the node lost then)
    node_max_disconnect_s: float = Field(default=300.0, gt=0)
    #: on SIGTERM/SIGINT stop the node's sessions too (jobgate up); else leave them running
    stop_kernels_on_exit: bool = False
    #: the reason those sessions end with (``jobgate up`` says "jobgate up stopped");
    #: empty: the runtime's own ("stopped on request (SIGTERM)")
    stop_kernels_reason: str = ""
    stop_grace_s: float = 10.0
    max_concurrent_starts: int = 32
    #: serve Prometheus metrics on this port (workers/metrics.py); unset: not served
    worker_metrics_port: int | None = Field(default=None, ge=1, le=65535)
    #: the address the metrics endpoint listens on (0.0.0.0 for a remote Prometheus)
    worker_metrics_host: str = "127.0.0.1"
    #: root of the sysfs tree the NUMA layout is read from (tests point it at a fake tree)
    numa_sysfs_root: Path = Path("/")
    #: where working directories are cached and unpacked (default: the node's state dir);
    #: a rootless Podman user other than the worker's must be able to reach it
    workdir_root: Path | None = None
    #: the node's cache of working-directory tars is pruned (least recently used) to this
    workdir_cache_bytes: int = Field(default=10 * 1024**3, ge=0)
    #: data folders (``FOLDERS_ROOT/<id>``): the same shared directory the gateway writes,
    #: at the same path on every node; default DATA_DIR/storage/folders (docs/folders.md)
    folders_root: Path | None = None
    #: a sim host: this many simulated nodes in one process (node ids <node_id>-0000 ...)
    sim_nodes: int = 0

    @field_validator("node_labels", "accelerators", mode="before")
    @classmethod
    def _list(cls, value: object) -> object:
        return _split(value)

    @property
    def labels(self) -> dict[str, str]:
        out = {}
        for item in self.node_labels:
            key, _, value = item.partition("=")
            out[key.strip()] = value.strip()
        return out

    def resolved(self) -> WorkerSettings:
        """A copy with node_id and instance_id filled in from the data dir."""
        if self.node_id and self.instance_id:
            return self
        identity = load_identity(self.data_dir, self.node_id)
        return self.model_copy(
            update={"node_id": identity.node_id, "instance_id": identity.instance}
        )

    @property
    def effective_folders_root(self) -> Path:
        return self.folders_root or self.data_dir / "storage" / "folders"

    @property
    def effective_join_token(self) -> str:
        return self.join_token.get_secret_value() or self.node_token.get_secret_value()

    @property
    def state_dir(self) -> Path:
        return self.data_dir / "worker" / self.node_id

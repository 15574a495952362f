"""What Slurm's commands print, parsed into dataclasses (no processes run here).

``scontrol show job -o`` / ``scontrol show node -o`` and the jobcomp/filetxt file print
one record a line as ``Key=Value`` pairs, where a value may hold spaces (``OS=Linux 6.1
#1 SMP``): a value runs until the next ``Key=``. ``squeue`` prints the fields of
:data:`SQUEUE_FORMAT`, ``|``-separated, the free-text reason last.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

__all__ = [
    "ACTIVE_STATES",
    "SQUEUE_FORMAT",
    "Gres",
    "JobRecord",
    "QueueEntry",
    "SlurmNode",
    "parse_gres",
    "parse_job",
    "parse_jobcomp",
    "parse_node",
    "parse_record",
    "parse_squeue",
    "slurm_time",
]

#: states in which a job has not ended yet (squeue's and scontrol's long names)
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)
#: not yet on a node: the job has not started
WAITING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD"})

#: job id, name, state, allocated nodes, requested nodes, comment, reason (last: free text)
SQUEUE_FORMAT = "%i|%j|%T|%N|%n|%k|%r"

_KEY = re.compile(r"(?:^|\s)([A-Za-z][\w:/]*)=")


def parse_record(line: str) -> dict[str, str]:
    """One ``Key=Value Key=Value`` line; a value runs until the next key."""
    keys = list(_KEY.finditer(line))
    out: dict[str, str] = {}
    for i, match in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        out[match.group(1)] = line[match.end() : end].strip()
    return out


def _none(value: str) -> str:
    return "" if value in ("(null)", "None", "N/A", "n/a") else value


def slurm_time(value: str) -> float | None:
    """``2026-11-29T22:33:43`` (the cluster's local time) as epoch seconds."""
    try:
        return time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Gres:
    """One generic resource of a node: ``gpu:tesla:2`` -> name gpu, type tesla, count 2."""

    name: str
    type: str
    count: int


def parse_gres(text: str) -> list[Gres]:
    """``gpu:tesla:2,gpu:a100:4(S:0-1),mps:100`` -> Gres; ``(null)`` -> []."""
    out = []
    for item in re.split(r",(?![^(]*\))", _none(text)):
        item = re.sub(r"\(.*\)$", "", item.strip())
        if not item:
            continue
        parts = item.split(":")
        count = 1
        if len(parts) > 1 and parts[-1].isdigit():
            count = int(parts.pop())
        out.append(Gres(parts[0], parts[1] if len(parts) > 1 else "", count))
    return out


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """A node as ``scontrol show node -o`` describes it."""

    name: str
    address: str
    hostname: str
    arch: str
    cpus: int
    real_memory_mb: int
    gres: list[Gres]
    features: list[str]
    #: ``IDLE``, ``MIXED+DRAIN``, ``DOWN*+NOT_RESPONDING`` ... as Slurm words it
    state: str
    partitions: list[str]
    reason: str = ""

    @property
    def flags(self) -> set[str]:
        return {f.rstrip("*~#!%$@^-") for f in self.state.split("+") if f}

    @property
    def unavailable(self) -> str | None:
        """Why it cannot take a session now (words), or None."""
        bad = self.flags & {
            "DOWN",
            "DRAIN",
            "DRAINING",
            "DRAINED",
            "FAIL",
            "FAILING",
            "NOT_RESPONDING",
            "RESERVED",
            "MAINTENANCE",
            "POWERED_DOWN",
            "POWERING_DOWN",
            "FUTURE",
            "INVALID_REG",
            "REBOOT_REQUESTED",
            "REBOOT_ISSUED",
        }
        if self.state.rstrip().endswith("*"):
            bad.add("NOT_RESPONDING")
        if not bad:
            return None
        return f"Slurm node {self.name} is {self.state}" + (
            f" ({self.reason})" if self.reason else ""
        )


def parse_node(line: str) -> SlurmNode:
    r = parse_record(line)
    return SlurmNode(
        name=r["NodeName"],
        address=_none(r.get("NodeAddr", "")) or r["NodeName"],
        hostname=_none(r.get("NodeHostName", "")) or r["NodeName"],
        arch=_none(r.get("Arch", "")),
        cpus=int(r.get("CPUEfctv") or r.get("CPUTot") or 0),
        real_memory_mb=int(r.get("RealMemory", "0") or 0),
        gres=parse_gres(r.get("Gres", "")),
        features=[f for f in _none(r.get("AvailableFeatures", "")).split(",") if f],
        state=r.get("State", ""),
        partitions=[p for p in _none(r.get("Partitions", "")).split(",") if p],
        reason=_none(r.get("Reason", "")),
    )


class _JobState:
    """``active`` and ``waiting`` from a job's Slurm state (its ``state`` field)."""

    __slots__ = ()
    state: str

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def waiting(self) -> bool:
        return self.state in WAITING_STATES


@dataclass(frozen=True, slots=True)
class JobRecord(_JobState):
    """A job as ``scontrol show job -o`` (or a jobcomp/filetxt line) describes it."""

    job_id: str
    name: str
    state: str
    exit_code: int
    exit_signal: int
    reason: str = ""
    nodes: str = ""
    comment: str = ""
    start_time: float | None = None
    end_time: float | None = None
    raw: dict[str, str] = field(default_factory=dict, repr=False)


def _exit(text: str) -> tuple[int, int]:
    code, _, sig = text.partition(":")
    return (int(code) if code.isdigit() else 0, int(sig) if sig.isdigit() else 0)


def _job(r: dict[str, str], name_key: str) -> JobRecord:
    code, sig = _exit(r.get("ExitCode", "0:0"))
    return JobRecord(
        job_id=r["JobId"],
        name=r.get(name_key, ""),
        # "CANCELLED by 0" in scontrol's JobState: the first word is the state
        state=r.get("JobState", "").split(" ")[0],
        exit_code=code,
        exit_signal=sig,
        reason=_none(r.get("Reason", "")),
        nodes=_none(r.get("NodeList", "")),
        comment=_none(r.get("Comment", "")),
        start_time=slurm_time(r.get("StartTime", "")),
        end_time=slurm_time(r.get("EndTime", "")),
        raw=r,
    )


def parse_job(line: str) -> JobRecord:
    """One line of ``scontrol show job -o``."""
    return _job(parse_record(line), "JobName")


def parse_jobcomp(text: str, job_id: str) -> JobRecord | None:
    """The last record of *job_id* in a jobcomp/filetxt file's text (ids are reused
    after a controller's state is wiped: the latest line wins)."""
    found = None
    for line in text.splitlines():
        if line.startswith(f"JobId={job_id} "):
            found = _job(parse_record(line), "Name")
    return found


@dataclass(frozen=True, slots=True)
class QueueEntry(_JobState):
    """One line of ``squeue --noheader -o SQUEUE_FORMAT``."""

    job_id: str
    name: str
    state: str
    nodes: str
    requested_nodes: str
    comment: str
    reason: str


def parse_squeue(text: str) -> list[QueueEntry]:
    out = []
    for line in text.splitlines():
        parts = line.strip().split("|", 6)
        if len(parts) != 7:
            continue
        job_id, name, state, nodes, requested, comment, reason = parts
        out.append(
            QueueEntry(
                job_id, name, state, _none(nodes), _none(requested), _none(comment), _none(reason)
            )
        )
    return out

"""When a Slurm job has ended, by the rule of issue 30: squeue empty or failing never
means gone; scontrol show job decides; an aged-out record is read from the jobcomp
file, else the job is reported lost, saying why (stand-in Slurm commands)."""

from __future__ import annotations

from pathlib import Path

from plugins.runtimes.base import ExitStatus, RuntimeContext
from plugins.runtimes.slurm.cli import SlurmCli
from plugins.runtimes.slurm.records import JobRecord
from plugins.runtimes.slurm.runtime import SlurmRuntime, SlurmSettings

OUTPUT = Path(__file__).parent / "slurm_output"
INVALID = 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1\n'
UNREACHABLE = 'echo "error: Unable to contact slurm controller (connect failure)" >&2; exit 1\n'


def runtime(
    tmp_path: Path, squeue: str, scontrol: str, jobcomp: Path | None = None
) -> SlurmRuntime:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for name, body in (("squeue", squeue), ("scontrol", scontrol)):
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    rt = SlurmRuntime(SlurmSettings(jobcomp_file=jobcomp), RuntimeContext("node1", tmp_path))
    rt.cli = SlurmCli(timeout_s=5, retries=1, backoff_s=0.01, bin_dir=bin_dir)
    return rt


async def test_an_empty_squeue_is_not_an_end_while_scontrol_says_it_runs(tmp_path: Path) -> None:
    running = (OUTPUT / "failed.txt").read_text().replace("JobState=FAILED", "JobState=RUNNING")
    (tmp_path / "running.txt").write_text(running)
    rt = runtime(tmp_path, "exit 0\n", f"cat {tmp_path / 'running.txt'}\n")
    assert await rt.ended("37") is None


async def test_a_failing_slurm_is_not_an_end(tmp_path: Path) -> None:
    rt = runtime(tmp_path, UNREACHABLE, UNREACHABLE, jobcomp=OUTPUT / "jobcomp.txt")
    assert await rt.ended("37") is None


async def test_scontrol_gives_the_end(tmp_path: Path) -> None:
    rt = runtime(tmp_path, "exit 0\n", f"cat {OUTPUT / 'failed.txt'}\n")
    end = await rt.ended("37")
    assert isinstance(end, JobRecord)
    assert (end.state, end.exit_code) == ("FAILED", 3)


async def test_an_aged_out_record_is_read_from_the_jobcomp_file(tmp_path: Path) -> None:
    rt = runtime(tmp_path, INVALID, INVALID, jobcomp=OUTPUT / "jobcomp.txt")
    end = await rt.ended("37")
    assert isinstance(end, JobRecord)
    assert (end.name, end.state, end.exit_code) == ("jobgate-k1", "FAILED", 3)


async def test_an_aged_out_record_without_jobcomp_is_lost_with_a_reason(tmp_path: Path) -> None:
    rt = runtime(tmp_path, INVALID, INVALID)
    assert await rt.ended("37") == ExitStatus(
        exit_code=255,
        reason="lost: Slurm no longer knows job 37 (its record aged out), and no jobcomp "
        "file is configured (JOBGATE_SLURM_JOBCOMP_FILE)",
    )
    listed = runtime(tmp_path / "b", INVALID, INVALID, jobcomp=OUTPUT / "jobcomp.txt")
    lost = await listed.ended("99")
    assert isinstance(lost, ExitStatus)
    assert lost.reason == (
        f"lost: Slurm no longer knows job 99 (its record aged out), nor does "
        f"{OUTPUT / 'jobcomp.txt'}"
    )

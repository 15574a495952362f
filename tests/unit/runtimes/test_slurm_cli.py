"""The Slurm command layer against stand-in commands: retries while the controller does
not answer, Slurm's own words for a refusal, an aged-out job id is not an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from plugins.runtimes.slurm.cli import SlurmCli, SlurmRefused, SlurmUnavailable

OUTPUT = Path(__file__).parent / "slurm_output"


def command(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def cli(bin_dir: Path) -> SlurmCli:
    return SlurmCli(timeout_s=5, retries=2, backoff_s=0.01, bin_dir=bin_dir)


async def test_a_controller_that_answers_on_the_third_try(tmp_path: Path) -> None:
    count = tmp_path / "count"
    command(
        tmp_path,
        "scontrol",
        f'echo x >> {count}\n[ "$(wc -l < {count})" -ge 3 ] && '
        f"cat {OUTPUT / 'failed.txt'} && exit 0\n"
        'echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2\n'
        "exit 1\n",
    )
    job = await cli(tmp_path).show_job("37")
    assert job is not None
    assert (job.state, job.exit_code) == ("FAILED", 3)
    assert len(count.read_text().splitlines()) == 3


async def test_a_controller_that_never_answers_is_a_typed_error(tmp_path: Path) -> None:
    command(
        tmp_path,
        "squeue",
        'echo "squeue: error: Unable to contact slurm controller (connect failure)" >&2\nexit 1\n',
    )
    with pytest.raises(SlurmUnavailable, match="Slurm does not answer \\(squeue\\)"):
        await cli(tmp_path).squeue(jobs=["1"])


async def test_a_command_that_hangs_is_given_up_on(tmp_path: Path) -> None:
    command(tmp_path, "squeue", "exec sleep 30\n")
    slow = SlurmCli(timeout_s=0.2, retries=1, backoff_s=0.01, bin_dir=tmp_path)
    with pytest.raises(SlurmUnavailable, match=r"did not answer within 0\.2s"):
        await slow.squeue()


async def test_an_aged_out_job_is_none_not_an_error(tmp_path: Path) -> None:
    command(
        tmp_path, "scontrol", 'echo "slurm_load_jobs error: Invalid job id specified" >&2\nexit 1\n'
    )
    command(
        tmp_path, "squeue", 'echo "slurm_load_jobs error: Invalid job id specified" >&2\nexit 1\n'
    )
    assert await cli(tmp_path).show_job("999") is None
    assert await cli(tmp_path).squeue(jobs=["999"]) == []


async def test_sbatch_refusal_is_slurm_s_own_message(tmp_path: Path) -> None:
    command(
        tmp_path,
        "sbatch",
        'echo "sbatch: error: Memory specification can not be satisfied" >&2\n'
        'echo "sbatch: error: Batch job submission failed: Requested node configuration is not '
        'available" >&2\nexit 1\n',
    )
    with pytest.raises(SlurmRefused) as caught:
        await cli(tmp_path).sbatch(["--mem=5000M"], tmp_path / "job.sh")
    assert str(caught.value) == (
        "Memory specification can not be satisfied; Batch job submission failed: "
        "Requested node configuration is not available"
    )


async def test_sbatch_parsable_gives_the_id(tmp_path: Path) -> None:
    command(tmp_path, "sbatch", 'echo "$@" > ' + str(tmp_path / "args") + '\necho "42;cluster"\n')
    assert await cli(tmp_path).sbatch(["--nodelist=node1"], tmp_path / "job.sh") == "42"
    assert (tmp_path / "args").read_text().split() == [
        "--parsable",
        "--nodelist=node1",
        str(tmp_path / "job.sh"),
    ]


async def test_scancel_of_an_ended_job_is_fine(tmp_path: Path) -> None:
    command(
        tmp_path,
        "scancel",
        'echo "scancel: error: Kill job error on job id 37: Job/step already completing or '
        'completed" >&2\nexit 1\n',
    )
    await cli(tmp_path).scancel("37", signal="TERM", batch=True)

"""The ``slurm`` runtime: jobgate queues and decides, an existing Slurm cluster runs.

One jobgate node per Slurm node; each kernel is one batch job pinned to its node
(``sbatch --nodelist``). Modules: :mod:`.records` (what Slurm says, parsed),
:mod:`.cli` (the commands, with timeouts and retries), :mod:`.nodes` (a Slurm node as a
jobgate node: capacity, GPUs, labels), :mod:`.runtime` (:class:`SlurmRuntime`).
"""

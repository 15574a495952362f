#!/usr/bin/env bash
# Prove the cuda accelerator plugin on a machine with an NVIDIA GPU, in one command.
#
#   scripts/gpu-proof.sh [--shares-per-device N]
#
# Prints, one JSON object per line: the fingerprint, the reservation of one whole GPU,
# the reservation of 0.5 cuda.shares (checked against the memory it must entitle), and,
# when nvidia-cuda-mps-control is installed, an MPS check (daemon in a temporary pipe
# directory, a CUDA client that must be held to its pinned memory limit). The last line
# sums it up; the exit status is 0 only when every check passed (1: a check failed or
# no healthy GPU, 2: this machine cannot run the proof at all).
#
# Needs Python 3.11+ with pydantic, pydantic-settings and nvidia-ml-py (the project's
# .venv has them; PYTHON=... picks another interpreter). JOBGATE_CUDA_* variables
# configure the plugin as on a worker (JOBGATE_CUDA_FAKE_NVML runs it on the fake NVML).
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-}
if [[ -z "$python" ]]; then
  if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
if ! "$python" -c 'import pynvml, pydantic_settings' 2>/dev/null; then
  echo "gpu-proof: $python cannot import pynvml and pydantic_settings;" \
       "install the project (pip install -e .) or set PYTHON=" >&2
  exit 2
fi
if [[ -z "${JOBGATE_CUDA_FAKE_NVML:-}" ]] && ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu-proof: nvidia-smi is not on PATH; NVML will say what it finds" >&2
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m plugins.accelerators.cuda --proof "$@"

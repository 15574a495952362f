"""Prove the cuda plugin against the real driver of this machine, in one command.

``python -m plugins.accelerators.cuda --proof`` (or ``scripts/gpu-proof.sh``) prints, one
JSON object per line:

1. ``fingerprint`` - what the plugin sees (UUIDs, memory, SMs, NUMA, MIG, health);
2. ``reserve_device`` - the reservation for one whole GPU (discrete mode);
3. ``reserve_share`` - the reservation for 0.5 ``cuda.shares`` of it (fractional mode,
   ``--shares-per-device``, default 1, so 0.5 is half the GPU), checked against
   ``floor(0.5 / shares_per_device * memory)``;
4. ``mps`` - when ``nvidia-cuda-mps-control`` is on PATH: starts an MPS control daemon
   in a temporary pipe directory, fingerprints with it (enforcement must be ``mps``),
   reserves 0.5 shares and runs a CUDA client (driver API through ctypes, no toolkit
   needed) with the reservation's environment: allocating half its limit must work,
   allocating 512 MiB more than the limit must fail with CUDA_ERROR_OUT_OF_MEMORY;
5. a last line ``{"ok": ..., ...}`` summing it up. Exit status 0 only when all passed.

With ``JOBGATE_CUDA_FAKE_NVML`` set it runs against the fake NVML instead, which is how
this module is itself tested on machines without a GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

from plugins.accelerators.base import Allocation, Device, Fingerprint
from plugins.accelerators.cuda.plugin import CudaPlugin
from plugins.accelerators.cuda.settings import CudaSettings
from plugins.accelerators.sharing import DEVICE_SLOT, SHARES_SLOT

__all__ = ["run_proof"]

Emit = Callable[[dict[str, Any]], None]
HALF = Decimal("0.5")
CUDA_ERROR_OUT_OF_MEMORY = 2

# A CUDA client using only the driver API (libcuda ships with the driver).
_CLIENT = r"""
import ctypes, json, sys
limit = int(sys.argv[1])
cuda = ctypes.CDLL("libcuda.so.1")
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
rc = cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(dev), 0)
rc = rc or cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) or cuda.cuCtxSetCurrent(ctx)
if rc:
    print(json.dumps({"error": f"CUDA init failed with {rc}"}))
    sys.exit(1)
free, total, ptr = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_uint64()
cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
small = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(limit // 2))
if small == 0:
    cuda.cuMemFree_v2(ptr)
big = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(limit + 512 * 1024 * 1024))
print(json.dumps({"total": total.value, "free": free.value,
                  "half_limit_alloc": small, "over_limit_alloc": big}))
"""


def _settings(base: CudaSettings, **update: Any) -> CudaSettings:
    return CudaSettings(**{**base.model_dump(), **update})


def _fingerprint_json(fp: Fingerprint) -> dict[str, Any]:
    return {
        "plugin": fp.plugin,
        "enforcement": fp.enforcement,
        "detail": fp.detail,
        "slot_types": [{"name": s.name, "quantum": str(s.quantum)} for s in fp.slot_types],
        "devices": [d.to_json() for d in fp.devices],
    }


def run_proof(base: CudaSettings, shares_per_device: Decimal, emit: Emit) -> bool:
    """Run every step, emitting one JSON object each; True when all passed."""
    discrete = CudaPlugin(_settings(base, mode="discrete"))
    fp = discrete.fingerprint()
    emit({"step": "fingerprint", **_fingerprint_json(fp)})
    healthy = [d for d in fp.devices if d.health == "healthy"]
    if not healthy:
        emit({"ok": False, "reason": f"no healthy CUDA device: {fp.detail}"})
        return False
    device = healthy[0]
    whole = discrete.reserve(Allocation(DEVICE_SLOT, {device.id: Decimal(1)}))
    emit({"step": "reserve_device", "device": device.id, **whole.to_json()})
    checks = {"device_env": whole.env.get("CUDA_VISIBLE_DEVICES") == device.id}

    shared = CudaPlugin(
        _settings(
            base,
            mode="fractional",
            shares_per_device=shares_per_device,
            allow_unenforced_fractions=True,
        )
    )
    shared.fingerprint()
    part = shared.reserve(Allocation(SHARES_SLOT, {device.id: HALF}))
    expected = int(HALF * device.memory / shares_per_device)
    emit(
        {
            "step": "reserve_share",
            "device": device.id,
            "shares": "0.5",
            "expected_memory_bytes": expected,
            **part.to_json(),
        }
    )
    checks["share_memory"] = part.env.get("JOBGATE_CUDA_MEMORY_BYTES") == str(expected)

    if shutil.which("nvidia-cuda-mps-control"):
        mps = _mps_check(base, device, shares_per_device)
        emit({"step": "mps", **mps})
        checks["mps_limit"] = bool(mps.get("ok"))
    else:
        emit({"step": "mps", "skipped": "nvidia-cuda-mps-control is not on PATH"})
    ok = all(checks.values())
    emit({"ok": ok, "devices": len(fp.devices), "checks": checks})
    return ok


def _mps_check(base: CudaSettings, device: Device, shares_per_device: Decimal) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="jobgate-mps-") as tmp:
        pipe, logs = Path(tmp, "pipe"), Path(tmp, "log")
        pipe.mkdir()
        logs.mkdir()
        env = {
            **os.environ,
            "CUDA_MPS_PIPE_DIRECTORY": str(pipe),
            "CUDA_MPS_LOG_DIRECTORY": str(logs),
        }
        # The daemon forks into the background: its output goes to a file, never to a
        # pipe we would wait on for ever.
        with Path(tmp, "start.log").open("w+b") as out:
            try:
                started = subprocess.run(
                    ["nvidia-cuda-mps-control", "-d"],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=30,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                return {"ok": False, "error": "nvidia-cuda-mps-control -d did not return in 30 s"}
            if started.returncode != 0:
                out.seek(0)
                said = out.read().decode(errors="replace").strip()
                return {"ok": False, "error": f"MPS daemon did not start: {said}"}
        try:
            return _mps_client(base, device, shares_per_device, pipe)
        finally:
            subprocess.run(
                ["nvidia-cuda-mps-control"],
                input=b"quit\n",
                env=env,
                timeout=30,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )


def _mps_client(
    base: CudaSettings, device: Device, shares_per_device: Decimal, pipe: Path
) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while not (pipe / "control").is_socket() and time.monotonic() < deadline:
        time.sleep(0.1)
    plugin = CudaPlugin(
        _settings(
            base,
            mode="fractional",
            shares_per_device=shares_per_device,
            enforcement="mps",
            mps_pipe_dir=pipe,
        )
    )
    fp = plugin.fingerprint()
    if fp.enforcement != "mps":
        return {"ok": False, "error": f"enforcement is {fp.enforcement}: {fp.detail}"}
    reservation = plugin.reserve(Allocation(SHARES_SLOT, {device.id: HALF}))
    limit = reservation.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]  # "0=<MiB>M"
    limit_mib = int(limit.split("=")[1].rstrip("M"))
    report: dict[str, Any] = {"limit_mib": limit_mib, "env": reservation.env}
    cuda_env = {k: v for k, v in reservation.env.items() if k.startswith("CUDA_")}
    done = subprocess.run(
        [sys.executable, "-c", _CLIENT, str(limit_mib * 1024 * 1024)],
        env={**os.environ, **cuda_env},
        capture_output=True,
        timeout=120,
        check=False,
    )
    try:
        result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
        return {"ok": False, "error": f"the CUDA client failed: {' '.join(tail)}", **report}
    ok = (
        result.get("half_limit_alloc") == 0
        and result.get("over_limit_alloc") == CUDA_ERROR_OUT_OF_MEMORY
    )
    return {"ok": ok, "client": result, **report}

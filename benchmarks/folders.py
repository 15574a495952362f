"""Data folder transfers through the gateway vs a plain ``cp`` on the same disk.

The data folders issue's goals: upload and download throughput at least 0.8x of ``cp``
on the same disk, and gateway memory (RSS) growing by less than 50 MB during a 1 GiB
transfer (the gateway streams: nothing is buffered whole). On a shared, loaded machine
the wall-clock ratios swing with the neighbours, so it also reports the CPU seconds
the gateway process and the client spent per GiB: those barely depend on the load. It starts
``jobgate up --runtime process`` in a temporary directory (SQLite, private Redis, free
ports), writes a file of random bytes there, and then:

    cp   FILE ─▶ COPY                                   (the anchor, page cache warm)
    put  FILE ─▶ tus POST + PATCH ─▶ the folder          (jobgate.transfer.upload)
    get  the folder's file ─▶ LOCAL                      (jobgate.transfer.download)

sampling the gateway process's VmRSS every 20 ms during each transfer, and its CPU time
(``/proc/PID/stat``) and the client's before and after, and checking that
the sha256 of what came back is the file's. Each timing ends when the file written is on
disk (``fsync`` of that file: ``os.sync`` also timed whatever the neighbours had left
dirty, and swung the anchor from 350 to 1,500 MB/s between runs). ``--rounds N`` repeats
cp-put-cp-get N times and reports the median of each figure (each ratio from its own
round). It stops only what it started. Progress goes to stderr; the last line of stdout
is one JSON object.

    .venv/bin/python benchmarks/folders.py --size-mb 1024 --rounds 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import jobgate_up

from jobgate.client import Client
from jobgate.profile import Profile
from jobgate.transfer import Item, download, upload

GOAL_RATIO = 0.8
GOAL_RSS_MB = 50.0
CHUNK = 64 * 1024 * 1024


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class RssSampler:
    """The peak VmRSS of one process while a ``with`` block runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.start = self.peak = rss_kb(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_kb(self.pid))

    def __enter__(self) -> RssSampler:
        self.start = self.peak = rss_kb(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def growth_mb(self) -> float:
        return (self.peak - self.start) / 1024


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gateway_pid(data: Path) -> int:
    marker = f"JOBGATE_DATA_DIR={data}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes()
            if b"gateway\0serve" in cmd and marker in (proc / "environ").read_bytes().split(b"\0"):
                return int(proc.name)
        except OSError:
            continue
    raise RuntimeError("the gateway process was not found")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def make_file(path: Path, size: int) -> None:
    with path.open("wb") as out:
        left = size
        while left:
            n = min(CHUNK, left)
            out.write(os.urandom(n))
            left -= n


def fsync(path: Path) -> None:
    """*path*'s data on disk (not the whole machine's dirty pages, as ``os.sync``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def timed_cp(source: Path, target: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["cp", str(source), str(target)], check=True)
    fsync(target)
    return time.perf_counter() - started


def start_up(root: Path) -> tuple[subprocess.Popen[bytes], Client, Path]:
    folders = str(root / "folders")  # same disk as the file and cp
    proc, port, key = jobgate_up(root, {"JOBGATE_FOLDERS_ROOT": folders})
    client = Client(Profile(url=f"http://127.0.0.1:{port}", api_key=key), timeout=120)
    return proc, client, root / "data"


def one_round(
    api: Client, pid: int, root: Path, source: Path, size: int, want: str, n: int
) -> dict[str, Any]:
    """cp, put, cp of what was stored, get: the figures of one round."""
    name = f"file{n}.bin"
    stored = root / "folders" / api.get("/v1/folders/bench")["id"] / name
    cp_up = timed_cp(source, root / "copy.bin")
    log(f"round {n}: upload through the gateway")
    with RssSampler(pid) as up_rss:
        cpu = cpu_s(pid), time.process_time()
        started = time.perf_counter()
        upload(api, "bench", Item(source, name, size), lambda n: None)
        fsync(stored)
        up_s = time.perf_counter() - started
        up_cpu = cpu_s(pid) - cpu[0], time.process_time() - cpu[1]
    cp_down = timed_cp(stored, root / "copy2.bin")
    log(f"round {n}: download through the gateway")
    back = root / "back.bin"
    with RssSampler(pid) as down_rss:
        cpu = cpu_s(pid), time.process_time()
        started = time.perf_counter()
        download(api, "bench", name, back, lambda n: None)
        fsync(back)
        down_s = time.perf_counter() - started
        down_cpu = cpu_s(pid) - cpu[0], time.process_time() - cpu[1]
    same = sha256(stored) == want and sha256(back) == want
    api.delete(f"/v1/folders/bench/files/{name}")
    for left in ("copy.bin", "copy2.bin", "back.bin"):
        (root / left).unlink()
    mb, gib = size / 1e6, size / 2**30
    return {
        "cp_mb_s": round(mb / ((cp_up + cp_down) / 2), 1),
        "upload_mb_s": round(mb / up_s, 1),
        "download_mb_s": round(mb / down_s, 1),
        "upload_vs_cp": round(cp_up / up_s, 2),
        "download_vs_cp": round(cp_down / down_s, 2),
        "gateway_cpu_s_per_gib_upload": round(up_cpu[0] / gib, 2),
        "gateway_cpu_s_per_gib_download": round(down_cpu[0] / gib, 2),
        "client_cpu_s_per_gib_upload": round(up_cpu[1] / gib, 2),
        "client_cpu_s_per_gib_download": round(down_cpu[1] / gib, 2),
        "rss_growth_upload_mb": round(up_rss.growth_mb, 1),
        "rss_growth_download_mb": round(down_rss.growth_mb, 1),
        "digests_equal": same,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="the file's size in MiB")
    parser.add_argument("--dir", type=Path, default=None, help="where (default: a temp dir)")
    parser.add_argument("--rounds", type=int, default=1, help="cp-put-cp-get rounds (medians)")
    args = parser.parse_args()
    size = args.size_mb * 1024 * 1024
    root = Path(tempfile.mkdtemp(prefix="jobgate-bench-folders-", dir=args.dir))
    proc = None
    try:
        proc, api, data = start_up(root)
        pid = gateway_pid(data)
        source = root / "file.bin"
        log(f"writing {args.size_mb} MiB of random bytes to {source}")
        make_file(source, size)
        want = sha256(source)
        api.post("/v1/folders", json={"name": "bench"})
        rounds = [
            one_round(api, pid, root, source, size, want, n) for n in range(1, args.rounds + 1)
        ]
        result: dict[str, Any] = {"size_bytes": size}
        for key in rounds[0]:
            if key == "digests_equal":
                continue
            values = [r[key] for r in rounds]
            median = statistics.median(values)
            result[key] = round(median, 2 if "vs" in key or "cpu" in key else 1)
        result["upload_vs_cp_rounds"] = [r["upload_vs_cp"] for r in rounds]
        result["download_vs_cp_rounds"] = [r["download_vs_cp"] for r in rounds]
        result["rss_growth_max_mb"] = max(
            max(r["rss_growth_upload_mb"], r["rss_growth_download_mb"]) for r in rounds
        )
        same = all(r["digests_equal"] for r in rounds)
        result["digests_equal"] = same
        result["rounds"] = args.rounds
        result["goal_ratio"] = GOAL_RATIO
        result["goal_rss_mb"] = GOAL_RSS_MB
        result["load_avg_1m"] = round(os.getloadavg()[0], 2)
        log(
            f"cp {result['cp_mb_s']} MB/s; upload {result['upload_mb_s']} MB/s "
            f"({result['upload_vs_cp']}x cp), download {result['download_mb_s']} MB/s "
            f"({result['download_vs_cp']}x cp) [median of {args.rounds}; rounds: up "
            f"{result['upload_vs_cp_rounds']}, down {result['download_vs_cp_rounds']}]; "
            f"goal >= {GOAL_RATIO}x; gateway RSS +{result['rss_growth_upload_mb']} MB "
            f"/ +{result['rss_growth_download_mb']} MB (goal < {GOAL_RSS_MB}); gateway CPU "
            f"{result['gateway_cpu_s_per_gib_upload']} s / "
            f"{result['gateway_cpu_s_per_gib_download']} s per GiB, client "
            f"{result['client_cpu_s_per_gib_upload']} s / "
            f"{result['client_cpu_s_per_gib_download']} s; digests equal: {same}"
        )
        api.close()
        print(json.dumps(result))
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(60)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Usage accounting through the real stack (PostgreSQL): a session with a fractional
mock GPU runs and ends, another still runs; the API, the CLI and the metrics count what
the records in the database say (expected values come from their times, not a clock),
each caller sees what is theirs, and bad questions get their 4xx."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import tomli_w
from harness import TERMINAL, Stack
from waiting import until

RESOURCES = {"cpu": "0.5", "mem": "256m", "cuda.shares": "0.5"}
AMOUNTS = {"cpu": 0.5, "mem": 256 * 2**20, "cuda.shares": 0.5}


async def _records(stack: Stack) -> list[asyncpg.Record]:
    url = stack.settings.effective_database_url.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(url)
    try:
        return list(
            await conn.fetch(
                "SELECT u.*, k.started_at AS k_started, k.ended_at AS k_ended FROM usage u"
                " JOIN kernels k ON k.id = u.kernel_id ORDER BY u.started_at"
            )
        )
    finally:
        await conn.close()


def _expected(records: list[asyncpg.Record], as_of: datetime) -> dict[str, float]:
    """Slot-seconds the records hold, the open ones up to *as_of*."""
    out = dict.fromkeys(AMOUNTS, 0.0)
    for r in records:
        seconds = ((r["ended_at"] or as_of) - r["started_at"]).total_seconds()
        for slot, amount in AMOUNTS.items():
            out[slot] += amount * seconds
    return out


async def _counted(stack: Stack) -> dict[str, float]:
    """jobgate_usage_slot_seconds_total of project ml, by slot (a process-wide counter)."""
    async with stack.client() as admin:
        text = (await admin.get("/metrics")).text
    out = dict.fromkeys(AMOUNTS, 0.0)
    for slot in AMOUNTS:
        line = f'jobgate_usage_slot_seconds_total{{project="ml",slot="{slot}"}} '
        out[slot] = sum(float(m.split()[-1]) for m in text.splitlines() if m.startswith(line))
    return out


def _totals(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    """key -> slot -> slot-seconds over every bucket."""
    out: dict[str, dict[str, float]] = {}
    for bucket in report["buckets"]:
        sums = out.setdefault(bucket["key"], {})
        for slot, value in bucket["slots"].items():
            sums[slot] = sums.get(slot, 0.0) + value
    return out


async def test_usage_counts_what_ran_for_those_who_may_see_it(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    devices = tmp_path / "mock-devices.toml"
    devices.write_text(
        tomli_w.dumps(
            {
                "devices": [{"kind": "cuda", "memory": "8GiB", "count": 1}],
                "cuda": {"mode": "fractional", "shares_per_device": 1, "quantum": 0.01},
            }
        )
    )
    stack.settings.allow_unenforced_fractions = True
    monkeypatch.setenv("JOBGATE_MOCK_DEVICES", str(devices))
    await stack.start_worker("n1", accelerators=["mock"])
    alice, bob = await stack.create_user("alice"), await stack.create_user("bob")
    async with stack.client() as admin:
        assert (await admin.post("/v1/projects", json={"name": "ml"})).status_code == 201
        r = await admin.post("/v1/projects/ml/members", json={"user": "alice"})
        assert r.status_code == 200, r.text
    since = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    counted = await _counted(stack)

    done = await stack.submit(alice, project="ml", command=["sleep", "0.2"], resources=RESOURCES)
    held = await stack.submit(alice, project="ml", command=["sleep", "300"], resources=RESOURCES)
    await stack.wait_status(done["id"], {"SUCCEEDED"})
    await stack.wait_status(held["id"], {"RUNNING"})
    finished, running = sorted(await _records(stack), key=lambda r: r["ended_at"] is None)
    assert (finished["session_id"], running["session_id"]) == (done["id"], held["id"])
    for r in (finished, running):  # the record's times are the kernel's
        assert (r["started_at"], r["ended_at"]) == (r["k_started"], r["k_ended"])
        assert json.loads(r["slots"]) == {"cpu": "0.5", "cuda.shares": "0.5", "mem": "268435456"}
    assert running["ended_at"] is None

    params = {"by": "project", "granularity": "hour", "from": since}
    async with stack.client(alice) as api:
        r = await api.get("/v1/usage", params=params)
    assert r.status_code == 200, r.text
    report = r.json()
    as_of = datetime.fromisoformat(report["as_of"])
    expected = _expected([finished, running], as_of)
    assert _totals(report) == {"ml": pytest.approx(expected)}  # running: up to as_of
    assert report["units"] == {
        "cpu": "cpu-seconds",
        "cuda.shares": "cuda.shares-seconds",
        "mem": "byte-seconds",
    }

    async with stack.client() as admin, stack.client(bob) as other:
        everyone = (await admin.get("/v1/usage", params=params | {"by": "user"})).json()
        assert set(_totals(everyone)) == {"alice"}
        nothing = await other.get("/v1/usage", params=params | {"by": "group"})
        assert (nothing.status_code, nothing.json()["buckets"]) == (200, [])
        for refused in ({"user": "alice"}, {"project": "ml"}):
            r = await other.get("/v1/usage", params=params | refused)
            assert r.status_code == 403, r.text
            assert r.headers["content-type"].startswith("application/problem+json")
        for bad, field in (
            ({"by": "node"}, "by"),
            ({"granularity": "minute"}, "granularity"),
            ({"from": "yesterday"}, "from"),
            ({"to": "0.5"}, "to"),  # not a Unix time either
            ({"to": (datetime.now(UTC) - timedelta(days=1)).isoformat()}, "from"),
        ):
            r = await other.get("/v1/usage", params=params | bad)
            assert r.status_code == 422, (bad, r.text)
            assert field in r.text, r.text

    # the running one ends: its record closes, the metric has both
    async with stack.client(alice) as api:
        assert (await api.delete(f"/v1/sessions/{held['id']}")).status_code == 202
    await stack.wait_status(held["id"], TERMINAL)

    async def closed() -> list[asyncpg.Record] | None:
        found = await _records(stack)
        return found if all(r["ended_at"] is not None for r in found) else None

    ended = await until(closed, timeout=30, what="both usage records closed")
    expected = _expected(ended, datetime.now(UTC))
    now_counted = await _counted(stack)
    assert {s: now_counted[s] - counted[s] for s in AMOUNTS} == pytest.approx(expected)

    # the console's page: stacked bars drawn as SVG by the server, for those who may see
    html = {"Accept": "text/html"}
    async with httpx.AsyncClient(base_url=stack.url, headers=html) as browser:
        assert (await browser.post("/sign-in", data={"key": alice})).status_code == 303
        page = (await browser.get("/usage")).text
        assert page.count('<svg role="img"') == 3  # cpu, mem, cuda.shares
        today = f"{datetime.now(UTC):%Y-%m-%d}"
        assert f"<title>ml, {today}: " in page
        assert 'href="/usage" aria-current="page"' in page
    async with httpx.AsyncClient(base_url=stack.url, headers=html) as browser:
        assert (await browser.post("/sign-in", data={"key": bob})).status_code == 303
        page = (await browser.get("/usage?by=user")).text
        assert "Nothing ran in these 14 days" in page
        assert "<title>" not in page.split("<main", 1)[1]

    cli = ["usage", "--by", "project", "-g", "day", "--from", since]
    table = await stack.cli(*cli, key=alice)
    header, *rows = table.splitlines()
    assert header.split() == ["PERIOD", "PROJECT", "CPU-H", "MEM", "GIB-H", "CUDA.SHARES-H"]
    assert rows[0].split()[1] == "ml"  # (one day; two, and a TOTAL, just after midnight)
    as_json = json.loads(await stack.cli(*cli, "-o", "json", key=alice))
    assert _totals(as_json) == {"ml": pytest.approx(expected)}
    sheet = list(csv.reader(io.StringIO(await stack.cli(*cli, "--csv", key=alice))))
    assert sheet[0] == [
        "start",
        "project",
        "cpu (cpu-seconds)",
        "mem (byte-seconds)",
        "cuda.shares (cuda.shares-seconds)",
    ]
    cpu = sum(float(row[2]) for row in sheet[1:])
    assert cpu == pytest.approx(expected["cpu"])

"""The wire spells the egress modes the plugins define (contract imports nothing of ours,
so it repeats them): a mode added on one side only would be refused on the other."""

from __future__ import annotations

from typing import get_args

from contract.messages import NodeInfo, StartKernel, WireEgress
from plugins.common import EGRESS_MODES, egress_modes


def test_the_wire_carries_exactly_the_modes_the_plugins_know() -> None:
    assert get_args(WireEgress.model_fields["mode"].annotation) == EGRESS_MODES


def test_older_peers_mean_open() -> None:
    start = StartKernel(
        kernel_id="k", session_id="s", node_id="n", session_type="batch", command=["true"]
    )
    assert start.egress == WireEgress(mode="open", allow=[])
    info = NodeInfo(node_id="n", hostname="h", address="a", queue="q", runtime="r", capacity={})
    assert egress_modes(",".join(info.egress)) == {"open"}
    assert egress_modes(None) == egress_modes("") == {"open"}
    assert egress_modes("no-private,none") == {"open", "no-private", "none"}

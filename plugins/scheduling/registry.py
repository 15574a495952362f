"""The built-in scheduling plugins of ``jobgate.schedulers.v1``: ``"<kind>.<name>"`` -> class.

One readable list (kube-scheduler's ``NewInTreeRegistry``); plugins of other
distributions join it through entry points (:mod:`plugins.loader`).
"""

from __future__ import annotations

from typing import Any

from plugins.scheduling.filters import (
    ArchitectureFilter,
    FitsFilter,
    FractionEnforcementFilter,
    ImagesFilter,
    LabelsFilter,
    LimitsEnforcedFilter,
    MountsFilter,
    NodeStatusFilter,
    ResourceGroupFilter,
)
from plugins.scheduling.gang import AllOrNothing
from plugins.scheduling.scorers import (
    ConcentratedScorer,
    DispersedScorer,
    NumaScorer,
    RoundRobinScorer,
)
from plugins.scheduling.sequencers import (
    DrfSequencer,
    FairShareSequencer,
    FifoSequencer,
    HeuristicFifoSequencer,
    LifoSequencer,
)
from plugins.scheduling.validators import DependencyValidator, QuotaValidator, StartTimeValidator

__all__ = ["IN_TREE"]

IN_TREE: dict[str, Any] = {
    "validator.quota": QuotaValidator,
    "validator.dependencies": DependencyValidator,
    "validator.start-time": StartTimeValidator,
    "sequencer.fifo": FifoSequencer,
    "sequencer.heuristic-fifo": HeuristicFifoSequencer,
    "sequencer.lifo": LifoSequencer,
    "sequencer.drf": DrfSequencer,
    "sequencer.fair-share": FairShareSequencer,
    "filter.resource-group": ResourceGroupFilter,
    "filter.node-status": NodeStatusFilter,
    "filter.architecture": ArchitectureFilter,
    "filter.labels": LabelsFilter,
    "filter.limits-enforced": LimitsEnforcedFilter,
    "filter.mounts": MountsFilter,
    "filter.images": ImagesFilter,
    "filter.fraction-enforcement": FractionEnforcementFilter,
    "filter.fits": FitsFilter,
    "scorer.concentrated": ConcentratedScorer,
    "scorer.dispersed": DispersedScorer,
    "scorer.round-robin": RoundRobinScorer,
    "scorer.numa": NumaScorer,
    "gang.all-or-nothing": AllOrNothing,
}

"""The five plugin contracts of the scheduling pipeline, one or two methods each.

Every plugin is a class published in ``jobgate.schedulers.v1`` as ``<kind>.<name>``
(``filter.fits``, ``scorer.concentrated``) with a ``name``, a pydantic ``Settings`` model
and ``__init__(self, settings)``. A pipeline builds each plugin once and reuses it for
every pass, so plugins keep no state between calls; what one needs during a pass goes
in ``ctx.scratch[name]``.

::

    SessionRequest ─▶ Validator.check ─▶ wait / cancel / go on
    band of sessions ─▶ Sequencer.order ─▶ one at a time; Sequencer.blocks after a miss
    (NodeView, Shape) ─▶ Filter.check ─▶ Rejection or None
    candidates ─▶ Scorer.score ─▶ one float in [0, 1] per candidate (higher is better)
    session ─▶ GangStep.place(request, placer) ─▶ all containers placed, or none
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from typing import ClassVar, Literal, NamedTuple, Protocol

from pydantic import BaseModel

from plugins.scheduling.reasons import Rejection
from plugins.scheduling.state import NodeView, PassContext, Shape
from plugins.scheduling.types import KernelPlacement, SessionRequest

__all__ = [
    "Filter",
    "GangStep",
    "KernelPlacer",
    "Scorer",
    "Sequencer",
    "Validator",
    "Verdict",
]


class Verdict(NamedTuple):
    """A validator's decision that a session does not go on this pass."""

    action: Literal["wait", "cancel"]
    code: str  # a session code from .reasons
    reason: str  # words a user reads; the first clause is the short form


class Validator(Protocol):
    """Policy before placement: quotas, dependencies, start time."""

    name: ClassVar[str]
    Settings: ClassVar[type[BaseModel]]

    def check(self, request: SessionRequest, ctx: PassContext) -> Verdict | None:
        """None lets the session go on to placement."""
        ...


class Sequencer(Protocol):
    """Which session of a priority band goes next (bands themselves go high to low)."""

    name: ClassVar[str]
    Settings: ClassVar[type[BaseModel]]

    def order(self, band: list[SessionRequest], ctx: PassContext) -> Iterator[SessionRequest]:
        """Yield every session of *band* (given oldest first) once, in the order to try.

        The planner places each yielded session before asking for the next one, so an
        order that depends on usage (DRF) sees the placements made so far.
        """
        ...

    def blocks(self, request: SessionRequest, ctx: PassContext) -> bool:
        """After *request* did not fit: must every session after it wait (fifo)?"""
        ...


class Filter(Protocol):
    """Whether a node may take one container of a session; a Rejection says why not.

    A dynamic filter must be monotonic within a pass: a pass only takes room, so once a
    node refuses a shape it must keep refusing it (the search remembers refusals). While
    searching ``ctx.explaining`` is False and ``reasons.REFUSED`` is a fine answer; a
    failed search asks again with it True and shows the Rejection to the user.

    Optional ``node_local: ClassVar[bool] = True`` (``fits`` has it) promises that the
    verdict reads only the node's own state and the shape: the search then trusts a
    verdict until the search itself takes or gives back room on that node.

    Optional ``key_reads: ClassVar[tuple[str, ...]]`` (every built-in filter has it)
    names the ``SessionRequest`` fields ``key()`` reads: when every filter of a pipeline
    names them, the planner finds a session's shape by those fields and calls ``key()``
    only for the first session of each distinct combination.
    """

    name: ClassVar[str]
    Settings: ClassVar[type[BaseModel]]
    #: True: the verdict depends only on the node as the snapshot has it and on key(),
    #: so it is computed once per pass per node and key; False: on every search
    static: ClassVar[bool]

    def key(self, request: SessionRequest) -> Hashable:
        """The part of a request this filter reads; equal keys get equal verdicts."""
        ...

    def check(self, node: NodeView, shape: Shape, ctx: PassContext) -> Rejection | None: ...


class Scorer(Protocol):
    """How much a feasible node suits a container; weighted and summed over scorers.

    Optional ``node_local: ClassVar[bool] = True`` (``concentrated``, ``dispersed``,
    ``numa``): a node's score reads only that node and the shape, never the other nodes
    or pass counters, so it is reused until room is taken or given back on the node.
    """

    name: ClassVar[str]
    Settings: ClassVar[type[BaseModel]]

    def score(self, nodes: Sequence[NodeView], shape: Shape, ctx: PassContext) -> list[float]:
        """One number in [0, 1] per node, in the same order (higher is better)."""
        ...


class KernelPlacer(Protocol):
    """What the planner lends the gang step for one session."""

    def place(
        self, exclude: frozenset[str] = frozenset(), only: str | None = None
    ) -> KernelPlacement | None:
        """Place one more container (not on nodes in *exclude*; only on node *only* when
        given); None if none fits."""
        ...

    def refuse(self, reason: str) -> None:
        """Say why the session waits when the gang step itself gives up."""
        ...

    def undo(self) -> None:
        """Give back every container placed for this session so far."""
        ...


class GangStep(Protocol):
    """Places the ``cluster_size`` containers of one session."""

    name: ClassVar[str]
    Settings: ClassVar[type[BaseModel]]

    def place(self, request: SessionRequest, placer: KernelPlacer) -> bool:
        """True when every container is placed; False after undoing any it placed."""
        ...

"""Finding a node for one container: eligible nodes, a sample of feasible ones, the best.

::

    all nodes (by id) ──static filters, once per node per filter key──▶ eligible nodes
    eligible ──offer every slot asked (once per key and slot set)──▶ the shape's pool
    pool, from the shape's cursor ──dynamic filters──▶ first K feasible nodes
    K feasible ──scorers (weighted sum; ties: lowest id)──▶ the node
    none feasible ──every eligible node checked again, in detail──▶
        "no node fits: 5 nodes lack cpu (largest free 1.5), 2 draining"

K is ``sample_size`` (kube-scheduler's numFeasibleNodesToFind, Nomad's limit
iterator): a search stops after K feasible nodes instead of scoring thousands. With
K >= the group size every feasible node is scored and the choice is exact.

Within a pass room is only ever taken, so a node that refused a shape keeps refusing
it (dynamic filters must be monotonic this way): each shape remembers the pool
positions that refused it and skips them in near-constant time (``Shape.skip``, a
"next alive position" array with path compression, as in union-find). A search costs
about K checks plus the new refusals, and every node refuses a shape at most once per
pass. Where a search starts is the shape's cursor:

* "sticky" (packing): the cursor stays on the first feasible node found, so the node
  being filled stays in the sample until it is full; every node before the cursor has
  refused, so a search never wraps around.
* "rotate" (spreading): the cursor moves past the last node looked at, so each search
  sees new nodes.

While a gang holds containers it has not committed, refusals are not remembered (the
room may come back when the gang gives up). A failed search explains itself by checking
every eligible node again with ``ctx.explaining`` set; that happens once per shape per
pass, since the planner caches the failure on the shape.
"""

from __future__ import annotations

from collections.abc import Hashable
from decimal import Decimal
from operator import itemgetter
from typing import NamedTuple

from plugins.scheduling import reasons as r
from plugins.scheduling.devices import allocate, could_fit, pin
from plugins.scheduling.errors import PluginFailure
from plugins.scheduling.fit import allocation_misfit
from plugins.scheduling.guard import failed
from plugins.scheduling.pipeline import Pipeline
from plugins.scheduling.reasons import Rejection, Tally
from plugins.scheduling.state import DeviceGroup, DeviceView, NodeView, PassContext, Seen, Shape
from plugins.scheduling.types import KernelPlacement, SessionRequest

__all__ = ["Reserved", "Search"]

_TAKEN = Rejection(r.TAKEN)
_UNASKED = Rejection("unasked")  # compared by identity: no verdict yet
_UNSCORED = (-1, 0.0)
_score = itemgetter(3)


def _node_local(plugin: object) -> bool:
    """Whether a plugin declares ``node_local = True`` (see protocols.Filter)."""
    return getattr(plugin, "node_local", False) is True


class Reserved(NamedTuple):
    """One container's hold on a node, enough to give it back exactly."""

    node: NodeView
    shape: Shape
    devices: list[tuple[DeviceGroup, DeviceView, int]]
    pinned: tuple[int, list[int]] | None  # (NUMA node, cpus)
    last_pick: int
    kernel: KernelPlacement


class Search:
    """Node search for the containers of one pass (see the module docstring)."""

    def __init__(self, pipeline: Pipeline, ctx: PassContext, nodes: list[NodeView]) -> None:
        self.ctx = ctx
        self.nodes = nodes
        self.static = pipeline.static_filters
        self.dynamic = pipeline.dynamic_filters
        self.scorers = [(s, w) for s, w in pipeline.scorers if w > 0]
        self.sample = pipeline.config.sample_size or max(1, len(nodes))
        self.sticky = pipeline.scan == "sticky"
        self._eligible: dict[Hashable, tuple[list[NodeView], list[Rejection]]] = {}
        self._pools: dict[Hashable, tuple[list[NodeView], list[Rejection]]] = {}
        #: (static filter position, its key) -> verdict per node order (see eligible)
        self._verdicts: dict[tuple[int, Hashable], list[Rejection | None]] = {}
        self._by_id: dict[str, NodeView] | None = None
        #: plugins that say a node's verdict or score depends only on that node (and the
        #: shape) let the search reuse them while the node's version stays the same
        self.resumable = all(_node_local(f) for f in self.dynamic)
        self.scores_local = all(_node_local(s) for s, _ in self.scorers)
        self._stamp = 0  # the last node version handed out

    # -- which nodes to look at ---------------------------------------------------------
    def eligible(self, shape: Shape) -> tuple[list[NodeView], list[Rejection]]:
        """Nodes the static filters let in for this shape, and why the others were not.

        A static filter's verdict on a node depends only on the node and the filter's
        own key, so it is kept per (filter, key) and node: another static key that
        differs in one filter's key asks only that filter again.
        """
        found = self._eligible.get(shape.static_key)
        if found is None:
            ok: list[NodeView] = []
            rejected: list[Rejection] = []
            ctx, static = self.ctx, self.static
            known = [self._verdicts_of(j, key) for j, key in enumerate(shape.static_key)]
            checks = list(zip(static, known, strict=True))
            for node in self.nodes:
                k = node.order
                for f, verdicts in checks:
                    rejection = verdicts[k]
                    if rejection is _UNASKED:
                        try:
                            rejection = verdicts[k] = f.check(node, shape, ctx)
                        except Exception as exc:
                            raise failed("filter", f, exc) from exc
                    if rejection is not None:
                        rejected.append(rejection)
                        break
                else:
                    ok.append(node)
            found = self._eligible[shape.static_key] = (ok, rejected)
        return found

    def _verdicts_of(self, j: int, key: Hashable) -> list[Rejection | None]:
        """Static filter *j*'s verdict per node order for its *key* (``_UNASKED`` yet)."""
        verdicts = self._verdicts.get((j, key))
        if verdicts is None:
            verdicts = self._verdicts[j, key] = [_UNASKED] * len(self.nodes)
        return verdicts

    def offering(self, shape: Shape) -> tuple[list[NodeView], list[Rejection]]:
        """Eligible nodes that offer every slot the shape asks, and the others' rejections."""
        key = (shape.static_key, shape.slot_set)
        found = self._pools.get(key)
        if found is None:
            asked = shape.slot_set
            names = self.ctx.slots.names
            pool: list[NodeView] = []
            missing: list[Rejection] = []
            for node in self.eligible(shape)[0]:
                if asked <= node.kinds:
                    pool.append(node)
                else:
                    lacking = next(i for i, _ in shape.need if i not in node.kinds)
                    missing.append(Rejection(r.NO_SLOT, names[lacking]))
            found = self._pools[key] = (pool, missing)
        return found

    # -- searching ----------------------------------------------------------------------
    def candidates(self, shape: Shape, exclude: frozenset[str], remember: bool) -> list[NodeView]:
        """Up to ``sample_size`` feasible nodes, from the shape's cursor onwards.

        *remember*: refusals may be remembered (no uncommitted containers are held).
        """
        pool = shape.pool
        if pool is None:
            pool = shape.pool = self.offering(shape)[0]
            shape.skip = list(range(len(pool) + 1))
        if not pool:
            return []
        if self.sticky:
            return [entry[1] for entry in self._sticky(shape, pool, exclude, remember)]
        return self._rotate(shape, pool, exclude, remember)

    def choose(self, shape: Shape, exclude: frozenset[str], remember: bool) -> NodeView | None:
        """``best(candidates(...))``, or None when no node is feasible.

        A sticky search with node-local scorers keeps each feasible node's score on the
        shape's walk (:meth:`_sticky`) and scores only the nodes that are new or changed.
        """
        if not (self.sticky and self.scores_local and self.scorers):
            found = self.candidates(shape, exclude, remember)
            return self.best(found, shape) if found else None
        pool = shape.pool
        if pool is None:
            pool = shape.pool = self.offering(shape)[0]
            shape.skip = list(range(len(pool) + 1))
        if not pool:
            return None
        seen = self._sticky(shape, pool, exclude, remember)
        if not seen:
            return None
        stale = [entry for entry in seen if entry[3] is None]
        if stale:
            totals = self._totals([entry[1] for entry in stale], shape)
            for entry, total in zip(stale, totals, strict=True):
                entry[3] = total
        # the walk is in pool order, which is node order: the first highest is the
        # highest with the lowest node id, as best() breaks ties
        chosen: NodeView = max(seen, key=_score)[1]
        return chosen

    def _sticky(
        self, shape: Shape, pool: list[NodeView], exclude: frozenset[str], remember: bool
    ) -> list[Seen]:
        """Forward from the cursor; every position before it refuses the shape for good.

        A search that remembers its refusals leaves ``shape.seen``: every position from
        the cursor to the end of its walk either refused (and is skipped from now on) or
        was feasible at the version it is listed with. The next such search walks that
        list first, asking the (node-local) filters again only about nodes that changed,
        then goes on from the end: the same nodes in the same order as a walk from the
        cursor, without re-checking the ones nothing touched. Each entry also keeps the
        node's weighted score once :meth:`_choose` computed it (node-local scorers), so
        an unchanged node is neither checked nor scored again.
        """
        ctx, dynamic, want = self.ctx, self.dynamic, self.sample
        skip = shape.skip
        assert skip is not None
        n = len(pool)
        resume = shape.seen if remember and not exclude else None
        shape.seen = None
        seen: list[Seen] = []  # [position, node, its version, its score or None] found
        pos = _alive(skip, shape.cursor) if resume is None else self._resume(shape, resume, seen)
        while len(seen) < want and pos < n:
            node = pool[pos]
            if not (exclude and node.id in exclude):
                for f in dynamic:
                    try:
                        refused = f.check(node, shape, ctx)
                    except Exception as exc:
                        raise failed("filter", f, exc) from exc
                    if refused is not None:
                        if remember:
                            skip[pos] = pos + 1
                        break
                else:
                    seen.append([pos, node, node.version, None])
                    if len(seen) >= want:
                        break
            pos = _alive(skip, pos + 1)
        if not exclude:  # a skipped (excluded) node may still take the next session
            # before the first node found every node refused; with uncommitted containers
            # held, the gang's undo puts the cursor back (see planner._Placer)
            shape.cursor = seen[0][0] if seen else n
            if remember and self.resumable:
                shape.seen = (seen, min(pos + 1, n))
        return seen

    def _resume(self, shape: Shape, resume: tuple[list[Seen], int], seen: list[Seen]) -> int:
        """Walk the last search's feasible nodes again (see :meth:`_sticky`); fill
        *seen*, and return where the walk goes on (the last node taken when full)."""
        skip = shape.skip
        assert skip is not None
        before, end = resume
        want = self.sample
        for entry in before:
            node = entry[1]
            if node.version != entry[2]:
                if self._refuses(node, shape):
                    skip[entry[0]] = entry[0] + 1
                    continue
                entry[2] = node.version  # feasible still, at a new version: score again
                entry[3] = None
            seen.append(entry)
            if len(seen) >= want:
                last: int = entry[0]
                return last
        return _alive(skip, end)

    def _refuses(self, node: NodeView, shape: Shape) -> bool:
        ctx = self.ctx
        for f in self.dynamic:
            try:
                if f.check(node, shape, ctx) is not None:
                    return True
            except Exception as exc:
                raise failed("filter", f, exc) from exc
        return False

    def _rotate(
        self, shape: Shape, pool: list[NodeView], exclude: frozenset[str], remember: bool
    ) -> list[NodeView]:
        """Around the pool from the cursor, then past the last node looked at."""
        ctx, dynamic, want = self.ctx, self.dynamic, self.sample
        skip = shape.skip
        assert skip is not None
        found: list[NodeView] = []
        n = len(pool)
        start = shape.cursor % n
        last, wrapped = start - 1, False
        pos = _alive(skip, start)
        while True:
            if pos >= n:
                if wrapped:
                    break
                wrapped, pos = True, _alive(skip, 0)
                continue
            if wrapped and pos >= start:
                break
            node = pool[pos]
            if not (exclude and node.id in exclude):
                last = pos
                for f in dynamic:
                    try:
                        refused = f.check(node, shape, ctx)
                    except Exception as exc:
                        raise failed("filter", f, exc) from exc
                    if refused is not None:
                        if remember:
                            skip[pos] = pos + 1
                        break
                else:
                    found.append(node)
                    if len(found) >= want:
                        break
            pos = _alive(skip, pos + 1)
        shape.cursor = last + 1
        return found

    def best(self, nodes: list[NodeView], shape: Shape) -> NodeView:
        """The highest weighted score; equal scores go to the lowest node id.

        With node-local scorers only, a node's total is kept on the shape with the
        node's version and computed again only once the node changed.
        """
        if len(nodes) == 1 or not self.scorers:
            return min(nodes, key=lambda n: n.order)
        if self.scores_local:
            memo = shape.scores
            totals = []
            stale: list[int] = []
            for j, node in enumerate(nodes):
                kept = memo.get(node.order)
                if kept is not None and kept[0] == node.version:
                    totals.append(kept[1])
                else:
                    totals.append(0.0)
                    stale.append(j)
            if stale:
                fresh = self._totals([nodes[j] for j in stale], shape)
                for j, total in zip(stale, fresh, strict=True):
                    node = nodes[j]
                    memo[node.order] = (node.version, total)
                    totals[j] = total
        else:
            totals = self._totals(nodes, shape)
        best = 0
        for j in range(1, len(nodes)):
            if totals[j] > totals[best] or (
                totals[j] == totals[best] and nodes[j].order < nodes[best].order
            ):
                best = j
        return nodes[best]

    def _totals(self, nodes: list[NodeView], shape: Shape) -> list[float]:
        totals = [0.0] * len(nodes)
        for scorer, weight in self.scorers:
            try:
                scores = scorer.score(nodes, shape, self.ctx)
            except Exception as exc:
                raise failed("scorer", scorer, exc) from exc
            if len(scores) != len(nodes):
                wrong = ValueError(f"returned {len(scores)} scores for {len(nodes)} nodes")
                raise PluginFailure(f"scorer.{scorer.name}", wrong)
            for j, value in enumerate(scores):
                totals[j] += weight * value
        return totals

    def on_node(self, shape: Shape, node_id: str) -> NodeView | None:
        """*node_id* when it passes the dynamic filters for one more container of *shape*.

        For gang steps that keep a session's containers together: the node already took
        one container of the same shape, so the static filters passed.
        """
        by_id = self._by_id
        if by_id is None:
            by_id = self._by_id = {n.id: n for n in self.nodes}
        node = by_id.get(node_id)
        if node is None:
            return None
        for f in self.dynamic:
            try:
                if f.check(node, shape, self.ctx) is not None:
                    return None
            except Exception as exc:
                raise failed("filter", f, exc) from exc
        return node

    def explain(self, shape: Shape, exclude: frozenset[str]) -> tuple[str, bool]:
        """Why no eligible node takes the shape now, and whether one ever could."""
        tally = Tally()
        for rejection in self.eligible(shape)[1]:
            tally.add(rejection)
        pool, missing = self.offering(shape)
        for rejection in missing:
            tally.add(rejection)
        ctx, dynamic = self.ctx, self.dynamic
        resolvable, too_big = False, True
        ctx.explaining = True
        try:
            for node in pool:
                if node.id in exclude:
                    tally.add(_TAKEN)
                else:
                    for f in dynamic:
                        try:
                            refused = f.check(node, shape, ctx)
                        except Exception as exc:
                            raise failed("filter", f, exc) from exc
                        if refused is not None:
                            tally.add(refused)
                            break
                if not resolvable:
                    never = _never(node, shape)
                    resolvable = never is None
                    too_big = too_big and never == "size"
        finally:
            ctx.explaining = False
        if not len(tally):
            group = shape.request.resource_group
            return f"resource group {group} has no nodes", False
        text = tally.text()
        if pool and not resolvable and too_big:
            text += " (too big for every node)"
        return text, resolvable

    # -- holding and giving back room ---------------------------------------------------
    def reserve(self, node: NodeView, shape: Shape, request: SessionRequest) -> Reserved:
        """Take one container's room on *node* (a node the dynamic filters just passed).

        Devices chosen are checked with :func:`.fit.allocation_misfit`, the test the
        applier makes on the node's row: what the planner places, it accepts.
        """
        if not shape.dev_need:  # slots only: nothing to choose, pin or check again
            return self._reserve_slots(node, shape, request)
        picks: list[tuple[DeviceGroup, list[tuple[DeviceView, int]]]] = []
        for i, units in shape.dev_need:
            group = node.devs.get(i)
            if group is None:
                continue
            picked = allocate(group, units, node, shape.cores)
            if picked is None:
                raise RuntimeError(
                    f"node {node.id} passed the filters but has no devices "
                    f"for {group.slot}; is the fits filter configured?"
                )
            picks.append((group, picked))
        if picks:  # the slots alone were the fits filter's test (fit.short_slot) just now
            taken = [(d.id, a) for _, picked in picks for d, a in picked]
            room = {d.id: d.free for _, picked in picks for d, _ in picked}
            misfit = allocation_misfit(node.free, shape.need, room, taken, (), None, 0)
            if misfit is not None:
                raise RuntimeError(f"node {node.id} passed the filters but {misfit}")
        free = node.free
        for i, units in shape.need:
            free[i] -= units
        chosen: list[tuple[DeviceGroup, DeviceView, int]] = []
        devices: dict[str, dict[str, Decimal]] = {}
        for group, picked in picks:
            for device, amount in picked:
                group.take(device, amount)
                chosen.append((group, device, amount))
            i = group.index
            devices[group.slot] = {d.id: self.ctx.amount(i, a) for d, a in picked}
        pinned = None
        if chosen and node.state.numa_cpus:
            pinned = pin(node, [(d, a) for _, d, a in chosen], shape.cores)
        self._stamp += 1
        node.version = self._stamp
        last = node.last_pick
        node.last_pick = self.ctx.picks
        self.ctx.picks += 1
        cpuset = list(pinned[1]) if pinned else None
        kernel = KernelPlacement(node.id, request.requested, devices, cpuset)
        return Reserved(node, shape, chosen, pinned, last, kernel)

    def _reserve_slots(self, node: NodeView, shape: Shape, request: SessionRequest) -> Reserved:
        """:meth:`reserve` for a shape without devices (the same steps, fewer of them)."""
        free = node.free
        for i, units in shape.need:
            free[i] -= units
        self._stamp += 1
        node.version = self._stamp
        last = node.last_pick
        ctx = self.ctx
        node.last_pick = ctx.picks
        ctx.picks += 1
        kernel = KernelPlacement(node.id, request.requested, {}, None)
        return Reserved(node, shape, [], None, last, kernel)

    def release(self, held: Reserved) -> None:
        """Undo :meth:`reserve` exactly (the node gets a new version, not its old one)."""
        self._stamp += 1
        held.node.version = self._stamp
        free = held.node.free
        for i, units in held.shape.need:
            free[i] += units
        for group, device, amount in held.devices:
            group.give(device, amount)
        if held.pinned:
            held.node.give_cores(*held.pinned)
        held.node.last_pick = held.last_pick


def _alive(skip: list[int], pos: int) -> int:
    """The first position at or after *pos* not known to refuse (path-compressing)."""
    root = pos
    while skip[root] != root:
        root = skip[root]
    while skip[pos] != root:
        skip[pos], pos = root, skip[pos]
    return root


def _never(node: NodeView, shape: Shape) -> str | None:
    """Why the container would not fit this node even if nothing ran on it (or None)."""
    cap = node.cap
    for i, units in shape.need:
        if cap[i] < units:
            return "size"
    for i, units in shape.dev_need:
        group = node.devs.get(i)
        if group is not None:
            why = could_fit(group, units)
            if why is not None:
                return why
    return None

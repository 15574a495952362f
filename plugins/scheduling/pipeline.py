"""Build a pipeline from a SchedulerConfig: plugins found by name, wired in order.

Plugins are known as ``<kind>.<name>`` (``sequencer.drf``) in ``jobgate.schedulers.v1``:
the built-in ones in :data:`plugins.scheduling.registry.IN_TREE`, others through entry
points, so a third-party package adds a scorer with::

    [project.entry-points."jobgate.schedulers.v1"]
    "scorer.greenest" = "acme_sched:GreenestScorer"

and an operator turns it on with ``{"scorers": [{"name": "greenest", "weight": 2}]}``.
Each factory is checked against its kind's Protocol when loaded (``plugins.loader``),
and built once with its own validated ``Settings``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from plugins.loader import SCHEDULERS, PluginError, load_group, names
from plugins.scheduling.config import PluginRef, SchedulerConfig, integral_numbers
from plugins.scheduling.errors import SchedulerConfigError
from plugins.scheduling.guard import (
    GuardedSequencer,
)
from plugins.scheduling.protocols import Filter, GangStep, Scorer, Sequencer, Validator

__all__ = ["KINDS", "Pipeline", "available", "build_pipeline", "pipeline_for", "reset_registry"]

#: plugin kind -> the Protocol its factories are checked against
KINDS: dict[str, type] = {
    "validator": Validator,
    "sequencer": Sequencer,
    "filter": Filter,
    "scorer": Scorer,
    "gang": GangStep,
}


@dataclass(frozen=True, slots=True)
class Pipeline:
    """The built plugins of one configuration, in the order a pass runs them.

    The sequencer is wrapped (:mod:`.guard`) so that a crash in a pass names it;
    validators, filters, scorers and the gang step are guarded where they are called.
    """

    config: SchedulerConfig
    validators: tuple[Validator, ...]
    sequencer: GuardedSequencer
    static_filters: tuple[Filter, ...]
    dynamic_filters: tuple[Filter, ...]
    scorers: tuple[tuple[Scorer, float], ...]
    gang: GangStep
    scan: Literal["sticky", "rotate"]

    @property
    def filters(self) -> tuple[Filter, ...]:
        return self.static_filters + self.dynamic_filters


def build_pipeline(config: SchedulerConfig, *, strict: bool = False) -> Pipeline:
    """Load and configure every plugin *config* names; SchedulerConfigError if one is wrong.

    *strict*: each plugin's options in JSON types as its Settings' schema says them (no
    ``1`` for ``true``), as the API checks a new configuration.
    """
    _load("validator", config.validators)
    _load("sequencer", [config.sequencer])
    _load("filter", config.filters)
    _load("scorer", config.scorers)
    _load("gang", [config.gang])
    # 1. validators: policy (quota, dependencies, start time) before any node is looked at
    validators = tuple(_build("validator", ref, strict) for ref in config.validators)
    # 2. sequencer: the order sessions are tried in, within each priority band
    sequencer = GuardedSequencer(_build("sequencer", config.sequencer, strict))
    # 3. filters: static ones (node facts) run once per pass and key; dynamic ones
    #    (fits: free room and devices) on every search, over what the static ones let in
    filters = [_build("filter", ref, strict) for ref in config.filters]
    static = tuple(f for f in filters if getattr(f, "static", False))
    dynamic = tuple(f for f in filters if not getattr(f, "static", False))
    # 4. scorers: rank the sampled feasible nodes; weighted sum, ties to the lowest id
    scorers = tuple((_build("scorer", ref, strict), ref.weight) for ref in config.scorers)
    # 5. gang step: all containers of a session, or none
    gang = _build("gang", config.gang, strict)
    return Pipeline(
        config, validators, sequencer, static, dynamic, scorers, gang, _scan(config, scorers)
    )


def _scan(
    config: SchedulerConfig, scorers: tuple[tuple[Any, float], ...]
) -> Literal["sticky", "rotate"]:
    if config.scan != "auto":
        return config.scan
    if not scorers:
        return "sticky"
    heaviest = max(scorers, key=lambda sw: sw[1])[0]
    return "rotate" if getattr(heaviest, "scan", "rotate") == "rotate" else "sticky"


# ---- the registry -----------------------------------------------------------------------
_lock = threading.Lock()
_registry: dict[str, Any] = {}  # "<kind>.<name>" -> factory
_pipelines: dict[str, Pipeline] = {}
_MAX_PIPELINES = 64


def reset_registry() -> None:
    """Forget loaded plugins and built pipelines (after installing a plugin at run time)."""
    with _lock:
        _registry.clear()
        _pipelines.clear()


def _factory(kind: str, name: str) -> Any:
    """The factory known as ``<kind>.<name>``; of the third-party entry points only that
    one is imported, so a broken plugin elsewhere breaks only the groups that name it."""
    key = f"{kind}.{name}"
    with _lock:
        if key in _registry:
            return _registry[key]
    try:
        found = load_group(SCHEDULERS, KINDS[kind], select=lambda n: n == key)
    except PluginError as exc:
        raise SchedulerConfigError(str(exc)) from exc
    if key not in found:
        prefix = kind + "."
        known = [n[len(prefix) :] for n in names(SCHEDULERS) if n.startswith(prefix)]
        raise SchedulerConfigError(
            f"no {kind} plugin {name!r} in {SCHEDULERS} (available: {', '.join(known) or 'none'})"
        )
    with _lock:
        _registry[key] = found[key]
    return found[key]


def _load(kind: str, refs: Sequence[PluginRef]) -> None:
    """Load the factories *refs* name that are not loaded yet, with one look through the
    installed entry points for the kind (not one per name); a name not found is left
    to :func:`_factory`, which says what is available."""
    prefix = kind + "."
    with _lock:
        wanted = {prefix + ref.name for ref in refs} - _registry.keys()
    if not wanted:
        return
    try:
        found = load_group(SCHEDULERS, KINDS[kind], select=wanted.__contains__)
    except PluginError as exc:
        raise SchedulerConfigError(str(exc)) from exc
    with _lock:
        _registry.update(found)


def available() -> dict[str, dict[str, Any]]:
    """``{kind: {name: factory}}`` of every plugin that loads and keeps its contract
    (built-in and installed); one that does not is left out, as a group naming it is
    refused. What the OpenAPI document offers (:mod:`.schema`)."""
    found: dict[str, dict[str, Any]] = {kind: {} for kind in KINDS}
    for full in names(SCHEDULERS):
        kind, _, name = full.partition(".")
        if kind not in KINDS or not name:
            continue
        try:
            found[kind][name] = _factory(kind, name)
        except SchedulerConfigError:
            continue
    return found


def _build(kind: str, ref: PluginRef, strict: bool = False) -> Any:
    factory = _factory(kind, ref.name)
    settings_model: type[BaseModel] = factory.Settings
    try:
        if strict:
            options = json.dumps(integral_numbers(ref.options))
            settings = settings_model.model_validate_json(options, strict=True)
        else:
            settings = settings_model.model_validate(ref.options)
    except ValidationError as exc:
        raise SchedulerConfigError(f"{kind} {ref.name!r}: bad options: {exc}") from exc
    return factory(settings)


def pipeline_for(config: SchedulerConfig) -> Pipeline:
    """The pipeline of *config*, built once per distinct configuration and reused."""
    key = config.model_dump_json()
    with _lock:
        cached = _pipelines.get(key)
    if cached is not None:
        return cached
    built = build_pipeline(config)
    with _lock:
        if len(_pipelines) >= _MAX_PIPELINES:
            _pipelines.clear()
        _pipelines[key] = built
    return built

"""The autoscaling decision, as Knative's KPA makes it: pure, no I/O, tested with tables.

::

    samples (the proxies' summed load, ~1 a second: record()) ───┐
    settings (targets, windows, delays, min/max) ────────────────┼─▶ decide() ─▶ Decision
    now, previous ScaleState, ready replicas, woken ─────────────┘      desired, reason,
                                                                        inputs, next state

* **Per-replica target**: ``target_concurrency`` (in flight + queued per replica) or
  ``target_rps``; wanted = ceil(average load / target).
* **Stable window** (60 s): the average over it decides in calm times.
* **Panic window** (6 s): when its average asks for ``panic_threshold`` times the ready
  replicas, the endpoint panics for one stable window: it scales up on the short window
  at once and never scales down meanwhile.
* **A step held** (``HOLD_S``): the load every sample of the last second showed (the
  lowest reading since the latest sample at least ``HOLD_S`` old) counts like the
  panic window's average, and the higher of the two wins. An 8x step thus asks for all
  its replicas at its second reading instead of climbing with the 6 s average, while a
  single reading (one spike) moves only the average.
* **Delays**: a rise is applied once it held for ``scale_up_delay_s`` (0: at once); a
  fall only after ``scale_down_delay_s`` of the lower value (the highest recommendation
  in that span wins).
* **Zero**: with ``min_replicas = 0`` the last replica goes after ``idle_to_zero_s``
  without any traffic; a wake (a request held at zero) means at least one replica now.
  Going to zero is a scale-down like any other, so the delays add up: the stable
  window must have seen no load, ``idle_to_zero_s`` must have passed, and then the
  ``scale_down_delay_s`` holds the last replica (:func:`zero_after_s`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "HOLD_S",
    "SAMPLE_GAP_S",
    "AutoscaleSettings",
    "Decision",
    "Sample",
    "ScaleState",
    "decide",
    "record",
    "zero_after_s",
]

#: a rise counts in full once readings at least this far apart (about one load report
#: interval, a little less for a tick's jitter) all show it
HOLD_S: Final = 0.9
#: samples are kept at least this far apart: the controller also ticks when poked (a
#: wake, an API change, a replica's new status), and the windows average over time, not
#: over however many ticks a busy second had (the proxies report once a second anyway)
SAMPLE_GAP_S: Final = 0.5


def both_given(a: str, b: str) -> dict[str, Any]:
    """JSON Schema: *a* and *b* both given, not null (put under ``not``)."""
    return {
        "properties": {a: {"not": {"type": "null"}}, b: {"not": {"type": "null"}}},
        "required": [a, b],
    }


class AutoscaleSettings(BaseModel):
    """How one endpoint scales. Without a target the replica count is fixed (min = max)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={"not": both_given("target_concurrency", "target_rps")},
    )

    min_replicas: int = Field(default=1, ge=0, le=100)
    max_replicas: int = Field(default=1, ge=1, le=100)
    target_concurrency: float | None = Field(default=None, gt=0, le=10_000)
    target_rps: float | None = Field(default=None, gt=0, le=1_000_000)
    stable_window_s: float = Field(default=60.0, ge=1, le=3600)
    panic_window_s: float = Field(default=6.0, ge=1, le=600)
    panic_threshold: float = Field(default=2.0, ge=1, le=100)
    scale_up_delay_s: float = Field(default=0.0, ge=0, le=3600)
    scale_down_delay_s: float = Field(default=30.0, ge=0, le=3600)
    idle_to_zero_s: float = Field(default=300.0, ge=0, le=86_400)

    @model_validator(mode="after")
    def _check(self) -> AutoscaleSettings:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"min_replicas ({self.min_replicas}) is above max_replicas ({self.max_replicas})"
            )
        if self.target_concurrency is not None and self.target_rps is not None:
            raise ValueError("give target_concurrency or target_rps, not both")
        if self.panic_window_s > self.stable_window_s:
            raise ValueError("panic_window_s must not exceed stable_window_s")
        return self

    @property
    def autoscaled(self) -> bool:
        return self.min_replicas != self.max_replicas


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # epoch seconds
    concurrency: float  # requests in flight + queued, all proxies
    rps: float


@dataclass(frozen=True, slots=True)
class ScaleState:
    """What one decision hands to the next (the controller keeps it per endpoint)."""

    desired: int = 0
    panic_until: float | None = None
    last_active_at: float | None = None  # the last sample with any traffic (or a wake)
    #: (at, recommendation) of recent ticks, for the delays
    history: tuple[tuple[float, int], ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class Decision:
    desired: int
    reason: str
    inputs: dict[str, Any]
    state: ScaleState


def zero_after_s(settings: AutoscaleSettings) -> float | None:
    """About how long after its last request an endpoint is at zero replicas (None: its
    ``min_replicas`` keeps some): the longer of ``idle_to_zero_s`` and the stable window
    (whose average must fall to 0), then the ``scale_down_delay_s`` every fall waits."""
    if settings.min_replicas > 0:
        return None
    idle = max(settings.idle_to_zero_s, settings.stable_window_s)
    return idle + settings.scale_down_delay_s


def record(samples: list[Sample], sample: Sample, keep_s: float) -> list[Sample]:
    """*samples* with *sample* added (unless the latest is under ``SAMPLE_GAP_S`` old)
    and those older than *keep_s* dropped."""
    if not samples or sample.at - samples[-1].at >= SAMPLE_GAP_S:
        samples = [*samples, sample]
    return [s for s in samples if s.at >= sample.at - keep_s]


def _average(samples: list[Sample], since: float, metric: str) -> float:
    chosen = [getattr(s, metric) for s in samples if s.at > since]
    return sum(chosen) / len(chosen) if chosen else 0.0


def _held(samples: list[Sample], now: float, metric: str) -> float:
    """The load that held for ``HOLD_S``: the lowest reading since the latest sample taken
    at least that long ago (0 without one: a single reading is no step)."""
    older = [s.at for s in samples if s.at <= now - HOLD_S]
    if not older:
        return 0.0
    since = max(older)
    return float(min(getattr(s, metric) for s in samples if s.at >= since))


def decide(
    samples: list[Sample],
    settings: AutoscaleSettings,
    now: float,
    previous: ScaleState,
    *,
    ready: int,
    woken: bool = False,
) -> Decision:
    """Desired replicas from the load samples of the last stable window."""
    lo, hi = settings.min_replicas, settings.max_replicas
    active = woken or any(s.concurrency > 0 or s.rps > 0 for s in samples[-1:])
    last_active = now if active else previous.last_active_at
    inputs: dict[str, Any] = {"ready": ready, "woken": woken, "samples": len(samples)}
    if not settings.autoscaled:
        want = lo if lo > 0 or not woken else 1
        state = replace(previous, desired=want, last_active_at=last_active)
        return Decision(want, f"fixed at {lo} replicas", inputs, state)

    metric, target = (
        ("rps", settings.target_rps)
        if settings.target_rps is not None
        else ("concurrency", settings.target_concurrency or 1.0)
    )
    stable = _average(samples, now - settings.stable_window_s, metric)
    panic = _average(samples, now - settings.panic_window_s, metric)
    step = _held(samples, now, metric)
    want_stable = math.ceil(round(stable / target, 6))
    want_panic = math.ceil(round(panic / target, 6))
    want_held = math.ceil(round(step / target, 6))
    inputs |= {
        "metric": metric,
        "target": target,
        "stable_avg": round(stable, 3),
        "panic_avg": round(panic, 3),
        "held": round(step, 3),
        "want_stable": want_stable,
        "want_panic": want_panic,
        "want_held": want_held,
    }

    panic_until = previous.panic_until
    if panic_until is not None and now >= panic_until:
        panic_until = None
    burst = max(want_panic, want_held)
    if burst >= settings.panic_threshold * max(ready, 1) and burst > ready:
        panic_until = now + settings.stable_window_s
    if panic_until is not None:
        want = max(burst, previous.desired)
        why = (
            f"panic: {metric} {step:.2f} held for {HOLD_S:g}s"
            if want_held > want_panic
            else f"panic: {metric} {panic:.2f} over {settings.panic_window_s:g}s"
        )
    else:
        want = want_stable
        why = f"{metric} {stable:.2f} over {settings.stable_window_s:g}s, target {target:g}"

    # zero only after the idle window; before that, keep one warm
    if want == 0 and lo == 0:
        idle_since = last_active if last_active is not None else -math.inf
        if previous.desired > 0 and now - idle_since < settings.idle_to_zero_s:
            want = 1
            why = f"idle less than {settings.idle_to_zero_s:g}s: one replica stays"
        else:
            why = f"no traffic for {settings.idle_to_zero_s:g}s: scale to zero"
    if woken:
        want = max(want, 1)
        why = "woken: a request waits at zero" if previous.desired == 0 else why
    want = min(max(want, lo), hi)

    keep = max(settings.scale_down_delay_s, settings.scale_up_delay_s)
    history = (*((at, r) for at, r in previous.history if at > now - keep), (now, want))
    desired = want
    if want > previous.desired and settings.scale_up_delay_s > 0 and panic_until is None:
        held = [r for at, r in history if at >= now - settings.scale_up_delay_s]
        span = now - min(at for at, _ in history)
        if span < settings.scale_up_delay_s:
            desired = previous.desired
            why = f"waiting {settings.scale_up_delay_s:g}s before scaling up"
        else:
            desired = max(previous.desired, min(held))
    elif want < previous.desired and not woken:
        desired = max(r for at, r in history if at >= now - settings.scale_down_delay_s)
        if desired > want:
            why = f"holding {desired} for the {settings.scale_down_delay_s:g}s scale-down delay"
    desired = min(max(desired, lo), hi)
    state = ScaleState(desired, panic_until, last_active, history)
    return Decision(desired, why, inputs, state)

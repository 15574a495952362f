"""The autoscaling decision as tables: load samples, settings, time, previous state in;
desired replicas out."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pydantic import ValidationError

from gateway.domain.autoscale import (
    AutoscaleSettings,
    Sample,
    ScaleState,
    decide,
    record,
    zero_after_s,
)

NOW = 10_000.0


def steady(concurrency: float, seconds: int = 60, rps: float = 0.0) -> list[Sample]:
    """One sample a second for the last *seconds*."""
    return [Sample(NOW - seconds + i + 1, concurrency, rps) for i in range(seconds)]


def then(level: float, *tail: float) -> list[Sample]:
    """*level* once a second for a minute, ending with the readings of *tail* (the last
    one at NOW)."""
    n = len(tail)
    before = [Sample(NOW - 59 + i, level, 0) for i in range(60 - n)]
    return before + [Sample(NOW - n + 1 + i, value, 0) for i, value in enumerate(tail)]


@dataclass(frozen=True)
class Case:
    name: str
    samples: list[Sample]
    settings: AutoscaleSettings
    previous: ScaleState
    ready: int
    want: int
    reason: str  # a word the reason must contain
    woken: bool = False


RANGE = AutoscaleSettings(
    min_replicas=1, max_replicas=10, target_concurrency=4, scale_down_delay_s=0
)
#: the scale-up step of benchmarks/endpoints.py: one replica at its target, then 8x
STEP = AutoscaleSettings(min_replicas=1, max_replicas=8, target_concurrency=2)
ZERO = AutoscaleSettings(min_replicas=0, max_replicas=5, target_concurrency=4, idle_to_zero_s=60)
CASES = [
    Case(
        "fixed count ignores load",
        steady(100),
        AutoscaleSettings(min_replicas=3, max_replicas=3),
        ScaleState(3),
        3,
        3,
        "fixed",
    ),
    Case(
        "steady load at target keeps the count",
        steady(8),
        RANGE,
        ScaleState(2),
        2,
        2,
        "concurrency",
    ),
    Case(
        "stable average over target scales up",
        steady(20),
        RANGE,
        ScaleState(2),
        2,
        5,
        "concurrency",
    ),
    Case("never above max", steady(400), RANGE, ScaleState(2), 2, 10, "panic"),
    Case("never below min", steady(0), RANGE, ScaleState(2), 2, 1, "concurrency"),
    Case(
        "a burst in the panic window scales up at once",
        [Sample(NOW - 59 + i, 0, 0) for i in range(54)]
        + [Sample(NOW - 5 + i, 40, 0) for i in range(6)],
        RANGE,
        ScaleState(1),
        1,
        10,
        "panic",
    ),
    Case(
        "an 8x step that held for two readings asks for all its replicas at once",
        then(2, 16, 16),
        STEP,
        ScaleState(1),
        1,
        8,
        "held for",
    ),
    Case(
        "the step seen at extra ticks in between (pokes) is still held",
        sorted([*then(2, 16, 16), Sample(NOW - 0.4, 16, 0)], key=lambda s: s.at),
        STEP,
        ScaleState(1),
        1,
        8,
        "held for",
    ),
    Case(
        "a single reading of 8x moves only the panic average",
        then(2, 16),
        STEP,
        ScaleState(1),
        1,
        3,
        "over 6s",
    ),
    Case(
        "a dip inside the held second holds it back",
        then(2, 16, 4, 16),
        STEP,
        ScaleState(1),
        1,
        4,
        "over 6s",
    ),
    Case(
        "a held rise below the panic threshold waits for the stable window",
        then(8, 12, 12),
        RANGE.model_copy(update={"scale_down_delay_s": 30}),
        ScaleState(2),
        2,
        3,
        "over 60s",
    ),
    Case(
        "a short blip below the panic threshold waits for the stable window",
        [Sample(NOW - 59 + i, 4, 0) for i in range(57)]
        + [Sample(NOW - 2 + i, 6, 0) for i in range(3)],
        RANGE,
        ScaleState(1),
        1,
        2,
        "concurrency",
    ),
    Case(
        "in panic it never scales down",
        steady(1),
        RANGE,
        ScaleState(6, panic_until=NOW + 30),
        6,
        6,
        "panic",
    ),
    Case(
        "panic ends after its stable window",
        steady(1),
        RANGE,
        ScaleState(6, panic_until=NOW - 1),
        6,
        1,
        "concurrency",
    ),
    Case(
        "scale-down delay keeps the highest recent recommendation",
        steady(4),
        AutoscaleSettings(
            min_replicas=1, max_replicas=10, target_concurrency=4, scale_down_delay_s=30
        ),
        ScaleState(4, history=((NOW - 10, 4),)),
        4,
        4,
        "scale-down delay",
    ),
    Case(
        "after the scale-down delay the lower value wins",
        steady(4),
        AutoscaleSettings(
            min_replicas=1, max_replicas=10, target_concurrency=4, scale_down_delay_s=30
        ),
        ScaleState(4, history=((NOW - 40, 4),)),
        4,
        1,
        "concurrency",
    ),
    Case(
        "scale-up delay waits before rising",
        steady(10),
        AutoscaleSettings(
            min_replicas=1, max_replicas=10, target_concurrency=4, scale_up_delay_s=10
        ),
        ScaleState(2),
        2,
        2,
        "waiting",
    ),
    Case(
        "scale-up delay: a rise that held long enough applies",
        steady(10),
        AutoscaleSettings(
            min_replicas=1, max_replicas=10, target_concurrency=4, scale_up_delay_s=10
        ),
        ScaleState(2, history=tuple((NOW - 12 + i, 3) for i in range(12))),
        2,
        3,
        "concurrency",
    ),
    Case(
        "requests per second as the target",
        steady(0, rps=250),
        AutoscaleSettings(min_replicas=1, max_replicas=10, target_rps=100, scale_down_delay_s=0),
        ScaleState(1),
        1,
        3,
        "rps",
    ),
    Case(
        "idle but within the idle window keeps one",
        steady(0),
        ZERO,
        ScaleState(1, last_active_at=NOW - 30),
        1,
        1,
        "one replica stays",
    ),
    Case(
        "idle past the window goes to zero",
        steady(0),
        ZERO.model_copy(update={"scale_down_delay_s": 0}),
        ScaleState(1, last_active_at=NOW - 61),
        1,
        0,
        "zero",
    ),
    Case("a wake at zero asks for one", [], ZERO, ScaleState(0), 0, 1, "woken", woken=True),
    Case(
        "a wake while replicas run changes nothing",
        steady(8),
        ZERO,
        ScaleState(2, last_active_at=NOW),
        2,
        2,
        "concurrency",
        woken=True,
    ),
    Case("zero stays zero without traffic", steady(0), ZERO, ScaleState(0), 0, 0, "zero"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_decide(case: Case) -> None:
    decision = decide(
        case.samples, case.settings, NOW, case.previous, ready=case.ready, woken=case.woken
    )
    assert decision.desired == case.want, decision
    assert case.reason in decision.reason, decision.reason
    assert decision.state.desired == case.want
    assert decision.inputs["ready"] == case.ready


def test_a_burst_of_wakes_asks_for_one_replica_not_one_per_request() -> None:
    state = ScaleState(0)
    for i in range(20):
        decision = decide([], ZERO, NOW + i * 0.01, state, ready=0, woken=True)
        state = decision.state
        assert decision.desired == 1


def test_decisions_carry_their_inputs() -> None:
    decision = decide(steady(20), RANGE, NOW, ScaleState(2), ready=2)
    assert decision.inputs | {"metric": "concurrency", "target": 4.0, "want_stable": 5} == (
        decision.inputs
    )


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"min_replicas": 3, "max_replicas": 2}, "min_replicas"),
        ({"target_concurrency": 1, "target_rps": 1, "max_replicas": 2}, "target"),
        ({"panic_window_s": 90, "stable_window_s": 60}, "panic_window_s"),
        ({"min_replicas": -1}, "min_replicas"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_bad_settings_are_refused(values: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        AutoscaleSettings.model_validate(values)
    assert field in str(info.value)


def test_samples_stay_apart_and_within_the_window() -> None:
    """Extra ticks (pokes) within half a second add no sample: the windows weigh time."""
    samples: list[Sample] = []
    for at, value in [(0.0, 1), (0.2, 9), (0.5, 2), (0.7, 9), (1.5, 3), (61.0, 4)]:
        samples = record(samples, Sample(at, value, 0), keep_s=60)
    assert [(s.at, s.concurrency) for s in samples] == [(1.5, 3), (61.0, 4)]
    samples = []
    for at in (0.0, 0.2, 0.5, 0.7, 1.5):
        samples = record(samples, Sample(at, 1, 0), keep_s=60)
    assert [s.at for s in samples] == [0.0, 0.5, 1.5]


@pytest.mark.parametrize(
    "values",
    [
        {"idle_to_zero_s": 10, "stable_window_s": 10},  # 10 s idle is about 40 s
        {"idle_to_zero_s": 300},  # the defaults: 330 s
        {"idle_to_zero_s": 10, "scale_down_delay_s": 0},  # the stable window's 60 s
        {"idle_to_zero_s": 20, "stable_window_s": 6, "scale_down_delay_s": 5},
    ],
)
def test_the_time_to_zero_is_the_delays_added_up(values: dict[str, float]) -> None:
    """zero_after_s (what show prints) against decide() run a second at a time."""
    settings = AutoscaleSettings.model_validate(
        {"min_replicas": 0, "max_replicas": 3, "target_concurrency": 1, "panic_window_s": 6}
        | values
    )
    samples: list[Sample] = []
    state = ScaleState(desired=1, last_active_at=0.0)
    last_request, at_zero = 4.0, None
    for t in range(1000):
        load = 1.0 if t <= last_request else 0.0
        samples = record(samples, Sample(float(t), load, 0.0), settings.stable_window_s)
        state = decide(samples, settings, float(t), state, ready=state.desired).state
        if state.desired == 0:
            at_zero = t - last_request
            break
    said = zero_after_s(settings)
    assert said is not None
    assert at_zero is not None
    assert abs(at_zero - said) <= 1.5, (at_zero, said)
    assert zero_after_s(settings.model_copy(update={"min_replicas": 1})) is None

"""The scheduler configuration's JSON Schema (what /openapi.json says) and the server agree.

``plugins.scheduling.schema`` types a group's ``scheduler`` by the plugins loaded; the API
checks one with ``effective_config(strict=True)`` and ``build_pipeline(strict=True)``.
A configuration the schema takes is taken by both, and one it refuses is refused, for
a table of typical ones and for what schemathesis draws from the schema (the one rule a
JSON Schema cannot say, heuristic-fifo's ``reserve_after > max_skips``, aside).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from pydantic import ValidationError
from sched_builders import install_plugin_package
from schemathesis.generation.modes import GenerationMode

from plugins.scheduling.config import effective_config
from plugins.scheduling.errors import SchedulerConfigError
from plugins.scheduling.pipeline import available, build_pipeline, reset_registry
from plugins.scheduling.schema import scheduler_schema
from plugins.scheduling.sequencers import HeuristicFifoSettings


def _document() -> dict[str, Any]:
    """A JSON Schema of the configuration, its definitions under ``$defs``."""
    named = scheduler_schema(available(), ref_template="#/$defs/{model}")
    return {**named["SchedulerConfig"], "$defs": named}


def schema_takes(config: object) -> bool:
    return bool(jsonschema_rs.Draft202012Validator(_document()).is_valid(config))


def server_takes(config: dict[str, Any]) -> bool:
    """What ``PUT /v1/resource-groups/{name}`` checks (``routes/groups._check``)."""
    try:
        build_pipeline(effective_config(config, strict=True), strict=True)
    except (SchedulerConfigError, ValidationError):
        return False
    return True


GOOD: list[dict[str, Any]] = [
    {},
    {"sequencer": "drf", "scorers": ["dispersed"]},
    {"sequencer": {"name": "drf", "options": {"level": "user"}}},
    {"sequencer": {"name": "heuristic-fifo", "options": {"max_skips": 5, "reserve_after": 6}}},
    {"filters": ["fits"], "scorers": []},
    {"filters": [{"name": "labels"}, {"name": "fits", "options": {}}]},
    {"scorers": [{"name": "numa", "weight": 0}, {"name": "concentrated", "weight": 1000}]},
    {"gang": {"name": "all-or-nothing", "options": {"together_tries": 1000.0}}},
    {"validators": [], "sample_size": 0, "scan": "rotate", "max_retries": 100},
    {"share_quantum": "0.25", "max_cluster_size": 64, "cluster_modes": ["single-node"]},
    {"share_quantum": 1e-9, "max_sessions_per_pass": 1, "allow_unenforced_fractions": True},
    {"filters": None, "sequencer": None, "share_quantum": None, "scan": None},
]

BAD: list[dict[str, Any]] = [
    {"sequencer": "nope"},  # no such plugin
    {"sequencer": "fits"},  # a filter, not a sequencer
    {"filters": ["labels"]},  # no fits
    {"filters": []},
    {"filters": ["fits", "fits"]},  # twice
    {"filters": ["fits", {"name": "fits"}]},  # twice, in two forms
    {"scorers": ["numa", {"name": "numa", "weight": 2}]},
    {"validators": ["quota", "quota"]},
    {"sequencer": {"name": "drf", "options": {"level": "team"}}},  # not one of its values
    {"sequencer": {"name": "drf", "options": {"levels": "user"}}},  # not one of its options
    {"sequencer": {"name": "fifo", "options": {"max_skips": 1}}},  # another plugin's option
    {"sequencer": {"name": "drf", "options": None}},
    {"sequencer": {"options": {}}},  # no name
    {"gang": {"name": "all-or-nothing", "options": {"distinct_nodes": 1}}},  # 1 for true
    {"gang": {"name": "all-or-nothing", "options": {"together_tries": 0}}},
    {"filters": [{"name": "fits", "weight": 1}]},  # only scorers weigh
    {"scorers": [{"name": "numa", "weight": 1001}]},
    {"scorers": [{"name": "numa", "weight": "1"}]},
    {"sample_size": -1},
    {"sample_size": "8"},
    {"sample_size": 8.5},
    {"scan": "random"},
    {"max_cluster_size": 65},
    {"cluster_modes": ["everywhere"]},
    {"allow_unenforced_fractions": 1},
    {"share_quantum": 0},
    {"share_quantum": "0.00"},
    {"share_quantum": "-1"},
    {"share_quantum": "1e-3"},  # a plain decimal only
    {"share_quantum": " 1"},
    {"share_quantum": True},
    {"schedular": {}},  # unknown key
]


@pytest.mark.parametrize("config", GOOD, ids=repr)
def test_a_configuration_the_schema_takes_the_api_takes(config: dict[str, Any]) -> None:
    assert schema_takes(config)
    assert server_takes(config)


@pytest.mark.parametrize("config", BAD, ids=repr)
def test_a_configuration_the_schema_refuses_the_api_refuses(config: dict[str, Any]) -> None:
    assert not schema_takes(config)
    assert not server_takes(config)


def test_the_rule_json_schema_cannot_say_is_the_servers_alone() -> None:
    """Two options compared: the schemathesis hooks leave such cases out."""
    config = {"sequencer": {"name": "heuristic-fifo", "options": {"max_skips": 30}}}
    assert schema_takes(config)
    assert not server_takes(config)


def _operation() -> Any:
    named = scheduler_schema(available())
    body = {"$ref": "#/components/schemas/SchedulerConfig"}
    document = {
        "openapi": "3.1.0",
        "info": {"title": "groups", "version": "1"},
        "paths": {
            "/g": {
                "put": {
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": body}},
                    },
                    "responses": {"200": {"description": "stored"}},
                }
            }
        },
        "components": {"schemas": named},
    }
    return schemathesis.openapi.from_dict(document)["/g"]["PUT"]


def _fifo_ordered(config: dict[str, Any]) -> bool:
    sequencer = config.get("sequencer")
    if not isinstance(sequencer, dict) or sequencer.get("name") != "heuristic-fifo":
        return True
    try:
        HeuristicFifoSettings.model_validate(sequencer.get("options", {}))
    except ValidationError:
        return False
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=_operation().as_strategy(generation_mode=GenerationMode.POSITIVE))
def test_every_configuration_drawn_from_the_schema_is_taken(case: Any) -> None:
    if _fifo_ordered(case.body):
        assert server_takes(case.body), case.body


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=_operation().as_strategy(generation_mode=GenerationMode.NEGATIVE))
def test_every_object_drawn_against_the_schema_is_refused(case: Any) -> None:
    if isinstance(case.body, dict):  # (the route's model refuses what is not an object)
        assert not server_takes(case.body), case.body


ACME = """
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field


class Band(BaseModel):
    model_config = ConfigDict(extra="forbid")
    low: int = Field(default=0, ge=0)


class GreenSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str = "power"
    value: Literal["green", "coal"] = "green"
    band: Band = Band()


class GreenestScorer:
    name: ClassVar[str] = "greenest"
    Settings: ClassVar[type[BaseModel]] = GreenSettings

    def __init__(self, settings):
        self.settings = settings

    def score(self, nodes, shape, ctx):
        return [0.0 for n in nodes]


class HalfAScorer:
    name: ClassVar[str] = "half"
    Settings: ClassVar[type[BaseModel]] = GreenSettings
"""


@pytest.fixture
def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    entry_points = {
        "scorer.greenest": "acme_typed:GreenestScorer",
        "scorer.half": "acme_typed:HalfAScorer",
    }
    install_plugin_package(tmp_path, "acme_typed", ACME, entry_points)
    monkeypatch.syspath_prepend(str(tmp_path))
    reset_registry()
    yield
    reset_registry()
    sys.modules.pop("acme_typed", None)


@pytest.mark.usefixtures("acme")
def test_an_installed_plugin_is_in_the_schema_with_its_own_options() -> None:
    named = scheduler_schema(available())
    scorers = named["SchedulerConfig"]["properties"]["scorers"]["anyOf"][0]["items"]["anyOf"]
    assert "greenest" in scorers[0]["enum"]
    assert "half" not in scorers[0]["enum"]  # it does not keep its contract: refused
    options = named["SchedulerConfig.scorer.greenest"]
    assert options["properties"]["value"]["enum"] == ["green", "coal"]
    assert options["additionalProperties"] is False
    assert "SchedulerConfig.scorer.greenest.Band" in named  # its nested model, named under it

    taken = {"scorers": [{"name": "greenest", "options": {"value": "coal", "band": {"low": 2}}}]}
    assert schema_takes(taken)
    assert server_takes(taken)
    for refused in (
        {"scorers": [{"name": "greenest", "options": {"value": "grey"}}]},
        {"scorers": [{"name": "greenest", "options": {"band": {"low": -1}}}]},
        {"scorers": ["half"]},
    ):
        assert not schema_takes(refused)
        assert not server_takes(refused)

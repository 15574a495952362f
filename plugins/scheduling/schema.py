"""The JSON Schema of a group's scheduler configuration, made from the plugins loaded.

``SchedulerConfig`` takes any plugin name and any ``options``: which names exist, and
what options each takes, is known only once the plugins are loaded (built-in and other
distributions' entry points), when the pipeline is built. This schema says it up
front, for the OpenAPI document (``gateway.api.openapi``), so that what the schema takes
the API takes:

* each plugin field (``sequencer``, ``gang``) and each item of a plugin list
  (``validators``, ``filters``, ``scorers``) is a name of that kind (the short form,
  ``"drf"``) or ``{"name": <const>, "options": <that plugin's Settings schema>}``
  (scorers add ``weight``); nothing else;
* ``filters`` contains ``fits`` once, and no list names a plugin twice in either form
  (``maxContains`` per name);
* the other knobs are ``SchedulerConfig``'s own fields with their bounds;
* unknown keys are refused, and every key may be ``null`` (its default);
* each named schema's ``title`` is its name: generators name a class by the title
  (openapi-python-client), and two plugins' Settings classes may share a name
  (``NoSettings``).

What JSON Schema cannot say is a rule that compares two options of one plugin (a
Settings model validator, such as heuristic-fifo's ``reserve_after > max_skips``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from plugins.scheduling.config import REQUIRED_FILTER, SchedulerConfig, ScorerRef

__all__ = ["FIELD_KINDS", "scheduler_schema"]

#: SchedulerConfig's plugin fields -> (plugin kind, whether it is a list)
FIELD_KINDS: dict[str, tuple[str, bool]] = {
    "validators": ("validator", True),
    "sequencer": ("sequencer", False),
    "filters": ("filter", True),
    "scorers": ("scorer", True),
    "gang": ("gang", False),
}

Schema = dict[str, Any]


def scheduler_schema(
    plugins: Mapping[str, Mapping[str, Any]],
    *,
    name: str = "SchedulerConfig",
    ref_template: str = "#/components/schemas/{model}",
) -> dict[str, Schema]:
    """Named schemas: *name* (the configuration) and ``<name>.<kind>.<plugin>`` (a
    plugin's options, and that model's own definitions under it), referring to each
    other through *ref_template* (pydantic's: ``{model}`` is the schema's name).

    *plugins* is ``{kind: {plugin name: factory}}`` (:func:`.pipeline.available`).
    """
    named: dict[str, Schema] = {}

    def ref(model: str) -> Schema:
        return {"$ref": ref_template.format(model=model)}

    def options(kind: str, plugin: str, settings: type[BaseModel]) -> Schema:
        own = f"{name}.{kind}.{_safe(plugin)}"
        schema = settings.model_json_schema(
            ref_template=ref_template.format(model=own + ".{model}")
        )
        for sub, definition in schema.pop("$defs", {}).items():
            named[f"{own}.{sub}"] = {**definition, "title": f"{own}.{sub}"}
        named[own] = {**schema, "title": own}
        return ref(own)

    base = SchedulerConfig.model_json_schema()["properties"]
    weight = ScorerRef.model_json_schema()["properties"]["weight"]
    properties: dict[str, Schema] = {}
    for field, prop in base.items():
        if field in FIELD_KINDS:
            kind, many = FIELD_KINDS[field]
            found = plugins.get(kind, {})
            entry = _entry(
                {n: options(kind, n, f.Settings) for n, f in sorted(found.items())},
                {"weight": weight} if kind == "scorer" else {},
            )
            made = _listed(entry, sorted(found), kind == "filter") if many else entry
            prop = {**{k: prop[k] for k in ("title", "default") if k in prop}, **made}
            if not many and "default" in prop:
                prop["default"] = _short(prop["default"])
        properties[field] = _nullable(prop)
    named[name] = {
        "title": name,
        "description": "the group's scheduler pipeline: plugins by name (the short form, "
        'or {"name", "options"}), in order, and the knobs of the pass; a key left out '
        "or null is its default",
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    return named


def _safe(plugin: str) -> str:
    """A plugin name as part of a schema's name (letters, digits, ``.``, ``-``, ``_``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", plugin)


def _short(ref: Any) -> Any:
    """A plugin with no options set as its name, the short form (a generator that types
    a default, such as openapi-python-client, takes a string for a union's default, not
    an object)."""
    if isinstance(ref, dict) and set(ref) == {"name", "options"} and not ref["options"]:
        return ref["name"]
    return ref


def _entry(options: Mapping[str, Schema], extra: Mapping[str, Schema]) -> Schema:
    """One plugin of a kind: its name, or the object naming it with its options."""
    if not options:
        return {"not": {}}  # no plugin of this kind loads: nothing names one
    objects = [
        {
            "type": "object",
            "properties": {"name": {"const": plugin}, "options": schema, **extra},
            "required": ["name"],
            "additionalProperties": False,
        }
        for plugin, schema in options.items()
    ]
    return {"anyOf": [{"type": "string", "enum": list(options)}, *objects]}


def _named(plugin: str) -> Schema:
    """An item that names *plugin*, in either form."""
    return {
        "anyOf": [
            {"const": plugin},
            {"type": "object", "properties": {"name": {"const": plugin}}, "required": ["name"]},
        ]
    }


def _listed(entry: Schema, plugins: list[str], filters: bool) -> Schema:
    """A list of *entry*, each plugin at most once (``fits`` exactly once in filters)."""
    schema: Schema = {"type": "array", "items": entry}
    once = [{"contains": _named(p), "minContains": 0, "maxContains": 1} for p in plugins]
    if filters:
        schema.update(contains=_named(REQUIRED_FILTER), maxContains=1)
        once = [c for c, p in zip(once, plugins, strict=True) if p != REQUIRED_FILTER]
    if once:
        schema["allOf"] = once
    return schema


def _nullable(prop: Schema) -> Schema:
    """*prop* or ``null`` (a key set to null is its default), keeping title and default."""
    if {"type": "null"} in prop.get("anyOf", []):
        return prop
    outer: Schema = {k: prop.pop(k) for k in ("title", "default", "description") if k in prop}
    branches = prop["anyOf"] if list(prop) == ["anyOf"] else [prop]
    return {**outer, "anyOf": [*branches, {"type": "null"}]}

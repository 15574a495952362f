"""Find plugins: the built-in ones in literal registries, others through entry points.

A plugin is a *factory* (usually a class) known by name within a versioned group such
as ``jobgate.runtimes.v1``. The plugins that ship with jobgate are listed, by hand, in
one registry per group (kube-scheduler's ``NewInTreeRegistry``), so they work from a
plain source checkout with nothing installed::

    plugins/runtimes/registry.py        IN_TREE = {"process": ProcessRuntime, ...}
    plugins/accelerators/registry.py    IN_TREE = {"cuda": CudaPlugin, ...}
    plugins/scheduling/registry.py      IN_TREE = {"sequencer.fifo": FifoSequencer, ...}

Plugins from *other* distributions are published as entry points in the group::

    [project.entry-points."jobgate.runtimes.v1"]
    firecracker = "acme_rt:FirecrackerRuntime"

Every factory, built-in or not, is checked against the group's ``Protocol`` when it is
loaded, and a name is refused when two plugins claim it (a third-party plugin cannot
shadow a built-in one), as Backend.AI's plugin scanner and kube-scheduler's registry do.
Entry points that point into our own ``plugins`` package (the metadata of an older
install) are ignored: the registry is the one list of built-ins.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

__all__ = [
    "ACCELERATORS",
    "REGISTRIES",
    "RUNTIMES",
    "SCHEDULERS",
    "PluginError",
    "builtin",
    "load_group",
    "load_one",
    "names",
    "protocol_members",
]

RUNTIMES = "jobgate.runtimes.v1"
ACCELERATORS = "jobgate.accelerators.v1"
SCHEDULERS = "jobgate.schedulers.v1"

#: group -> the module whose ``IN_TREE`` dict lists the group's built-in plugins
#: (imported only when the group is first asked for)
REGISTRIES = {
    RUNTIMES: "plugins.runtimes.registry",
    ACCELERATORS: "plugins.accelerators.registry",
    SCHEDULERS: "plugins.scheduling.registry",
}

#: top-level packages of this distribution: their entry points are not third-party
_OURS = ("plugins",)


class PluginError(RuntimeError):
    """A plugin that cannot be loaded: missing, duplicated or not fulfilling its contract."""


def protocol_members(protocol: type) -> set[str]:
    """The attribute and method names a Protocol declares (not inherited dunders)."""
    members: set[str] = set()
    for klass in protocol.__mro__:
        if klass is object or getattr(klass, "_is_protocol", False) is False:
            continue
        if klass.__name__ in {"Protocol", "Generic"}:
            continue
        members.update(getattr(klass, "__annotations__", {}))
        members.update(
            name
            for name, value in vars(klass).items()
            if not name.startswith("_") and (callable(value) or isinstance(value, property))
        )
    return members


def builtin(group: str) -> Mapping[str, Any]:
    """The group's built-in plugins, ``{name: factory}`` (empty for a group of others')."""
    module = REGISTRIES.get(group)
    if module is None:
        return {}
    registry: Mapping[str, Any] = importlib.import_module(module).IN_TREE
    return registry


def _third_party(group: str) -> list[EntryPoint]:
    """The group's entry points, less those that point into our own packages."""
    return [
        ep for ep in entry_points(group=group) if ep.value.split(".")[0].split(":")[0] not in _OURS
    ]


def _where(factory: object) -> str:
    return f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', factory)}"


def _check(name: str, where: str, factory: object, protocol: type) -> None:
    missing = sorted(m for m in protocol_members(protocol) if not hasattr(factory, m))
    if missing:
        raise PluginError(
            f"plugin {name!r} ({where}) does not implement {protocol.__name__}: "
            f"missing {', '.join(missing)}"
        )


def load_group(
    group: str,
    protocol: type,
    *,
    select: Callable[[str], bool] | None = None,
) -> dict[str, Any]:
    """``{name: factory}`` of the group's plugins whose name *select* lets through.

    Built-ins come first; a third-party entry point is imported only when selected.
    """
    found: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for name, factory in builtin(group).items():
        if select is not None and not select(name):
            continue
        where = f"built-in {_where(factory)}"
        _check(name, where, factory, protocol)
        found[name] = factory
        origin[name] = where
    for ep in _third_party(group):
        if select is not None and not select(ep.name):
            continue
        if ep.name in found:
            if origin[ep.name] == ep.value:
                continue  # the same distribution seen twice on sys.path (editable installs)
            raise PluginError(
                f"duplicate plugin name {ep.name!r} in {group}: {origin[ep.name]} and "
                f"{ep.value} (from {_dist(ep)}); a plugin name is taken once"
            )
        try:
            factory = ep.load()
        except Exception as exc:  # an import error in someone else's package
            raise PluginError(f"plugin {ep.name!r} ({ep.value}) failed to import: {exc}") from exc
        _check(ep.name, ep.value, factory, protocol)
        found[ep.name] = factory
        origin[ep.name] = ep.value
    return found


def names(group: str) -> list[str]:
    """Every plugin name the group offers (built-in and installed), sorted."""
    return sorted({*builtin(group), *(ep.name for ep in _third_party(group))})


def load_one(group: str, name: str, protocol: type) -> Any:
    """The factory called *name* in *group*, or a PluginError listing what exists."""
    plugins = load_group(group, protocol, select=lambda n: n == name)
    if name not in plugins:
        raise PluginError(
            f"no plugin {name!r} in {group} (available: {', '.join(names(group)) or 'none'})"
        )
    return plugins[name]


def _dist(ep: EntryPoint) -> str:
    dist = ep.dist
    return dist.name if dist is not None else "an unknown distribution"

"""Load plugins from versioned entry-point groups.

A plugin is a *factory* (usually a class) published under a group such as
``jobgate.runtimes.v1``. Loading checks that the factory provides every member of the
group's ``Protocol`` and refuses two plugins with the same name, as Backend.AI's
plugin scanner and kube-scheduler's registry do::

    [project.entry-points."jobgate.runtimes.v1"]
    podman = "plugins.runtimes.podman:PodmanRuntime"

Third-party packages add plugins the same way; nothing in jobgate has to change.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import Any

__all__ = [
    "ACCELERATORS",
    "RUNTIMES",
    "SCHEDULERS",
    "PluginError",
    "load_group",
    "load_one",
    "protocol_members",
]

RUNTIMES = "jobgate.runtimes.v1"
ACCELERATORS = "jobgate.accelerators.v1"
SCHEDULERS = "jobgate.schedulers.v1"


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


def _check(ep: EntryPoint, factory: object, protocol: type) -> None:
    missing = sorted(m for m in protocol_members(protocol) if not hasattr(factory, m))
    if missing:
        raise PluginError(
            f"plugin {ep.name!r} ({ep.value}) does not implement {protocol.__name__}: "
            f"missing {', '.join(missing)}"
        )


def load_group(
    group: str,
    protocol: type,
    *,
    select: Callable[[EntryPoint], bool] | None = None,
) -> dict[str, Any]:
    """Return ``{name: factory}`` for every plugin in *group* (optionally filtered)."""
    found: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for ep in entry_points(group=group):
        if select is not None and not select(ep):
            continue
        if ep.name in found:
            if origin[ep.name] == ep.value:
                continue  # the same distribution seen twice on sys.path (editable installs)
            raise PluginError(
                f"duplicate plugin name {ep.name!r} in {group}: {origin[ep.name]} and {ep.value}"
            )
        try:
            factory = ep.load()
        except Exception as exc:  # an import error in someone else's package
            raise PluginError(f"plugin {ep.name!r} ({ep.value}) failed to import: {exc}") from exc
        _check(ep, factory, protocol)
        found[ep.name] = factory
        origin[ep.name] = ep.value
    return found


def load_one(group: str, name: str, protocol: type) -> Any:
    """The factory called *name* in *group*, or a PluginError listing what exists."""
    plugins = load_group(group, protocol, select=lambda ep: ep.name == name)
    if name not in plugins:
        available = sorted({ep.name for ep in entry_points(group=group)})
        raise PluginError(
            f"no plugin {name!r} in {group} (available: {', '.join(available) or 'none'})"
        )
    return plugins[name]

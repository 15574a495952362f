"""How a scheduling pass fails, so the gateway can log it and retry next tick.

``plan()`` never returns a half-made plan: a pass either returns a whole Plan or raises

* :class:`SchedulerConfigError` - the group's configuration names a plugin that does not
  exist, does not fulfil its contract, or gets options its Settings refuse. Nothing can
  be planned for that group until an operator fixes it; the message says what to fix.
* :class:`PlanError` - a plugin (or the planner) raised while deciding. It names the
  plugin and the session being decided; the original exception is ``__cause__``. No
  partial plan is applied: a quota validator that crashed must not let sessions past.
  Inside a pass every plugin call is wrapped (:mod:`.guard`) and a crash comes out as
  :class:`PluginFailure` naming ``<kind>.<name>``; the planner adds the session.

Both derive from :class:`SchedulerError`. A session that merely does not fit is neither:
it is a result (``Plan.waiting``), not an exception.
"""

from __future__ import annotations

__all__ = ["PlanError", "PluginFailure", "SchedulerConfigError", "SchedulerError"]


class SchedulerError(RuntimeError):
    """A scheduling pass could not produce a plan."""


class SchedulerConfigError(SchedulerError):
    """The resource group's scheduler configuration cannot be built into a pipeline."""


class PlanError(SchedulerError):
    """A plugin raised during a pass; ``plugin`` and ``session_id`` say where."""

    def __init__(self, plugin: str, session_id: str | None, cause: BaseException) -> None:
        where = f" while deciding session {session_id}" if session_id else ""
        super().__init__(f"scheduler plugin {plugin} failed{where}: {cause!r}")
        self.plugin = plugin
        self.session_id = session_id


class PluginFailure(SchedulerError):
    """A plugin call raised; ``plugin`` is ``<kind>.<name>``, ``cause`` what it raised."""

    def __init__(self, plugin: str, cause: BaseException) -> None:
        super().__init__(f"scheduler plugin {plugin} failed: {cause!r}")
        self.plugin = plugin
        self.cause = cause

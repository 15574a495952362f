"""Apps an interactive session serves (Jupyter, code-server, a terminal ...) and how to start them.

An image declares its apps in the label ``jobgate.service-ports``
(``jupyter:http:8888,code-server:http:8080``); the gateway's image registry can add or
override them. Each app may have a *start* template, a command with ``{port}`` and
``{base_url}`` filled in per session, so one image serves any session under the URL the
app proxy gives it::

    /s/{session}/jupyter/      Jupyter keeps its prefix: base_url is that path
    /s/{session}/code-server/  code-server wants it stripped: base_url is "/"

When an interactive session names no command, its container runs the start commands
of its apps (one app: that command; several: a shell runs them all). Apps with no start
template rely on the image's own command.
"""

from __future__ import annotations

import shlex

from contract.apps import App, with_defaults
from plugins.runtimes.base import SERVICE_PORTS_LABEL, ServicePort, parse_service_ports

__all__ = ["apps_from_labels", "base_url", "service_port", "start_command"]


def service_port(app: App) -> ServicePort:
    """The port the runtime publishes for *app*."""
    return ServicePort(app.name, app.protocol, app.port)


def apps_from_labels(labels: dict[str, str]) -> list[App]:
    """An image's declared apps, with the built-in start definitions where known."""
    ports = parse_service_ports(labels.get(SERVICE_PORTS_LABEL, ""))
    return [with_defaults(p.name, p.container_port, p.protocol) for p in ports]


def base_url(session_id: str, app: App) -> str:
    return "/" if app.strip_prefix else f"/s/{session_id}/{app.name}/"


def start_command(session_id: str, apps: list[App]) -> list[str] | None:
    """The container command that starts every app with a start template (None: none do)."""
    commands = [
        app.start.format(port=app.port, base_url=base_url(session_id, app))
        for app in apps
        if app.start
    ]
    if not commands:
        return None
    if len(commands) == 1:
        return shlex.split(commands[0])
    # several apps: run them side by side until all of them end
    return ["sh", "-c", " & ".join(commands) + " & wait"]

"""The configuration file of ``jobgate admin config export|import`` (a thin client of /v1).

::

    {"format": "jobgate-config", "version": 1, "secrets": "excluded",
     "resource_groups": [...], "images": [...], "users": [...], "projects": [...],
     "policies": [...], "budgets": [...], "sso_providers": [...], "sso_bindings": [...]}

One :class:`Section` per kind of object, in :data:`SECTIONS` (the order an import
applies them: policies and budgets name users and projects, binding rules name identity
providers and projects). Each section reads what the gateway
has (``read``) and writes one item (``write``) through the admin API, so an import is
checked by the same rules as any other request. An import compares each item with what
is there and writes only what differs: running it twice writes nothing the second time.
It creates and updates; it never deletes.

**Secrets are excluded**: API keys (the database holds only their hashes), the node
token and the proxy secret (settings, not data) are never in the file; users come back
without keys (``jobgate admin users key NAME`` makes one). An identity provider's client
secret is not in the file either: its ``client_secret`` is ``"excluded"`` (it had one) or
``null`` (a public client); an import never sends one, so a provider keeps the secret it
has, and one that lacks the secret it had is named in the import's notes (``jobgate admin
sso set NAME ... --client-secret-file F`` gives it). New kinds (job templates,
triggers) slot in as one more Section; a file naming a section this jobgate does not
know is refused, as is a file of a newer ``version``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from jobgate.client import ApiError, Client, segment

__all__ = ["FORMAT", "SECTIONS", "VERSION", "ConfigError", "Outcome", "export", "import_"]

FORMAT: Final = "jobgate-config"
VERSION: Final = 1
Item = dict[str, Any]


class ConfigError(Exception):
    """The file cannot be imported; the message says where."""


@dataclass
class Outcome:
    """What an import did, per section: created / updated / unchanged / skipped names;
    and notes: what is left for the admin to do by hand."""

    done: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, section: str, what: str, name: str) -> None:
        self.done.setdefault(section, {}).setdefault(what, []).append(name)

    def count(self, what: str) -> int:
        return sum(len(per.get(what, [])) for per in self.done.values())


@dataclass(frozen=True)
class Section:
    key: str
    fields: tuple[str, ...]  # what an item holds; the first names it
    read: Callable[[Client], list[Item]]
    #: write one item the gateway lacks or holds differently (None: it has none); returns
    #: "created", "updated" or "skipped" (cannot be changed through the API)
    write: Callable[[Client, Item, Item | None], str]
    #: what the admin must still do for an item, given what the gateway had (None: nothing)
    note: Callable[[Item, Item | None], str | None] | None = None

    def name(self, item: Item) -> str:
        named = ("scope", "subject", "provider", "name")
        return "/".join(str(item[f]) for f in self.fields if f in named)


# ---- sections -------------------------------------------------------------------------
def _read_groups(api: Client) -> list[Item]:
    return [
        {"name": g["name"], "description": g["description"], "scheduler": g["scheduler"]}
        for g in api.get("/v1/resource-groups")
    ]


def _write_group(api: Client, item: Item, now: Item | None) -> str:
    body = {"description": item["description"], "scheduler": item["scheduler"]}
    api.request("PUT", f"/v1/resource-groups/{segment(item['name'])}", json=body)
    return "created" if now is None else "updated"


def _read_images(api: Client) -> list[Item]:
    return [{"name": i["name"], "apps": i["apps"]} for i in api.get("/v1/images")]


def _write_image(api: Client, item: Item, now: Item | None) -> str:
    api.request("PUT", f"/v1/images/{segment(item['name'])}", json={"apps": item["apps"]})
    return "created" if now is None else "updated"


def _read_users(api: Client) -> list[Item]:
    return [{"name": u["name"], "role": u["role"]} for u in api.get("/v1/users")]


def _write_user(api: Client, item: Item, now: Item | None) -> str:
    if now is not None:  # the API has no role change: say so rather than guess
        return "skipped"
    api.post("/v1/users", json={"name": item["name"], "role": item["role"]})
    return "created"


def _read_projects(api: Client) -> list[Item]:
    return [
        {"name": p["name"], "members": sorted(p["members"]), "share": p["share"]}
        for p in api.get("/v1/projects")
    ]


def _write_project(api: Client, item: Item, now: Item | None) -> str:
    if now is None:
        api.post("/v1/projects", json={"name": item["name"]})
    have = set(now["members"]) if now else set()
    for user in sorted(set(item["members"]) - have):
        api.post(f"/v1/projects/{segment(item['name'])}/members", json={"user": user})
    share = item.get("share", 1)
    if share != (now["share"] if now else 1):
        api.patch(f"/v1/projects/{segment(item['name'])}", json={"share": share})
    return "created" if now is None else "updated"


#: a policy's fields in the file (its limits after scope and subject)
POLICY_KEYS: Final = (
    "scope",
    "subject",
    "max_sessions",
    "max_pending",
    "max_slots",
    "max_folder_bytes",
    "max_priority",
)


def _read_policies(api: Client) -> list[Item]:
    return [{k: p.get(k) for k in POLICY_KEYS} for p in api.get("/v1/policies")]


def _write_policy(api: Client, item: Item, now: Item | None) -> str:
    body = {k: item.get(k) for k in POLICY_KEYS[2:]}
    api.request(
        "PUT", f"/v1/policies/{segment(item['scope'])}/{segment(item['subject'])}", json=body
    )
    return "created" if now is None else "updated"


def _read_budgets(api: Client) -> list[Item]:
    return [
        {
            "scope": b["scope"],
            "subject": b["subject"],
            "period": b["period"],
            "window": b["window"],
            "limits": b["limits"],
            "members": {name: m["limits"] for name, m in b["members"].items()},
        }
        for b in api.get("/v1/budgets")
    ]


def _write_budget(api: Client, item: Item, now: Item | None) -> str:
    body = {k: item[k] for k in ("period", "window", "limits")}
    if item.get("members"):
        body["members"] = item["members"]
    api.request(
        "PUT", f"/v1/budgets/{segment(item['scope'])}/{segment(item['subject'])}", json=body
    )
    return "created" if now is None else "updated"


#: an identity provider's fields in the file (GET /v1/auth/providers less created_at;
#: client_secret is "excluded" or null, never a secret)
PROVIDER_KEYS: Final = (
    "name",
    "display_name",
    "issuer",
    "client_id",
    "cli_client_id",
    "scopes",
    "username_claim",
    "groups_claim",
    "client_secret",
)


def _read_providers(api: Client) -> list[Item]:
    return [
        {k: p[k] for k in PROVIDER_KEYS[:-1]}
        | {"client_secret": "excluded" if p["has_client_secret"] else None}
        for p in api.get("/v1/auth/providers")
    ]


def _write_provider(api: Client, item: Item, now: Item | None) -> str:
    # no client_secret: the provider keeps the one it has (or stays without)
    body = {k: item[k] for k in PROVIDER_KEYS[1:-1]}
    api.request("PUT", f"/v1/auth/providers/{segment(item['name'])}", json=body)
    return "created" if now is None else "updated"


def _provider_note(item: Item, now: Item | None) -> str | None:
    if item["client_secret"] is None or (now is not None and now["client_secret"] is not None):
        return None
    return (
        f"identity provider {item['name']} had a client secret, which is not in the file: "
        f"jobgate admin sso set {item['name']} ... --client-secret-file FILE"
    )


BINDING_KEYS: Final = ("provider", "name", "claim", "value", "project", "role")


def _read_bindings(api: Client) -> list[Item]:
    return [
        {"provider": p["name"]} | {k: b[k] for k in BINDING_KEYS[1:]}
        for p in api.get("/v1/auth/providers")
        for b in api.get(f"/v1/auth/providers/{segment(p['name'])}/bindings")
    ]


def _write_binding(api: Client, item: Item, now: Item | None) -> str:
    body = {k: item[k] for k in BINDING_KEYS[2:]}
    path = f"/v1/auth/providers/{segment(item['provider'])}/bindings/{segment(item['name'])}"
    api.request("PUT", path, json=body)
    return "created" if now is None else "updated"


SECTIONS: Final = (
    Section("resource_groups", ("name", "description", "scheduler"), _read_groups, _write_group),
    Section("images", ("name", "apps"), _read_images, _write_image),
    Section("users", ("name", "role"), _read_users, _write_user),
    Section("projects", ("name", "members", "share"), _read_projects, _write_project),
    Section(
        "policies",
        POLICY_KEYS,
        _read_policies,
        _write_policy,
    ),
    Section(
        "budgets",
        ("scope", "subject", "period", "window", "limits", "members"),
        _read_budgets,
        _write_budget,
    ),
    Section("sso_providers", PROVIDER_KEYS, _read_providers, _write_provider, _provider_note),
    Section("sso_bindings", BINDING_KEYS, _read_bindings, _write_binding),
)
#: fields added after the format's first version: files written before them still load
OPTIONAL: Final = frozenset({"max_folder_bytes", "max_priority", "share"})
_HEADER: Final = ("format", "version", "exported_at", "exported_from", "secrets")
#: markers, not values: an import never writes them
_UNCOMPARED: Final = frozenset({"client_secret"})


def _same(section: Section, want: Item, have: Item) -> bool:
    if section.key == "projects":  # members are added, never removed; share 1 if unsaid
        same_share = want.get("share", 1) == have.get("share", 1)
        return set(want["members"]) <= set(have["members"]) and same_share
    return all(want.get(f) == have.get(f) for f in section.fields if f not in _UNCOMPARED)


# ---- export / import ------------------------------------------------------------------
def export(api: Client) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "exported_from": api.profile.url,
        "secrets": "excluded",
    }
    for section in SECTIONS:
        doc[section.key] = sorted(section.read(api), key=section.name)
    return doc


def check(doc: object) -> dict[str, Any]:
    """The document if this jobgate can import it, else a ConfigError naming the problem."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ConfigError(f'not a jobgate configuration file (no "format": "{FORMAT}")')
    version = doc.get("version")
    if not isinstance(version, int) or version < 1:
        raise ConfigError(f"bad version {version!r}")
    if version > VERSION:
        raise ConfigError(f"version {version} is newer than this jobgate reads ({VERSION})")
    known = {s.key for s in SECTIONS}
    unknown = sorted(set(doc) - known - set(_HEADER))
    if unknown:
        raise ConfigError(f"sections this jobgate does not know: {', '.join(unknown)}")
    for section in SECTIONS:
        items = doc.get(section.key, [])
        if not isinstance(items, list):
            raise ConfigError(f"{section.key}: not a list")
        for n, item in enumerate(items):
            if not isinstance(item, dict):
                raise ConfigError(f"{section.key}[{n}]: not an object")
            lacking = [f for f in section.fields if f not in item and f not in OPTIONAL]
            extra = sorted(set(item) - set(section.fields))
            if lacking or extra:
                what = f"lacks {', '.join(lacking)}" if lacking else f"unknown {', '.join(extra)}"
                raise ConfigError(f"{section.key}[{n}]: {what}")
            if item.get("client_secret", None) not in (None, "excluded"):
                raise ConfigError(
                    f'{section.key}[{n}]: client_secret must be "excluded" or null (the file '
                    "holds no secrets: jobgate admin sso set gives one)"
                )
    return doc


def import_(api: Client, doc: object) -> Outcome:
    """Create or update what the file holds, section by section; write nothing that is equal."""
    checked = check(doc)
    outcome = Outcome()
    for section in SECTIONS:
        have = {section.name(item): item for item in section.read(api)}
        for item in checked.get(section.key, []):
            name = section.name(item)
            now = have.get(name)
            if now is not None and _same(section, item, now):
                outcome.add(section.key, "unchanged", name)
            else:
                try:
                    outcome.add(section.key, section.write(api, item, now), name)
                except ApiError as exc:
                    raise ConfigError(f"{section.key} {name}: {exc.detail}") from None
            if section.note is not None and (note := section.note(item, now)):
                outcome.notes.append(note)
    return outcome

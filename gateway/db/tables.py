"""The Core ``Table`` of each model that is written with Core statements (multi-row
INSERTs, executemany), declared once: ``insert(SESSIONS)`` rather than the ORM."""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table

from gateway.db.models import (
    AuditRecord,
    Folder,
    Kernel,
    Node,
    ResourceGroup,
    Session,
    SessionDependency,
    SessionFolder,
    StatusHistory,
)

__all__ = [
    "AUDIT",
    "DATA_FOLDERS",
    "DEPENDENCIES",
    "FOLDERS",
    "GROUPS",
    "HISTORY",
    "KERNELS",
    "NODES",
    "SESSIONS",
]

SESSIONS = cast(Table, Session.__table__)
KERNELS = cast(Table, Kernel.__table__)
HISTORY = cast(Table, StatusHistory.__table__)
NODES = cast(Table, Node.__table__)
GROUPS = cast(Table, ResourceGroup.__table__)
DEPENDENCIES = cast(Table, SessionDependency.__table__)
#: session_folders: the data folders a session mounts
FOLDERS = cast(Table, SessionFolder.__table__)
#: folders: the data folders themselves
DATA_FOLDERS = cast(Table, Folder.__table__)
#: audit_log: one row per state-changing API call (services/audit.py)
AUDIT = cast(Table, AuditRecord.__table__)

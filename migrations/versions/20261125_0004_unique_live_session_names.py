"""A session name is unique among its owner's live sessions (a partial unique index).

Older live sessions that share a name with a newer live one of the same owner are
renamed ``NAME-<first 8 of id>`` first, so the index can be built; ended sessions keep
their names.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0004'
down_revision: str | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LIVE = "name IS NOT NULL AND status NOT IN ('CANCELLED', 'ERROR', 'FAILED', 'SUCCEEDED', 'TERMINATED')"


def upgrade() -> None:
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(f"SELECT id, owner_id, name FROM sessions WHERE {LIVE} ORDER BY created_at DESC, id DESC")
    ).all()
    seen: set[tuple[str, str]] = set()
    for session_id, owner_id, name in rows:
        if (owner_id, name) in seen:
            bind.execute(
                sa.text("UPDATE sessions SET name = :name WHERE id = :id"),
                {"name": f"{name[:119]}-{session_id[:8]}", "id": session_id},
            )
        seen.add((owner_id, name))
    op.create_index(
        'uq_sessions_owner_live_name',
        'sessions',
        ['owner_id', 'name'],
        unique=True,
        postgresql_where=sa.text(LIVE),
        sqlite_where=sa.text(LIVE),
    )


def downgrade() -> None:
    op.drop_index('uq_sessions_owner_live_name', table_name='sessions')

"""Scoped, expiring API keys: scopes, an expiry and a last use; a name unique among a
user's unrevoked keys.

Existing keys keep working as they did: no scopes (all their user may do), no expiry.
An unnamed key is named ``default``; a name its user already gives an older unrevoked
key becomes ``NAME-<prefix>`` so the unique index can be built.

Revision ID: 0020
Revises: 0017
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0020'
down_revision: str | None = '0018'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LIVE = "revoked_at IS NULL"


def upgrade() -> None:
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.add_column(sa.Column('scopes', sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True))
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            f"SELECT id, user_id, name, prefix FROM api_keys WHERE {LIVE} ORDER BY created_at, id"
        )
    ).all()
    seen: set[tuple[str, str]] = set()
    for key_id, user_id, name, prefix in rows:
        wanted = name or "default"
        if (user_id, wanted) in seen:
            wanted = f"{wanted[:47]}-{prefix}"
        if wanted != name:
            bind.execute(
                sa.text("UPDATE api_keys SET name = :name WHERE id = :id"),
                {"name": wanted, "id": key_id},
            )
        seen.add((user_id, wanted))
    op.create_index(
        'uq_api_keys_user_live_name',
        'api_keys',
        ['user_id', 'name'],
        unique=True,
        postgresql_where=sa.text(LIVE),
        sqlite_where=sa.text(LIVE),
    )


def downgrade() -> None:
    op.drop_index('uq_api_keys_user_live_name', table_name='api_keys')
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.drop_column('last_used_at')
        batch_op.drop_column('expires_at')
        batch_op.drop_column('scopes')

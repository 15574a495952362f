"""Logs per attempt: each session log row names the kernel attempt that printed it, and
a kernel's log offsets are kept per attempt, so a superseded attempt's late output is
stored under its own attempt instead of dropped (docs/node-loss.md).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0023'
down_revision: str | None = '0022'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# kernels.log_offsets: {stream: bytes} of the current attempt -> {"<attempt>": {stream: bytes}}
_NEST = {
    'postgresql': "UPDATE kernels SET log_offsets = jsonb_build_object(attempt::text, log_offsets)"
    " WHERE log_offsets <> '{}'::jsonb",
    'sqlite': "UPDATE kernels SET log_offsets = json_object(CAST(attempt AS TEXT),"
    " json(log_offsets)) WHERE json(log_offsets) <> '{}'",
}
_FLATTEN = {
    'postgresql': "UPDATE kernels SET log_offsets = COALESCE(log_offsets -> attempt::text,"
    " '{}'::jsonb)",
    'sqlite': "UPDATE kernels SET log_offsets = COALESCE(json_extract(log_offsets,"
    " '$.\"' || attempt || '\"'), '{}')",
}


def upgrade() -> None:
    with op.batch_alter_table('session_logs', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('attempt', sa.Integer(), nullable=False, server_default='1')
        )
    # what is held was printed by the kernel's attempt of now, as far as anyone can tell
    op.execute(
        'UPDATE session_logs SET attempt = COALESCE((SELECT k.attempt FROM kernels k'
        ' WHERE k.id = session_logs.kernel_id), 1)'
    )
    op.execute(_NEST[op.get_bind().dialect.name])


def downgrade() -> None:
    op.execute(_FLATTEN[op.get_bind().dialect.name])
    with op.batch_alter_table('session_logs', schema=None) as batch_op:
        batch_op.drop_column('attempt')

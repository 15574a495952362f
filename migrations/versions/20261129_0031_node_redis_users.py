"""Each node's own Redis user (``JOBGATE_REDIS_USERS``): the SHA-256 of its
password, so the gateway can make the user again after Redis lost it (contract/acl.py).

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # a nullable column: an ALTER TABLE ... ADD COLUMN on SQLite too, no table copy
    op.add_column("node_credentials", sa.Column("redis_digest", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("node_credentials") as batch:
        batch.drop_column("redis_digest")

"""User secrets: sealed values owned by a user or a project, and the references a
session holds to the ones it receives (docs/secrets.md).

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "secrets",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("owner_key", sa.String(length=48), nullable=False),
        sa.Column("owner_user_id", sa.String(length=36), nullable=True),
        sa.Column("owner_project_id", sa.String(length=36), nullable=True),
        sa.Column("ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("wrapped_key", sa.LargeBinary(), nullable=False),
        sa.Column("key_id", sa.String(length=32), nullable=False),
        sa.Column("created_by", sa.String(length=36), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["owner_user_id"], ["users.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["owner_project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("owner_key", "name", name="uq_secrets_owner_name"),
    )
    op.create_index("ix_secrets_owner_key", "secrets", ["owner_key"])
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("secrets", JSON, nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("secrets")
    op.drop_index("ix_secrets_owner_key", table_name="secrets")
    op.drop_table("secrets")

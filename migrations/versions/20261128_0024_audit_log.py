"""The audit log: one row per state-changing API call (docs/security.md). Append-only:
on PostgreSQL a trigger refuses UPDATE; only the retention prune deletes.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=True),
        sa.Column("credential", sa.String(length=160), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("method", sa.String(length=8), nullable=False),
        sa.Column("path", sa.String(length=1024), nullable=False),
        sa.Column("target", sa.String(length=512), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("client", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.create_index("ix_audit_log_at", ["at"])
        batch_op.create_index("ix_audit_log_actor", ["actor", "id"])
        batch_op.create_index("ix_audit_log_action", ["action", "id"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'audit_log is append-only'; END $$"
        )
        op.execute(
            "CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log"
            " FOR EACH ROW EXECUTE FUNCTION audit_log_append_only()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS audit_log_no_update ON audit_log")
        op.execute("DROP FUNCTION IF EXISTS audit_log_append_only()")
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_log_action")
        batch_op.drop_index("ix_audit_log_actor")
        batch_op.drop_index("ix_audit_log_at")
    op.drop_table("audit_log")

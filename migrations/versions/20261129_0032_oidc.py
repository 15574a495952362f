"""Single sign-on: identity providers, their binding rules, the subjects they signed in,
and which project memberships a binding rule made (docs/auth.md).

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "oidc_providers",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("display_name", sa.String(128), nullable=False),
        sa.Column("issuer", sa.String(512), nullable=False),
        sa.Column("client_id", sa.String(256), nullable=False),
        sa.Column("cli_client_id", sa.String(256), nullable=False),
        sa.Column("scopes", sa.String(512), nullable=False),
        sa.Column("username_claim", sa.String(64), nullable=False),
        sa.Column("groups_claim", sa.String(64), nullable=False),
        sa.Column("secret_ciphertext", sa.LargeBinary(), nullable=True),
        sa.Column("secret_wrapped_key", sa.LargeBinary(), nullable=True),
        sa.Column("secret_key_id", sa.String(32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "oidc_bindings",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column(
            "provider_id",
            sa.String(36),
            sa.ForeignKey("oidc_providers.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("claim", sa.String(64), nullable=False),
        sa.Column("value", sa.String(256), nullable=False),
        sa.Column(
            "project_id",
            sa.String(36),
            sa.ForeignKey("projects.id", ondelete="CASCADE"),
            nullable=True,
        ),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("provider_id", "name", name="uq_oidc_bindings_name"),
    )
    op.create_table(
        "oidc_identities",
        sa.Column(
            "provider_id",
            sa.String(36),
            sa.ForeignKey("oidc_providers.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("subject", sa.String(255), primary_key=True),
        sa.Column(
            "user_id",
            sa.String(36),
            sa.ForeignKey("users.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_sign_in_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.add_column("project_members", sa.Column("via", sa.String(80), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("project_members") as batch:
        batch.drop_column("via")
    op.drop_table("oidc_identities")
    op.drop_table("oidc_bindings")
    op.drop_table("oidc_providers")

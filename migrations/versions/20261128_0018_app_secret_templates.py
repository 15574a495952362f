"""Registered images get the start templates that check the session's app secret.

The image registry copied jobgate's built-in start templates into each entry when it was
registered. Jupyter's turned its token off (``--IdentityProvider.token=``) and
code-server's ran ``--auth none``, so those apps answered anyone who reached their
published port. Entries whose template is exactly the old built-in one get the new one
(Jupyter reads ``JUPYTER_TOKEN``; code-server checks ``HASHED_PASSWORD``); templates an
admin wrote are left as they are.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0018'
down_revision: str | None = '0017'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JUPYTER = (
    "jupyter lab --ip=0.0.0.0 --port={port} --no-browser --allow-root"
    " --ServerApp.base_url={base_url}%s --ServerApp.password="
    " --ServerApp.allow_remote_access=True --ServerApp.trust_xheaders=True"
)
_CODE_SERVER = "code-server --bind-addr 0.0.0.0:{port} --auth %s --disable-telemetry"
#: old built-in template -> the one that checks the app secret
_CHECKING = {
    _JUPYTER % " --IdentityProvider.token=": _JUPYTER % "",
    _CODE_SERVER % "none": _CODE_SERVER % "password",
}
_IMAGES = sa.table('images', sa.column('name', sa.String), sa.column('apps', sa.JSON))


def _rewrite(templates: dict[str, str]) -> None:
    bind = op.get_bind()
    for name, apps in bind.execute(sa.select(_IMAGES.c.name, _IMAGES.c.apps)).all():
        if not isinstance(apps, dict):
            continue
        changed = {
            app: {**info, 'start': templates[info['start']]}
            if isinstance(info, dict) and info.get('start') in templates
            else info
            for app, info in apps.items()
        }
        if changed != apps:
            bind.execute(_IMAGES.update().where(_IMAGES.c.name == name).values(apps=changed))


def upgrade() -> None:
    _rewrite(_CHECKING)


def downgrade() -> None:
    _rewrite({new: old for old, new in _CHECKING.items()})

"""User secrets between the gateway and the workers (docs/secrets.md).

A start job names the secrets a kernel receives and where (``WireSecret``: no value);
the worker fetches the values with its own node credential from
``GET /v1/internal/kernels/{kernel_id}/secrets`` (``SecretValues``), which answers only for
a kernel placed on that node. Values are never logged nor kept in the worker's state.
"""

from __future__ import annotations

from typing import Final

__all__ = ["SECRETS_DIR_ENV", "SECRET_NAME_PATTERN", "secrets_path"]

#: a secret's name, and the environment variable it arrives as: a shell name
SECRET_NAME_PATTERN: Final = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
#: where a runtime that cannot bind-mount puts file secrets (docs/secrets.md)
SECRETS_DIR_ENV: Final = "JOBGATE_SECRETS_DIR"


def secrets_path(kernel_id: str) -> str:
    return f"/v1/internal/kernels/{kernel_id}/secrets"

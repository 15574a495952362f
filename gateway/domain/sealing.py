"""Envelope encryption of user secrets (pure: no I/O).

Each value gets a random 256-bit data key; the value is sealed with it (AES-256-GCM),
and the data key is wrapped by the master key (AES-256-GCM again). Both seals carry the
secret's row id and name as associated data, so a ciphertext or wrapped key copied onto
another row does not open there. The master key's id (the first 8 bytes of its SHA-256,
hex) is kept with each row, so a rekey knows which rows still need the old key.

Layout of both blobs: 12-byte nonce ‖ ciphertext+tag.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "MasterKey",
    "Sealed",
    "SealingError",
    "associated_data",
    "open_value",
    "rewrap",
    "seal",
]

NONCE = 12


class SealingError(Exception):
    """A key that is not 32 bytes, or a seal that does not open (wrong key, other row)."""


@dataclass(frozen=True, slots=True)
class MasterKey:
    raw: bytes = b""

    def __post_init__(self) -> None:
        if len(self.raw) != 32:
            raise SealingError("the secrets key must be 32 bytes (base64: 44 characters)")

    def __repr__(self) -> str:  # never print the key
        return f"MasterKey(id={self.key_id})"

    @classmethod
    def from_base64(cls, text: str) -> MasterKey:
        try:
            raw = base64.b64decode(text.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise SealingError("the secrets key is not base64") from None
        return cls(raw)

    @classmethod
    def generate(cls) -> MasterKey:
        return cls(os.urandom(32))

    def to_base64(self) -> str:
        return base64.b64encode(self.raw).decode()

    @property
    def key_id(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Sealed:
    ciphertext: bytes
    wrapped_key: bytes
    key_id: str

    def __repr__(self) -> str:
        return f"Sealed(key_id={self.key_id}, {len(self.ciphertext)} bytes)"


def associated_data(secret_id: str, name: str) -> bytes:
    """What binds a seal to its row."""
    return f"jobgate-secret\x00{secret_id}\x00{name}".encode()


def _seal(key: bytes, plain: bytes, aad: bytes) -> bytes:
    nonce = os.urandom(NONCE)
    return nonce + AESGCM(key).encrypt(nonce, plain, aad)


def _open(key: bytes, blob: bytes, aad: bytes) -> bytes:
    try:
        return AESGCM(key).decrypt(blob[:NONCE], blob[NONCE:], aad)
    except (InvalidTag, ValueError):
        raise SealingError("the secret does not open with this key and row") from None


def seal(master: MasterKey, aad: bytes, value: bytes) -> Sealed:
    data_key = AESGCM.generate_key(bit_length=256)
    return Sealed(
        ciphertext=_seal(data_key, value, aad),
        wrapped_key=_seal(master.raw, data_key, aad),
        key_id=master.key_id,
    )


def open_value(master: MasterKey, aad: bytes, sealed: Sealed) -> bytes:
    data_key = _open(master.raw, sealed.wrapped_key, aad)
    return _open(data_key, sealed.ciphertext, aad)


def rewrap(old: MasterKey, new: MasterKey, aad: bytes, sealed: Sealed) -> Sealed:
    """The same ciphertext, its data key wrapped by *new* (a rekey)."""
    data_key = _open(old.raw, sealed.wrapped_key, aad)
    return Sealed(sealed.ciphertext, _seal(new.raw, data_key, aad), new.key_id)

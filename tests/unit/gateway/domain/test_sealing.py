"""Envelope encryption of user secrets (gateway/domain/sealing.py)."""

from __future__ import annotations

import pytest

from gateway.domain.sealing import (
    MasterKey,
    SealingError,
    associated_data,
    open_value,
    rewrap,
    seal,
)

AAD = associated_data("id-1", "HF_TOKEN")


def test_a_sealed_value_opens_with_its_key_and_row() -> None:
    key = MasterKey.generate()
    sealed = seal(key, AAD, b"hf_abcdef")
    assert b"hf_abcdef" not in sealed.ciphertext + sealed.wrapped_key
    assert sealed.key_id == key.key_id
    assert open_value(key, AAD, sealed) == b"hf_abcdef"


def test_every_seal_has_its_own_data_key_and_nonce() -> None:
    key = MasterKey.generate()
    one, two = seal(key, AAD, b"same value"), seal(key, AAD, b"same value")
    assert one.ciphertext != two.ciphertext
    assert one.wrapped_key != two.wrapped_key


def test_another_key_does_not_open_it() -> None:
    sealed = seal(MasterKey.generate(), AAD, b"hf_abcdef")
    with pytest.raises(SealingError):
        open_value(MasterKey.generate(), AAD, sealed)


@pytest.mark.parametrize(
    "other", [associated_data("id-2", "HF_TOKEN"), associated_data("id-1", "OTHER")]
)
def test_a_seal_swapped_onto_another_row_does_not_open(other: bytes) -> None:
    key = MasterKey.generate()
    sealed = seal(key, AAD, b"hf_abcdef")
    with pytest.raises(SealingError):
        open_value(key, other, sealed)


def test_a_tampered_ciphertext_does_not_open() -> None:
    key = MasterKey.generate()
    sealed = seal(key, AAD, b"hf_abcdef")
    broken = type(sealed)(
        sealed.ciphertext[:-1] + bytes([sealed.ciphertext[-1] ^ 1]),
        sealed.wrapped_key,
        sealed.key_id,
    )
    with pytest.raises(SealingError):
        open_value(key, AAD, broken)


def test_rewrap_moves_a_value_to_a_new_key() -> None:
    old, new = MasterKey.generate(), MasterKey.generate()
    sealed = seal(old, AAD, b"hf_abcdef")
    moved = rewrap(old, new, AAD, sealed)
    assert moved.ciphertext == sealed.ciphertext
    assert moved.key_id == new.key_id
    assert open_value(new, AAD, moved) == b"hf_abcdef"
    with pytest.raises(SealingError):
        open_value(old, AAD, moved)


def test_keys_from_base64_and_their_repr() -> None:
    key = MasterKey.generate()
    again = MasterKey.from_base64(key.to_base64())
    assert again.raw == key.raw
    assert key.to_base64() not in repr(key)
    for bad in ("not base64!", "c2hvcnQ="):
        with pytest.raises(SealingError):
            MasterKey.from_base64(bad)

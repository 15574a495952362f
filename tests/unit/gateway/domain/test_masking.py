"""Secret values masked in a stream of output (gateway/domain/masking.py)."""

from __future__ import annotations

import pytest

from gateway.domain.masking import Masker

VALUE = b"hf_0123456789abcdef"


def _stream(masker: Masker, chunks: list[bytes]) -> bytes:
    """What is stored of *chunks*, one stream, fed as the log service feeds them."""
    held, stored = b"", b""
    for chunk in chunks:
        out, held = masker.mask(held, chunk)
        stored += out
    return stored + held  # (held bytes at the very end are never stored: shown here)


def test_a_whole_value_is_masked() -> None:
    out, held = Masker([VALUE]).mask(b"", b"token=" + VALUE + b"\n")
    assert (out, held) == (b"token=***\n", b"")


@pytest.mark.parametrize("cut", range(1, len(VALUE)))
def test_a_value_split_between_two_chunks_is_masked(cut: int) -> None:
    line = b"token=" + VALUE + b" done\n"
    at = len(b"token=") + cut
    stored = _stream(Masker([VALUE]), [line[:at], line[at:]])
    assert stored == b"token=*** done\n"


def test_a_value_split_over_many_chunks_is_masked() -> None:
    line = b"a " + VALUE + b" b " + VALUE + b"\n"
    stored = _stream(Masker([VALUE]), [line[i : i + 3] for i in range(0, len(line), 3)])
    assert stored == b"a *** b ***\n"


def test_only_what_may_start_a_value_is_held() -> None:
    masker = Masker([VALUE])
    assert masker.mask(b"", b"hello hf_01") == (b"hello ", b"hf_01")
    assert masker.mask(b"hf_01", b"x\n") == (b"hf_01x\n", b"")
    assert masker.mask(b"", b"plain text\n") == (b"plain text\n", b"")


def test_several_values_and_the_longest_first() -> None:
    masker = Masker([b"abcd", b"abcdefgh"])
    assert masker.mask(b"", b"abcdefgh abcd\n") == (b"*** ***\n", b"")


def test_no_values_or_short_ones_pass_everything() -> None:
    assert not Masker([])
    assert not Masker([b"abc"])
    assert Masker([]).mask(b"", b"x") == (b"x", b"")


def test_the_masked_text_is_never_longer() -> None:
    masker = Masker([b"abcd"])
    data = b"abcd" * 10
    out, _ = masker.mask(b"", data)
    assert len(out) <= len(data)

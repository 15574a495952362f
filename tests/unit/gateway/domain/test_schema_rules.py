"""The OpenAPI document's patterns and the server's own checks agree.

schemathesis sends what the document calls valid and expects it accepted; these draw
from the same patterns (hypothesis' ``from_regex``) and ask the server's functions.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract.folders import FOLDER_PATH_PATTERN, UnsafePath, split_path
from gateway.api.routes.images import SERVICE_PORTS_PATTERN
from gateway.domain.endpoints import LIFETIME_PATTERN, parse_expiry
from gateway.domain.requests import (
    ABSOLUTE_PATH_PATTERN,
    FILE_PATH_PATTERN,
    MountSpec,
    SecretMount,
)
from gateway.domain.validation import (
    DELAY_PATTERN,
    IMAGE_PATTERN,
    parse_delay,
    valid_image_reference,
)
from gateway.domain.webhooks import URL_PATTERN, check_url, host_refusal
from plugins.resources import InvalidResource, ResourceSlots, slot_map_schema
from plugins.runtimes.base import parse_service_ports

ASCII = st.characters(codec="ascii")
SOME = settings(max_examples=150, deadline=None)


def _valid(pattern: str) -> st.SearchStrategy[str]:
    return st.from_regex(pattern, fullmatch=True, alphabet=ASCII)


@SOME
@given(_valid(FOLDER_PATH_PATTERN))
def test_a_folder_path_the_document_allows_is_one_the_server_takes(path: str) -> None:
    split_path(path)


@pytest.mark.parametrize("path", ["", "/a", "a//b", "a/../b", "..", "a/./b", "x" * 256])
def test_a_folder_path_the_document_refuses_is_refused(path: str) -> None:
    assert not re.fullmatch(FOLDER_PATH_PATTERN, path)
    with pytest.raises(UnsafePath):
        split_path(path)


@SOME
@given(_valid(LIFETIME_PATTERN))
def test_token_lifetimes_agree(text: str) -> None:
    parse_expiry(text)


@pytest.mark.parametrize(
    "text",
    ["", "0d", "3651d", "522w", "315360001s", "1y", "\u0661d"],  # (an Arabic-Indic 1)
)
def test_lifetimes_over_ten_years_or_odd_are_refused_by_both(text: str) -> None:
    assert not re.fullmatch(LIFETIME_PATTERN, text)
    with pytest.raises(ValueError, match=r"lifetime|10 years"):
        parse_expiry(text)


@SOME
@given(_valid(DELAY_PATTERN))
def test_start_delays_agree(text: str) -> None:
    assert parse_delay(text) is not None


@SOME
@given(_valid(URL_PATTERN))
def test_webhook_urls_agree_but_for_refused_addresses_and_impossible_hosts(url: str) -> None:
    """The document cannot say which address literals are refused, nor which host names
    have no IDNA encoding ('.', an empty label, a character no host may hold): those two
    are the domain's 422s; every other URL the document admits is accepted."""
    host = urlsplit(url).hostname or ""
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    refusal = check_url(url, [])
    if refusal is None:
        return
    if literal is not None:
        assert "address" in refusal, (url, refusal)
    else:
        assert host_refusal(host) == refusal, (url, refusal)


@pytest.mark.parametrize(
    "url", [" http://x", "http://x/a b", "http://u@x", "http://", "ftp://x", "http://x:99999"]
)
def test_webhook_urls_the_document_refuses_are_refused(url: str) -> None:
    assert not re.fullmatch(URL_PATTERN, url)
    assert check_url(url, []) is not None


@SOME
@given(_valid(IMAGE_PATTERN).filter(lambda ref: len(ref) <= 255))
def test_image_references_agree(ref: str) -> None:
    assert valid_image_reference(ref)


@SOME
@given(_valid(SERVICE_PORTS_PATTERN).filter(bool))
def test_service_ports_agree(text: str) -> None:
    assert len(parse_service_ports(text)) == text.count(",") + 1


@SOME
@given(_valid(ABSOLUTE_PATH_PATTERN))
def test_mount_paths_agree(path: str) -> None:
    MountSpec(source=path, target=path)


@SOME
@given(_valid(FILE_PATH_PATTERN))
def test_secret_file_paths_agree(path: str) -> None:
    SecretMount(name="TOKEN", path=path)


def _amounts(zero: bool) -> st.SearchStrategy[dict[str, str | int | float]]:
    schema = slot_map_schema(zero=zero)
    decimal = schema["additionalProperties"]["anyOf"][1]["pattern"]
    size = schema["properties"]["mem"]["anyOf"][1]["pattern"]
    low = 0 if zero else 1
    return st.fixed_dictionaries(
        {},
        optional={
            "cpu": st.one_of(_valid(decimal), st.integers(low, 2**53)),
            "mem": st.one_of(_valid(size), st.integers(low, 2**53)),
            "cuda.shares": st.floats(0 if zero else 1e-9, 2**53),
        },
    )


@SOME
@given(_amounts(zero=True))
def test_slot_amounts_agree(amounts: dict[str, str | int | float]) -> None:
    ResourceSlots.parse(amounts).to_json()


@SOME
@given(_amounts(zero=False))
def test_slot_limits_agree_and_are_never_zero(amounts: dict[str, str | int | float]) -> None:
    assert len(ResourceSlots.parse(amounts)) == len(amounts)


def test_an_amount_too_large_to_store_is_refused_not_a_crash() -> None:
    for amounts in ({"cpu": 1.37e308}, {"mem": "99999999999e"}):
        with pytest.raises(InvalidResource):
            ResourceSlots.parse(amounts)

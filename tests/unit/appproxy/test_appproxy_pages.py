"""Refusal pages: HTML for people, problem+json for programs, never cached."""

from __future__ import annotations

import json

import pytest

from appproxy.asgi import Message
from appproxy.pages import (
    LINK_EXPIRED,
    Page,
    render,
    send_page,
    wants_json,
)

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


@pytest.mark.parametrize(
    ("name", "accept", "api_client", "json_wanted"),
    [
        ("browser", BROWSER, False, False),
        ("browser with a key", BROWSER, True, False),
        ("json", "application/json", False, True),
        ("problem+json", "application/problem+json", False, True),
        ("json preferred by q", "text/html;q=0.5, application/json", False, True),
        ("html preferred by q", "text/html, application/json;q=0.5", False, False),
        ("tie goes to html", "application/json, text/html", False, False),
        ("curl default, no key", "*/*", False, False),
        ("curl default, with key", "*/*", True, True),
        ("nothing, with key", "", True, True),
        ("json refused", "application/json;q=0, text/html;q=0.1", False, False),
        ("bad q", "application/json;q=x", False, False),
    ],
)
def test_wants_json(name: str, accept: str, api_client: bool, json_wanted: bool) -> None:
    assert wants_json(accept, api_client=api_client) is json_wanted, name


def test_problem_json() -> None:
    body, content_type = render(LINK_EXPIRED, as_json=True)
    assert content_type == b"application/problem+json"
    assert json.loads(body) == {
        "type": "urn:jobgate:proxy:link-expired",
        "title": "This link has expired",
        "status": 401,
        "detail": LINK_EXPIRED.detail,
    }


def test_html_escapes_text() -> None:
    page = Page(403, "x", "<script>", "a & b")
    body, content_type = render(page, as_json=False)
    assert content_type == b"text/html; charset=utf-8"
    assert b"<script>" not in body
    assert b"&lt;script&gt;" in body
    assert b"a &amp; b" in body


@pytest.mark.parametrize(
    ("name", "page", "challenge"),
    [
        ("401 challenges", LINK_EXPIRED, True),
        ("403 does not", Page(403, "forbidden", "No", "No."), False),
    ],
)
async def test_send_page_headers(name: str, page: Page, challenge: bool) -> None:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await send_page(send, page, as_json=False)
    start, body = sent
    headers = dict(start["headers"])
    assert start["status"] == page.status, name
    assert headers[b"cache-control"] == b"no-store", name
    assert int(headers[b"content-length"]) == len(body["body"]), name
    assert (b"www-authenticate" in headers) is challenge, name

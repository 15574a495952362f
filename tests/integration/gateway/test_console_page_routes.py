"""The console's endpoint, data-folder and template pages, server side (the browser side
is tests/e2e/test_console_pages.py): each page is there for its owner, another user's
is a 404 page as its ``/v1`` call is a 404, and a path nothing answers is the console's
404 page for a browser while an API client still gets problem+json.
"""

from __future__ import annotations

import httpx
from harness import Stack

HTML = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


async def test_pages_for_the_owner_404_pages_for_others(stack: Stack) -> None:
    alice = await stack.create_user("alice")
    bob = await stack.create_user("bob")
    async with stack.client(alice) as api:
        endpoint = {"name": "chat", "port": 8000, "command": ["serve"]}
        assert (await api.post("/v1/endpoints", json=endpoint)).status_code == 201
        folder = (await api.post("/v1/folders", json={"name": "data"})).json()
        template = {"name": "train", "session": {"command": ["true"]}}
        assert (await api.post("/v1/templates", json=template)).status_code == 201

    async with httpx.AsyncClient(base_url=stack.url, headers=HTML) as browser:
        assert (await browser.get("/endpoints")).headers["location"] == "/sign-in"
        assert (await browser.post("/sign-in", data={"key": alice})).status_code == 303
        for path, shows in (
            ("/endpoints", "Endpoints"),
            ("/endpoints/chat", "chat"),
            ("/folders", "Data folders"),
            ("/folders/data", "data"),
            (f"/folders/{folder['id']}", "data"),
            ("/templates", "Templates"),
            ("/templates/train", "Run train"),
        ):
            page = await browser.get(path)
            assert page.status_code == 200, path
            assert page.headers["content-type"].startswith("text/html")
            assert shows in page.text
        listed = (await browser.get("/endpoints/chat")).text
        assert 'href="/endpoints" aria-current="page"' in listed

    async with httpx.AsyncClient(base_url=stack.url, headers=HTML) as browser:
        assert (await browser.post("/sign-in", data={"key": bob})).status_code == 303
        for path, heading in (
            ("/endpoints/chat", "No such endpoint"),
            ("/folders/data", "No such folder"),
            ("/templates/train", "No such template"),
        ):
            page = await browser.get(path)
            assert page.status_code == 404, path
            assert page.headers["content-type"].startswith("text/html")
            assert heading in page.text
        # nothing at a path: the console's page for a browser, with its navigation
        page = await browser.get("/no-such-page")
        assert page.status_code == 404
        assert page.headers["content-type"].startswith("text/html")
        assert "There is no page /no-such-page." in page.text
        assert 'href="/endpoints"' in page.text
        # ... while the API keeps answering problem+json, browser or not
        api_miss = await browser.get("/v1/no-such-thing")
        assert api_miss.status_code == 404
        assert api_miss.headers["content-type"] == "application/problem+json"

    async with httpx.AsyncClient(base_url=stack.url) as client:  # no Accept: text/html
        miss = await client.get("/no-such-page")
        assert miss.status_code == 404
        assert miss.headers["content-type"] == "application/problem+json"
        assert miss.json()["detail"] == "nothing at /no-such-page"

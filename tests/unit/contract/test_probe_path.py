"""A readiness probe's path: one rule (``PROBE_PATH_PATTERN``), enforced wherever a
:class:`Probe` is read - the gateway's API, the endpoint controller and the app proxy
(which sends it in a request line) - and published in the API's schema."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contract.endpoints import PROBE_PATH_PATTERN, EndpointRoute, Probe
from gateway.domain.endpoints import EndpointCreate, EndpointUpdate

GOOD = {
    "root": "/",
    "plain": "/ping",
    "query and colon": "/v1/models/m:predict?verbose=1&x=%20",
    "two slashes": "//health",
    "unicode": "/santé",
}
BAD = {
    "relative": "ping",
    "empty": "",
    "a URL": "http://replica/ping",
    "a space": "/a b",
    "leading space": " /ping",
    "NUL": "/a\x00",
    "CR": "/a\r",
    "LF": "/ping\n",
    "header smuggled": "/ping\r\nHost: evil",
}


@pytest.mark.parametrize("path", GOOD.values(), ids=GOOD.keys())
def test_a_good_path_is_taken_as_it_is(path: str) -> None:
    assert Probe(path=path).path == path


@pytest.mark.parametrize("path", BAD.values(), ids=BAD.keys())
def test_a_bad_path_is_refused_by_the_contract(path: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Probe.model_validate({"path": path})
    assert caught.value.errors()[0]["loc"] == ("path",)


@pytest.mark.parametrize("path", BAD.values(), ids=BAD.keys())
def test_a_bad_path_is_refused_in_a_route_the_proxy_reads(path: str) -> None:
    route = {"endpoint_id": "e1", "name": "demo", "owner_id": "u1", "probe": {"path": path}}
    with pytest.raises(ValidationError):
        EndpointRoute.model_validate(route)


@pytest.mark.parametrize("path", BAD.values(), ids=BAD.keys())
def test_a_bad_path_is_refused_on_create_and_on_a_new_revision(path: str) -> None:
    body = {"name": "demo", "port": 8000, "probe": {"path": path}}
    with pytest.raises(ValidationError) as caught:
        EndpointCreate.model_validate(body)
    assert caught.value.errors()[0]["loc"] == ("probe", "path")
    with pytest.raises(ValidationError):
        EndpointUpdate.model_validate({"probe": {"path": path}})


def test_the_schema_publishes_the_one_pattern() -> None:
    assert Probe.model_json_schema()["properties"]["path"]["pattern"] == PROBE_PATH_PATTERN

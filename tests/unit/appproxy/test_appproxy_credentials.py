"""The app secret reaches the app from the proxy alone: whatever the client sent under the
same names (an Authorization header, code-server's cookie, X-Jobgate-App-Secret) is
replaced, so a user can neither smuggle another session's secret nor see the app accept
a guessed one; routes without a credential (inference replicas) pass headers as before."""

from __future__ import annotations

import base64

import pytest

from appproxy.backend.headers import Forwarding, request_headers
from appproxy.frontend.cookies import strip_jobgate_cookies
from appproxy.frontend.credentials import app_credential, session_credential
from contract.apps import CREDENTIALS, Credential, credential_for, secret_env
from contract.messages import StartKernel
from contract.routes import AppRoute
from contract.tokens import app_secret

KEY = "proxy-secret-0123456789abcdef"
FORWARDING = Forwarding("apps.example.org", "https", "203.0.113.7", "/s/abc/jupyter")
SMUGGLED = [
    (b"authorization", b"token someone-elses-secret"),
    (b"x-jobgate-app-secret", b"someone-elses-secret"),
    (b"cookie", b"a=1; code-server-session=someone-elses; jobgate_auth=c; b=2"),
    (b"accept", b"*/*"),
]


def forwarded(
    form: Credential | None, incoming: list[tuple[bytes, bytes]]
) -> list[tuple[bytes, bytes]]:
    return request_headers(
        incoming,
        FORWARDING,
        hide_authorization=False,
        cookie_filter=strip_jobgate_cookies,
        credential=session_credential(KEY, "sess-1", form),
    )


def values(headers: list[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    return [v for n, v in headers if n == name]


def test_the_secret_is_one_per_session_and_the_same_at_gateway_and_proxy() -> None:
    secret = app_secret(KEY, "sess-1")
    assert len(secret) == 64
    assert secret != app_secret(KEY, "sess-2")
    assert secret != app_secret("another-proxy-secret-0123", "sess-1")
    # what the gateway derives for the start job is what the proxy presents
    credential = session_credential(KEY, "sess-1", "header")
    assert credential is not None
    assert dict(credential.headers)[b"x-jobgate-app-secret"] == secret.encode()


@pytest.mark.parametrize(
    ("form", "authorization"),
    [
        ("token", "token {s}"),
        ("basic", "Basic " + base64.b64encode(b"jobgate:{s}").decode()),
        ("header", None),
        ("cookie", None),
    ],
)
def test_client_values_are_replaced_by_the_proxys(
    form: Credential, authorization: str | None
) -> None:
    secret = app_secret(KEY, "sess-1")
    out = forwarded(form, SMUGGLED)
    assert values(out, b"x-jobgate-app-secret") == [secret.encode()]
    if form == "basic":
        assert values(out, b"authorization") == [
            b"Basic " + base64.b64encode(f"jobgate:{secret}".encode())
        ]
    elif authorization is not None:
        assert values(out, b"authorization") == [authorization.format(s=secret).encode()]
    else:  # the form is not Authorization: the client's own is the app's business
        assert values(out, b"authorization") == [b"token someone-elses-secret"]
    cookies = values(out, b"cookie")
    assert len(cookies) == 1  # one Cookie header, the app's own cookies kept
    if form == "cookie":
        assert cookies[0] == b"a=1; b=2; code-server-session=" + secret.encode()
    else:
        assert cookies[0] == b"a=1; code-server-session=someone-elses; b=2"
    assert values(out, b"accept") == [b"*/*"]


def test_code_server_cookie_is_added_when_the_client_sent_none() -> None:
    out = forwarded("cookie", [(b"accept", b"*/*")])
    assert values(out, b"cookie") == [b"code-server-session=" + app_secret(KEY, "sess-1").encode()]
    only_ours = forwarded("cookie", [(b"cookie", b"code-server-session=x; jobgate_auth=c")])
    assert values(only_ours, b"cookie") == [
        b"code-server-session=" + app_secret(KEY, "sess-1").encode()
    ]


def test_a_connection_header_cannot_name_the_credential_away() -> None:
    out = forwarded("token", [(b"connection", b"authorization, x-jobgate-app-secret")])
    assert len(values(out, b"authorization")) == 1
    assert len(values(out, b"x-jobgate-app-secret")) == 1


def test_routes_without_a_credential_pass_the_clients_headers() -> None:
    out = forwarded(None, SMUGGLED)
    assert values(out, b"authorization") == [b"token someone-elses-secret"]
    assert values(out, b"cookie") == [b"a=1; code-server-session=someone-elses; b=2"]


def test_each_known_app_gets_the_form_it_checks_and_others_the_header() -> None:
    assert {name: credential_for(name) for name in CREDENTIALS} == {
        "jupyter": "token",
        "code-server": "cookie",
        "terminal": "basic",
    }
    assert credential_for("my-dashboard") == "header"
    assert AppRoute(upstream="http://10.0.0.1:9").credential is None
    assert app_credential(None, "x") is None


def test_the_secret_stays_out_of_reprs_and_command_lines() -> None:
    secret = app_secret(KEY, "sess-1")
    job = StartKernel(
        kernel_id="k",
        session_id="sess-1",
        node_id="n",
        session_type="interactive",
        command=[],
        app_secret=secret,
    )
    assert secret not in repr(job)
    env = secret_env(secret)
    assert env["JUPYTER_TOKEN"] == env["JOBGATE_APP_SECRET"] == secret

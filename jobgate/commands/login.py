"""``jobgate login``: single sign-on through the gateway's identity provider: the device
flow (RFC 8628; ``jobgate/sso.py``), or with ``--browser`` (and where the provider has no
device flow) the loopback redirect (RFC 8252; ``jobgate/sso_loopback.py``). Either way the
ID token is traded for a key and saved alike. ``jobgate logout`` undoes it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from jobgate.commands.common import OutputOpt
from jobgate.errors import ApiError
from jobgate.profile import Profile
from jobgate.render import Output, err, print_json, stamp

if TYPE_CHECKING:
    from jobgate.sso import Grant

__all__ = ["login"]


def login(
    provider: Annotated[
        str | None,
        typer.Option(help="The identity provider (needed when the gateway has several)."),
    ] = None,
    url: Annotated[
        str | None, typer.Option(help="The jobgate API (default: the profile's, or JOBGATE_URL).")
    ] = None,
    browser: Annotated[
        bool,
        typer.Option(
            "--browser",
            help="Sign in in this machine's browser (a redirect to a loopback port) rather "
            "than with a code; also chosen when the provider has no device flow.",
        ),
    ] = False,
    output: OutputOpt = Output.table,
) -> None:
    """Sign in through your organisation's identity provider.

    Prints a code and where to enter it (or, with --browser, opens the sign-in page); once
    you approve there, the profile holds a short-lived API key that renews itself until
    the provider says no.
    """
    from jobgate import sso

    profile = Profile.load()
    if url:
        profile = Profile(url.rstrip("/"), "", profile.proxy_url, None)
    if not profile.url:
        raise ApiError(0, "Usage", "no API URL: give --url or set JOBGATE_URL")
    anonymous = Profile(profile.url, "", profile.proxy_url, None)
    from jobgate.client import Client

    listing = Client(anonymous)
    try:
        chosen = sso.choose(listing.get("/v1/auth/sign-in"), provider)
    finally:
        listing.close()
    meta = sso.discover(chosen)
    if browser or not meta.get("device_authorization_endpoint"):
        grant, tokens = _browser_tokens(chosen, meta)
    else:
        grant, tokens = _device_tokens(chosen, meta)
    _finish(anonymous, chosen, grant, tokens, output)


def _device_tokens(chosen: dict[str, Any], meta: dict[str, Any]) -> tuple[Grant, dict[str, Any]]:
    from jobgate import sso

    device = sso.start_device(chosen, meta)
    where = device.complete_uri or device.verification_uri
    err.print(
        f"To sign in with {chosen['display_name']}, open\n\n    {where}\n\n"
        f"and enter the code  {device.user_code}\n\nWaiting …",
        markup=False,
    )
    return device, sso.wait_for_tokens(device)


def _browser_tokens(chosen: dict[str, Any], meta: dict[str, Any]) -> tuple[Grant, dict[str, Any]]:
    import webbrowser

    from jobgate import sso_loopback

    sign_in = sso_loopback.start_browser(chosen, meta)
    try:
        err.print(
            f"Signing in with {chosen['display_name']}.\n"
            f"Opening the sign-in page in your browser; if nothing opens, visit:\n\n"
            f"    {sign_in.url}\n\nWaiting …",
            markup=False,
        )
        webbrowser.open(sign_in.url)  # honours $BROWSER
        return sign_in, sso_loopback.wait_for_tokens(sign_in)
    finally:
        sign_in.close()


def _finish(
    anonymous: Profile,
    chosen: dict[str, Any],
    grant: Grant,
    tokens: dict[str, Any],
    output: Output,
) -> None:
    """The tokens traded for a key at the gateway, the profile saved, what was done said."""
    from jobgate import sso

    saved, done = sso.login(anonymous, chosen, grant, tokens)
    path = saved.save()
    if output == Output.json:
        print_json({k: v for k, v in done.items() if k != "key"} | {"profile": str(path)})
        return
    projects = ", ".join(done["projects"]) or "none"
    err.print(
        f"signed in as {done['user']} ({done['role']}; projects: {projects}) through "
        f"{chosen['name']}; key {done['key_name']} until {stamp(done['expires_at'])}, "
        f"renewed as needed; saved in {path}",
        markup=False,
    )

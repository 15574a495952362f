"""``jobgate login``: single sign-on through the gateway's identity provider (the device
flow, RFC 8628; ``jobgate/sso.py``). ``jobgate logout`` undoes it."""

from __future__ import annotations

from typing import Annotated

import typer

from jobgate.commands.common import OutputOpt
from jobgate.errors import ApiError
from jobgate.profile import Profile
from jobgate.render import Output, err, print_json, stamp

__all__ = ["login"]


def login(
    provider: Annotated[
        str | None,
        typer.Option(help="The identity provider (needed when the gateway has several)."),
    ] = None,
    url: Annotated[
        str | None, typer.Option(help="The jobgate API (default: the profile's, or JOBGATE_URL).")
    ] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Sign in through your organisation's identity provider.

    Prints a code and where to enter it; once you approve there, the profile holds a
    short-lived API key that renews itself until the provider says no.
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
    device = sso.start_device(chosen)
    where = device.complete_uri or device.verification_uri
    err.print(
        f"To sign in with {chosen['display_name']}, open\n\n    {where}\n\n"
        f"and enter the code  {device.user_code}\n\nWaiting …",
        markup=False,
    )
    tokens = sso.wait_for_tokens(device)
    saved, done = sso.login(anonymous, chosen, device, tokens)
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

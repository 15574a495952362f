"""``jobgate logout``: revoke the key ``jobgate login`` made and forget the provider's
tokens (a pasted key is left alone)."""

from __future__ import annotations

from jobgate.client import Client, segment
from jobgate.commands.common import OutputOpt
from jobgate.errors import ApiError
from jobgate.profile import Profile
from jobgate.render import Output, err, print_json

__all__ = ["logout"]


def logout(output: OutputOpt = Output.table) -> None:
    """Revoke the key a `jobgate login` made and forget the provider's tokens."""
    profile = Profile.load()
    if profile.sso is None:
        raise ApiError(
            0,
            "Not signed in",
            "not signed in through an identity provider (a pasted API key stays in the "
            "profile: revoke it with `jobgate keys revoke NAME`)",
        )
    from jobgate.sso import revoke_refresh_token

    revoked = True
    api = Client(profile)  # as it is: a key about to expire is not renewed just to go
    try:
        api.delete(f"/v1/keys/{segment(profile.sso.key_name)}")
    except ApiError:
        revoked = False  # expired, or already revoked: forgetting it is what matters
    finally:
        api.close()
    at_provider = revoke_refresh_token(profile.sso)
    Profile(profile.url, "", profile.proxy_url, None).save()
    if output == Output.json:
        print_json({"signed_out": True, "key_revoked": revoked, "refresh_revoked": at_provider})
        return
    err.print(
        f"signed out of {profile.sso.provider}"
        + (f"; key {profile.sso.key_name} revoked" if revoked else "")
        + ("; refresh token revoked at the provider" if at_provider else ""),
        markup=False,
    )

"""/v1/auth: single sign-on. Which providers there are (anyone may ask), trading a
provider's ID token for an API key (``jobgate login``), and the admin's providers and
binding rules (docs/auth.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response, status

from gateway.api import audit
from gateway.api.auth_schemas import (
    BindingPublic,
    BindingPut,
    ProviderPublic,
    ProviderPut,
    ProviderSignIn,
    TokenExchange,
    TokenExchanged,
)
from gateway.api.deps import Admin, Oidc
from gateway.api.rules import SHORT_NAME_PATTERN
from gateway.services.oidc import BindingSpec, OidcProvider, ProviderSpec

router = APIRouter(prefix="/v1/auth", tags=["auth"])

Name = Annotated[str, Path(pattern=SHORT_NAME_PATTERN)]


def _public(row: OidcProvider) -> ProviderPublic:
    return ProviderPublic(
        name=row.name,
        display_name=row.display_name or row.name,
        issuer=row.issuer,
        client_id=row.client_id,
        cli_client_id=row.cli_client_id,
        scopes=row.scopes,
        username_claim=row.username_claim,
        groups_claim=row.groups_claim,
        has_client_secret=row.secret_ciphertext is not None,
        created_at=row.created_at,
    )


@router.get("/sign-in", operation_id="auth-sign-in-options", response_model=list[ProviderSignIn])
async def sign_in_options(oidc: Oidc) -> list[ProviderSignIn]:
    """The identity providers one may sign in through (no key needed)."""
    return [ProviderSignIn(**p) for p in await oidc.public()]


@router.post("/token", operation_id="auth-token", response_model=TokenExchanged)
async def exchange(body: TokenExchange, request: Request, oidc: Oidc) -> TokenExchanged:
    """Trade a provider's ID token for an API key of the user it names, expiring in
    ``JOBGATE_OIDC_KEY_TTL_S``. Every check that fails is a 401 naming it (``check``)."""
    done = await oidc.exchange(body.provider, body.id_token)
    audit.note_sign_in(request, done.user, body.provider, done.key_name)
    return TokenExchanged(
        key=done.key,
        key_name=done.key_name,
        expires_at=done.expires_at,
        user=done.user,
        role=done.role,
        projects=done.projects,
        created=done.created,
    )


@router.get("/providers", operation_id="auth-providers-list", response_model=list[ProviderPublic])
async def list_providers(_: Admin, oidc: Oidc) -> list[ProviderPublic]:
    return [_public(p) for p in await oidc.providers()]


@router.get("/providers/{name}", operation_id="auth-providers-get", response_model=ProviderPublic)
async def get_provider(name: Name, _: Admin, oidc: Oidc) -> ProviderPublic:
    return _public(await oidc.provider(name))


@router.put(
    "/providers/{name}",
    operation_id="auth-providers-put",
    response_model=ProviderPublic,
    responses={201: {"model": ProviderPublic, "description": "the provider was made"}},
)
async def put_provider(
    name: Name, body: ProviderPut, _: Admin, oidc: Oidc, response: Response
) -> ProviderPublic:
    """Create or update a provider; its client secret is sealed and never shown again."""
    row, created = await oidc.put_provider(name, ProviderSpec(**body.model_dump()))
    if created:
        response.status_code = status.HTTP_201_CREATED
    return _public(row)


@router.delete(
    "/providers/{name}",
    operation_id="auth-providers-delete",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
async def delete_provider(name: Name, _: Admin, oidc: Oidc) -> Response:
    """Remove a provider, its binding rules and its subjects' links (the users stay)."""
    await oidc.delete_provider(name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/providers/{name}/bindings",
    operation_id="auth-bindings-list",
    response_model=list[BindingPublic],
)
async def list_bindings(name: Name, _: Admin, oidc: Oidc) -> list[BindingPublic]:
    return [
        BindingPublic(name=b.name, claim=b.claim, value=b.value, project=p, role=b.role)
        for b, p in await oidc.bindings(name)
    ]


@router.put(
    "/providers/{name}/bindings/{binding}",
    operation_id="auth-bindings-put",
    response_model=BindingPublic,
    responses={201: {"model": BindingPublic, "description": "the rule was made"}},
)
async def put_binding(
    name: Name, binding: Name, body: BindingPut, _: Admin, oidc: Oidc, response: Response
) -> BindingPublic:
    """A binding rule: a sign-in whose claim holds the value joins the project and/or
    gets the role, from its next token on."""
    row, created = await oidc.put_binding(
        name, binding, BindingSpec(body.value, body.claim or "", body.project, body.role)
    )
    if created:
        response.status_code = status.HTTP_201_CREATED
    return BindingPublic(
        name=row.name, claim=row.claim, value=row.value, project=body.project, role=row.role
    )


@router.delete(
    "/providers/{name}/bindings/{binding}",
    operation_id="auth-bindings-delete",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
async def delete_binding(name: Name, binding: Name, _: Admin, oidc: Oidc) -> Response:
    await oidc.delete_binding(name, binding)
    return Response(status_code=status.HTTP_204_NO_CONTENT)

"""Who calls: `authorization: Bearer <token>` (and a share token) -> the caller's Identity, by
configuration (auth.tokens, auth.anonymousUser, auth.namespaces)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import grpc

from sessionq import errors

SHARE_TOKEN_HEADER = "x-kagent-share-token"
IDENTITY_CACHE = 4096  # sets of request metadata whose caller Authenticator.identify keeps


@dataclass(frozen=True)
class Identity:
    user: str
    share_hash: str | None = None


class Authenticator:
    """`authorization: Bearer <token>` -> user, by configuration. Without a token the call is the
    anonymous user's when one is configured (`sessionq up`), else UNAUTHENTICATED."""

    def __init__(
        self, tokens: dict[str, str], anonymous_user: str = "", namespaces: dict[str, list[str]] | None = None
    ) -> None:
        self.tokens = dict(tokens)
        self.anonymous_user = anonymous_user
        self.namespaces = dict(namespaces or {})
        # identify() answers the same metadata with the same Identity: the tokens and the anonymous
        # user are fixed for the Authenticator's life, so who sent a given set of headers is too.
        # Only identities are kept (a refused call is worked out again), at most IDENTITY_CACHE
        # sets of metadata (emptied when full: metadata carrying per-call values never fills it for good)
        self._identities: dict[Any, Identity] = {}

    def may_use_namespace(self, who: Identity, namespace: str) -> bool:
        """Whether the caller may use the Agents of a namespace (auth.namespaces)."""
        allowed = self.namespaces.get(who.user)
        return allowed is None or namespace in allowed or "*" in allowed

    def check_namespace(self, who: Identity, namespace: str) -> None:
        if not self.may_use_namespace(who, namespace):
            raise errors.permission_denied(f"{who.user} may not use the agents of namespace {errors.clip(namespace)}")

    def identify(self, context: grpc.aio.ServicerContext) -> Identity:
        md: Any = context.invocation_metadata() or ()
        try:
            known = self._identities.get(md)
        except TypeError:  # metadata that cannot be a key (no gRPC server gives any): not kept
            return self.identify_headers(credential_headers(md))
        if known is not None:
            return known
        who = self.identify_headers(credential_headers(md))
        if len(self._identities) >= IDENTITY_CACHE:
            self._identities.clear()
        self._identities[md] = who
        return who

    def identify_headers(self, md: dict[str, str]) -> Identity:
        """The caller of a request with these (lower-cased) headers or metadata."""
        share = md.get(SHARE_TOKEN_HEADER)
        share_hash = hash_token(share) if share else None
        auth = md.get("authorization", "")
        if auth:
            scheme, _, token = auth.partition(" ")
            user = self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None
            if not user:
                raise errors.unauthenticated("the bearer token is not recognised")
            return Identity(user, share_hash)
        if self.anonymous_user:
            return Identity(self.anonymous_user, share_hash)
        raise errors.unauthenticated("an authorization bearer token is required")


# headers that name the caller: each may come once (which of several to believe is no client's choice)
CREDENTIAL_HEADERS = ("authorization", SHARE_TOKEN_HEADER)


def credential_headers(pairs: Iterable[tuple[str, Any]]) -> dict[str, str]:
    """The (lower-cased) text headers or metadata of a request; UNAUTHENTICATED when a credential
    header comes more than once."""
    out: dict[str, str] = {}
    for key, value in pairs:
        if not isinstance(value, str):
            continue
        name = key.lower()
        if name in out and name in CREDENTIAL_HEADERS:
            raise errors.unauthenticated(f"the {name} header must be sent once (it came several times)")
        out[name] = value
    return out


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()

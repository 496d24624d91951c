"""Who calls the ingress: a client, by the bearer token it sends (`SPEX_AUTH_TOKENS`,
`SPEX_AUTH_TOKENS_FILE`: token -> client name), the operator, by a token of its own
(`SPEX_OPERATOR_TOKEN`, `SPEX_OPERATOR_TOKEN_FILE`), and the caller a long-lived request's cap is
counted against (`long_lived`).

Without client tokens every request is the one client "" (its questions and client keys are
everyone's), and callers are told apart by the address their connection comes from: one caller's
open streams never refuse another's. What fairness needs tokens for: behind a reverse proxy
every caller has the proxy's address, so one cap is shared by all; and whatever the address,
only tokens keep one caller's client keys, answers and cancels from another's.

Tokens are compared in constant time, with every token, whatever is sent.
"""

from __future__ import annotations

import hmac
import re
from pathlib import Path

from aiohttp import web

from spex.shared.runtime.settings import Settings

__all__ = ["Callers", "load_operator_token", "load_tokens"]

TOKEN_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def load_tokens(settings: Settings) -> dict[str, str]:
    """token -> client name, from `NAME=TOKEN,...` and a file of `NAME TOKEN` lines ('#'
    comments). ValueError naming the variable on a malformed entry."""
    entries: list[tuple[str, str, str]] = []
    for item in filter(None, (i.strip() for i in settings.auth_tokens.split(","))):
        name, _, token = item.partition("=")
        entries.append(("SPEX_AUTH_TOKENS", name.strip(), token.strip()))
    if settings.auth_tokens_file:
        for line in Path(settings.auth_tokens_file).read_text().splitlines():
            parts = line.split("#", 1)[0].split()
            if parts:
                entries.append(("SPEX_AUTH_TOKENS_FILE", parts[0], parts[1] if len(parts) == 2 else ""))
    tokens: dict[str, str] = {}
    for source, name, token in entries:
        if not TOKEN_NAME.fullmatch(name) or len(token) < 16:
            raise ValueError(f"{source}: each entry is NAME and a TOKEN of at least 16 characters")
        tokens[token] = name
    if (settings.auth_tokens.strip() or settings.auth_tokens_file) and not tokens:
        # Asked for auth and given none: refuse to start rather than let everyone in.
        raise ValueError("SPEX_AUTH_TOKENS / SPEX_AUTH_TOKENS_FILE: set, but holds no tokens")
    return tokens


def load_operator_token(settings: Settings) -> str:
    """The operator's token (SPEX_OPERATOR_TOKEN, or the file SPEX_OPERATOR_TOKEN_FILE names), ""
    if none; ValueError naming the variable if it is short enough to guess at."""
    token, source = settings.operator_token.strip(), "SPEX_OPERATOR_TOKEN"
    if settings.operator_token_file:
        token, source = Path(settings.operator_token_file).read_text().strip(), "SPEX_OPERATOR_TOKEN_FILE"
    if (settings.operator_token or settings.operator_token_file) and (len(token) < 16 or " " in token):
        raise ValueError(f"{source}: a token of at least 16 characters, without spaces")
    return token


class Callers:
    def __init__(self, settings: Settings) -> None:
        self.tokens = load_tokens(settings)  # token -> client name
        self.operator_token = load_operator_token(settings)
        # With client tokens or an operator's token, everyone's figures are the operator's alone.
        self.scoped = bool(self.tokens or self.operator_token)

    def client_of(self, request: web.Request) -> str | None:
        """The client `request` is ("" without tokens), or None if its token is none of them."""
        if not self.tokens:
            return ""
        sent = _bearer(request)
        if sent is None:
            return None
        found = None
        for token, name in self.tokens.items():  # compare with every token, in constant time
            if hmac.compare_digest(token.encode(), sent):
                found = name
        return found

    def operator(self, request: web.Request) -> bool:
        """Whether `request` bears the operator's token."""
        sent = _bearer(request)
        return (
            bool(self.operator_token)
            and sent is not None
            and hmac.compare_digest(self.operator_token.encode(), sent)
        )

    def caller(self, request: web.Request, client: str) -> str:
        """Whom a long-lived request of `client`'s is counted against: the client, or without
        tokens the address it comes from."""
        return client if self.tokens else f"address {request.remote or 'unknown'}"


def _bearer(request: web.Request) -> bytes | None:
    """The bearer token a request sends, as the bytes sent (None: none). aiohttp decodes header
    bytes as UTF-8 with surrogateescape: encoding back the same way gives the bytes sent,
    whatever they are (a strict encode fails on non-UTF-8 bytes)."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        return None
    return given.strip().encode("utf-8", "surrogateescape")

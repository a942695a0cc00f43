"""Transport security for callgate's servers: the loopback rule and bearer tokens, spelled once.

The sidecar's gRPC and HTTP endpoints and the gateway's streamable HTTP transport all ask the same
two questions: may this address be bound without authentication (``is_loopback``), and does this
``Authorization`` value carry a configured token (a ``TokenVerifier``; ``BearerTokens`` is the one
implementation). ``BearerAuth`` puts the check in front of an ASGI app.

Header values arrive as the servers decode them: bytes (ASGI), or text decoded as ISO-8859-1
(``http.server``, Starlette), or ASCII text (gRPC metadata). Every form is compared as the bytes
that were on the wire, so no value, UTF-8 or not, can make the check raise: it answers "no". Only
the standard library is imported here, so any layer may use it (``callgate`` imports ``telemetry``,
never the reverse).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import socket
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["BearerAuth", "BearerTokens", "TokenVerifier", "is_loopback", "presented_token"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

HeaderValue = str | bytes | None
"""An ``Authorization`` value as a server hands it over; ``None`` when the request had none."""

_BLANK = b" \t"


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one: ``127.0.0.1``, ``::1`` (bracketed
    or not), ``localhost`` when it resolves only to those. ``""`` and ``0.0.0.0`` are not."""
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):  # an unresolvable or unencodable name binds nowhere safe
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


def presented_token(header: HeaderValue) -> bytes | None:
    """The credentials of ``Bearer <token>`` (scheme in any case), as wire bytes; else ``None``.

    Text is turned back into the bytes it was decoded from (ISO-8859-1, which every server here
    uses); text that cannot have come off the wire is no token.
    """
    if header is None:
        return None
    if isinstance(header, str):
        try:
            header = header.encode("latin-1")
        except UnicodeEncodeError:
            return None
    scheme, _, credentials = header.strip(_BLANK).partition(b" ")
    credentials = credentials.strip(_BLANK)
    if scheme.lower() != b"bearer" or not credentials:
        return None
    return credentials


class TokenVerifier(Protocol[T_co]):
    """Who an ``Authorization`` value stands for, or ``None``: never raises, whatever the value."""

    def verify(self, header: HeaderValue) -> T_co | None:
        """The principal (or ``True``) ``header`` stands for; ``None`` for anything else."""


class BearerTokens(Generic[T]):
    """Configured bearer tokens, each standing for someone (a principal, or just ``True``).

    ``verify`` compares the presented token with every configured one through SHA-256 digests, so
    the time taken says neither which token matched nor how long any is. A token is text (sent as
    its UTF-8 bytes) or bytes; surrounding whitespace is not part of it. An empty token, or one given
    twice, is a configuration error (``ValueError``).
    """

    def __init__(self, tokens: Iterable[tuple[str | bytes, T]]) -> None:
        self._digests: list[tuple[bytes, T]] = []
        seen: set[bytes] = set()
        for token, who in tokens:
            raw = (token.encode("utf-8") if isinstance(token, str) else token).strip()
            if not raw:
                raise ValueError("the bearer token is empty")
            digest = hashlib.sha256(raw).digest()
            if digest in seen:
                raise ValueError("a bearer token is configured twice")
            seen.add(digest)
            self._digests.append((digest, who))

    @classmethod
    def single(cls, token: str | bytes) -> BearerTokens[bool]:
        """One token that stands for nobody in particular (the sidecar's)."""
        return BearerTokens([(token, True)])

    def __len__(self) -> int:
        return len(self._digests)

    def verify(self, header: HeaderValue) -> T | None:
        """Who the token in ``header`` stands for; ``None`` for no, a malformed or a wrong token."""
        token = presented_token(header)
        if token is None:
            return None
        offered = hashlib.sha256(token).digest()
        found: T | None = None
        for digest, who in self._digests:  # no early exit: every token costs the same
            if hmac.compare_digest(offered, digest) and found is None:
                found = who
        return found


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _authorization(scope: Scope) -> bytes | None:
    """The one ``Authorization`` header's raw value; ``None`` when absent or given more than once."""
    values = [
        value for name, value in scope.get("headers") or () if name.lower() == b"authorization"
    ]
    return bytes(values[0]) if len(values) == 1 else None


class BearerAuth:
    """ASGI middleware: an HTTP request without a token ``verifier`` accepts gets 401 before ``app``.

    WebSocket handshakes without one are closed (1008). Other scopes (lifespan) pass.
    """

    def __init__(self, app: ASGIApp, verifier: TokenVerifier[object], *, realm: str) -> None:
        self.app = app
        self.verifier = verifier
        self._challenge = f'Bearer realm="{realm}"'.encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope.get("type")
        if kind in ("http", "websocket") and self.verifier.verify(_authorization(scope)) is None:
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            body = json.dumps(
                {"error": "unauthorized", "message": "a valid bearer token is required"}
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"www-authenticate", self._challenge),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)

"""Transport security spelled once: the loopback rule, the bearer check, the ASGI middleware."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from telemetry.auth import BearerAuth, BearerTokens, is_loopback, presented_token

TOKEN = b"tok-0123456789abcdef"

HEADER_BYTES = st.one_of(
    st.binary(max_size=48),
    st.binary(max_size=48).map(lambda tail: b"Bearer " + tail),
    st.binary(max_size=8).map(lambda tail: b"Bearer " + TOKEN + tail),
    st.tuples(st.integers(0, len(TOKEN) - 1), st.integers(0x80, 0xFF)).map(
        lambda at: b"Bearer " + TOKEN[: at[0]] + bytes([at[1]]) + TOKEN[at[0] + 1 :]
    ),
).filter(lambda value: b"\r" not in value and b"\n" not in value)
"""``Authorization`` values as bytes on the wire: any bytes, near misses, non-UTF-8 ones (no CR, LF:
those end the header, they are the framing's, not the value's)."""


class TestLoopback:
    """One rule for every server: loopback means every address the name gives is loopback."""

    @pytest.mark.parametrize(
        "host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", " ::1 ", "localhost"]
    )
    def test_loopback_hosts(self, host: str) -> None:
        """IPv4 and IPv6 loopback, bracketed or not, and localhost are loopback."""
        assert is_loopback(host)

    @pytest.mark.parametrize(
        "host", ["", "[]", "0.0.0.0", "::", "[::]", "10.0.0.1", "::1]", "\udcff"]
    )
    def test_other_hosts(self, host: str) -> None:
        """Any address, the wildcard, nothing, and names that cannot be looked up are not."""
        assert not is_loopback(host)

    def test_the_gateway_and_the_sidecar_ask_the_same_function(self) -> None:
        """Both servers' bind checks are telemetry.auth's (they disagreed on [::1])."""
        from callgate.gateway import run
        from telemetry.sidecar import receiver

        assert run.is_loopback is receiver.is_loopback is is_loopback


class TestBearerTokens:
    """The bearer check: who a header stands for, or None, and never an exception."""

    @given(HEADER_BYTES)
    def test_any_bytes_get_an_answer(self, header: bytes) -> None:
        """Every header value, UTF-8 or not, is answered; only the exact token is someone."""
        tokens = BearerTokens([(TOKEN, "bot")])
        who = tokens.verify(header)
        assert who == ("bot" if presented_token(header) == TOKEN else None)

    @given(HEADER_BYTES)
    def test_text_is_the_bytes_it_was_decoded_from(self, header: bytes) -> None:
        """A header decoded as ISO-8859-1 (http.server, Starlette) verifies as its bytes do."""
        tokens = BearerTokens([(TOKEN, "bot")])
        assert tokens.verify(header.decode("latin-1")) == tokens.verify(header)

    @pytest.mark.parametrize(
        "header",
        [
            "Bearer tok-0123456789abcdef",
            "bearer tok-0123456789abcdef",
            "BEARER  tok-0123456789abcdef ",
            "\tBearer tok-0123456789abcdef",
        ],
    )
    def test_scheme_in_any_case_and_blanks_around(self, header: str) -> None:
        """The scheme is case-insensitive and blanks around the parts are not the token's."""
        assert BearerTokens([(TOKEN, "bot")]).verify(header) == "bot"

    @pytest.mark.parametrize(
        "header",
        [
            None,
            "",
            "Bearer",
            "Bearer ",
            "Basic tok-0123456789abcdef",
            "tok-0123456789abcdef",
            "Bearer \u0100",
        ],
    )
    def test_no_token(self, header: str | None) -> None:
        """No header, no scheme, another scheme, no credentials, text no wire could carry: None."""
        assert BearerTokens([(TOKEN, "bot")]).verify(header) is None

    def test_each_token_stands_for_its_principal(self) -> None:
        """Several tokens: each header finds its own principal; text tokens are their UTF-8."""
        tokens = BearerTokens([("bot-token", "bot"), ("lecteur-clé", "reader")])
        assert tokens.verify("Bearer bot-token") == "bot"
        assert tokens.verify("Bearer lecteur-clé".encode()) == "reader"
        assert tokens.verify("Bearer lecteur-clé") is None  # text is latin-1 wire bytes, not UTF-8
        assert len(tokens) == 2

    @pytest.mark.parametrize(
        "tokens",
        [[("", "a")], [(" \n", "a")], [("t", "a"), ("t", "b")], [("t", "a"), (b" t ", "a")]],
    )
    def test_empty_or_repeated_tokens_are_refused(
        self, tokens: list[tuple[str | bytes, str]]
    ) -> None:
        """An empty token or one configured twice (whatever it maps to) is a configuration error."""
        with pytest.raises(ValueError, match=r"empty|twice"):
            BearerTokens(tokens)


def _asgi_call(headers: list[tuple[bytes, bytes]]) -> tuple[int, bool]:
    """One HTTP request through the middleware (token ``TOKEN``): the status, whether the app ran."""
    sent: list[MutableMapping[str, Any]] = []
    ran: list[bool] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        ran.append(True)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    middleware = BearerAuth(app, BearerTokens([(TOKEN, "bot")]), realm="test")
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
    anyio.run(middleware, scope, receive, send)
    return int(sent[0]["status"]), bool(ran)


class TestBearerAuth:
    """The ASGI middleware in front of the gateway's MCP app."""

    @given(HEADER_BYTES)
    def test_raw_header_bytes_get_401_or_pass(self, header: bytes) -> None:
        """Any raw Authorization bytes: 401 before the app, unless they carry the token."""
        status, ran = _asgi_call([(b"authorization", header)])
        expected = presented_token(header) == TOKEN
        assert (status, ran) == ((200, True) if expected else (401, False))

    def test_two_authorization_headers_are_refused(self) -> None:
        """Two Authorization headers are ambiguous: 401, even when one is right."""
        good = (b"Authorization", b"Bearer " + TOKEN)
        assert _asgi_call([good]) == (200, True)
        assert _asgi_call([good, (b"authorization", b"Bearer x")]) == (401, False)

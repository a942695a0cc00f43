"""Credentials in an endpoint URL: kept out of everything printed or stored, and of other origins.

A base URL can carry secrets two ways: userinfo (``https://user:password@host/v1``) and query
parameters (``?api-key=...``, ``?token=...``). :func:`redact_url` is the URL as it may be shown:
no userinfo, and the value of every parameter whose name looks like a credential replaced by
``***``. :func:`scrub` removes the secrets themselves from any text, for the messages of errors
raised by the standard library, which quote URLs as they were given. :func:`same_origin` is the
rule the client follows redirects by: the credentials go only where ``--base-url`` points.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

__all__ = ["REDACTED", "redact_url", "same_origin", "scrub", "url_secrets"]

REDACTED = "***"

# A parameter name holding one of these words is treated as a credential (over-redacting a
# harmless parameter costs a reader a value; under-redacting leaks a key).
_SECRET_NAME = re.compile(r"key|token|secret|passw|pwd|auth|sig|credential|session|access", re.I)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _netloc_without_userinfo(netloc: str) -> str:
    return netloc.rpartition("@")[2]


def redact_url(url: str) -> str:
    """``url`` without userinfo, with the values of credential-like query parameters hidden."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not even a URL: show nothing of it
        return REDACTED
    query = urlencode(
        [
            (name, REDACTED if _SECRET_NAME.search(name) else value)
            for name, value in parse_qsl(parts.query, keep_blank_values=True)
        ],
        safe="*",
    )
    netloc = _netloc_without_userinfo(parts.netloc)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def url_secrets(url: str) -> tuple[str, ...]:
    """The secret strings ``url`` holds (userinfo parts, credential-like parameter values), as
    written and decoded, longest first so that :func:`scrub` never leaves a piece of one."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return (url,)
    found: list[str] = []
    userinfo, at, _ = parts.netloc.rpartition("@")
    if at:
        found += [userinfo, *userinfo.split(":", 1)]
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if _SECRET_NAME.search(name):
            found += [value, quote(value, safe=""), quote(value)]
    found += [unquote(secret) for secret in found]
    return tuple(sorted({s for s in found if s}, key=len, reverse=True))


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


def same_origin(first: str, second: str) -> bool:
    """Whether two URLs share scheme, host and port (the origin a browser would compare)."""
    a, b = urlsplit(first), urlsplit(second)
    try:
        ports = (
            a.port or _DEFAULT_PORTS.get(a.scheme.lower()),
            b.port or _DEFAULT_PORTS.get(b.scheme.lower()),
        )
    except ValueError:  # a port that is not a number: not an origin to send anything to
        return False
    return (
        a.scheme.lower() == b.scheme.lower()
        and (a.hostname or "") == (b.hostname or "")
        and ports[0] == ports[1]
    )

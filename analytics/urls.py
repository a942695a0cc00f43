"""URLs as people may see them: a password in a URL never reaches a terminal, a page or a log."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = ["without_password"]


def without_password(url: str) -> str:
    """``http://user:secret@host:8123/db`` -> ``http://user:***@host:8123/db``; others unchanged."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    netloc = f"{parts.username}:***@{host}" if parts.username else host
    return urlunsplit(parts._replace(netloc=netloc))

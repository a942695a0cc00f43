"""Where a value came from: the values a session saw in tool results, and those the host vouches for.

The session's ledger lives in the counter store, next to the taint mark and under the same expiry,
so it is as durable as the store (memory, SQLite, Redis) and a restored session keeps it. Each value
is kept under two spellings, because the two questions have opposite failure modes:

- **vouched** (a trusted source has it): the *trusted form*, exact up to Unicode normalisation
  (NFC), surrounding whitespace and case. A look-alike of a trusted value is not vouched for.
- **seen in untrusted output**: the *skeleton*, as loose as possible: URL-decoded, NFKC, no
  whitespace or invisible characters, case-folded, look-alike letters folded to Latin. Re-encoding
  a value does not hide where it came from.

A counter holds the first source of each value: ``step * 4096 + slot``, where ``slot`` is the
tool's place in the registry (plus one) and ``HOST_SLOT`` marks a value the host declared. Values
are taken whole (short strings, numbers) and as tokens of free text: words that look like
identifiers (they hold a digit or one of ``@ / . _ - : # +``: e-mail addresses, URLs, ids, paths,
amounts) and IBANs written in groups.

Memory is bounded per session (``Policy.provenance_limit`` values). A session never loses what it
recorded; past the bound, new values are not recorded, and the ledger says it is *incomplete*:
an unrecorded untrusted value may then be anywhere, so every value no trusted source vouches for
counts as untrusted. A value the store refuses (``StoreFull``) counts the same way, and so does
a session that outlives its first untrusted values' expiry (``Policy.session_ttl``): values are not
refreshed one by one, so the ledger says when some may be gone.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from guard.policy import Policy, TaintMode
from guard.stores.base import CounterStore, StoreFull

if TYPE_CHECKING:
    from guard.registry import ToolRegistry

__all__ = [
    "HOST_SLOT",
    "Provenance",
    "ProvenanceHit",
    "ProvenanceLedger",
    "ValueSource",
    "ledger_for",
    "skeleton",
    "tokens",
    "trusted_form",
]

HOST_SLOT = 4095
"""The slot of values the host declared (the user's message, the principal's own records)."""
_SLOTS = 4096
_WHOLE = 512
"""Strings up to this length are kept whole as well as by token."""
_SCAN = 16_384
"""Characters of one string scanned for tokens: the rest of a huge result adds nothing."""
_PER_STRING = 256
"""Tokens kept per string."""

# Letters that render like Latin ones (Cyrillic, Greek, and a few symbols), after case folding;
# digits that pass for letters. Folding more than the Unicode tables do only makes the skeleton
# match more untrusted values, which is the safe direction.
_LOOKALIKES = str.maketrans(
    "\u0430\u0435\u043e\u0440\u0441\u0443\u0445\u0456\u0458\u0455\u0501\u04bb\u051b\u051d\u0261\u0131\u03bf\u03b1\u03bd\u03c1\u03b9\u03ba\u03c5\u03b5\u03c4\u211301|",
    "aeopcyxijsdhqwgioavpikuetloll",
)
_EDGE = "\"'`()[]{}<>,;.:!?*"
_SPLIT = re.compile(r"[\s<>\"'()\[\]{},;|`]+")
_IDENTIFIER = frozenset("0123456789@/._-:#+")
# An IBAN in groups of four ("DE89 3704 0044 ..."): starts at a country code and check digits, so
# the scan is linear; the groups are bounded.
_GROUPED_IBAN = re.compile(
    r"(?<![A-Za-z0-9])[A-Za-z]{2}[0-9]{2}(?: ?[A-Za-z0-9]{4}){2,7}(?: ?[A-Za-z0-9]{1,3})?"
)


def trusted_form(value: object) -> str:
    """The spelling a trusted source must match: NFC, trimmed, case-folded."""
    return unicodedata.normalize("NFC", _text(value)).strip().casefold()


def skeleton(value: object) -> str:
    """The loose spelling untrusted output is kept under: re-encodings of a value share it."""
    text = unicodedata.normalize("NFKC", _text(value))  # a fullwidth % is a %
    for _ in range(3):  # %2540 -> %40 -> @: a value URL-encoded twice
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    text = unicodedata.normalize("NFKC", text).casefold()
    kept = "".join(c for c in text if not c.isspace() and unicodedata.category(c) != "Cf")
    return unicodedata.normalize("NFKC", kept.translate(_LOOKALIKES)).strip(_EDGE)


def tokens(text: str) -> set[str]:
    """The identifier-like tokens of free text: e-mail addresses, URLs, ids, paths, amounts, IBANs."""
    head = text[:_SCAN]
    found: set[str] = set()
    for word in _SPLIT.split(head):
        word = word.strip(_EDGE)
        if "@" in word and "://" not in word:
            word = word.rsplit(":", 1)[-1]  # mailto:a@b.example, to:a@b.example
        if len(word) >= 3 and _identifier(word):
            found.add(word)
            found.update(_parts(word))
            if len(found) >= _PER_STRING:
                return found
    found.update(match.group() for match in _GROUPED_IBAN.finditer(head))
    return found


def _identifier(word: str) -> bool:
    """Holds a digit or one of ``@ / . _ - : # +``, also when encoded (``%40``, fullwidth)."""
    return any(c in _IDENTIFIER for c in word) or any(
        c in _IDENTIFIER for c in unicodedata.normalize("NFKC", unquote(word))
    )


def _parts(word: str) -> tuple[str, ...]:
    """Where a URL or an address points, so a value built on an attacker's URL (the user's data
    appended as a query) or mailbox domain still shares a token with it: the origin and the URL
    without its query, or ``@domain``."""
    if "://" in word:
        try:
            url = urlsplit(word)
        except ValueError:
            return ()
        if not url.netloc:
            return ()
        origin = f"{url.scheme}://{url.netloc}"
        return (origin, origin + url.path) if url.path not in ("", "/") else (origin,)
    if "@" in word:
        domain = word.rsplit("@", 1)[1]
        return (f"@{domain}",) if "." in domain else ()
    return ()


@dataclass(frozen=True, kw_only=True, slots=True)
class ValueSource:
    """Where a value was first seen in the session."""

    tool: str | None
    """The tool whose result held it; None for a value the host declared."""
    step: int
    """The call's number in its session (``guard.step``); 0 for a declared value or a call that
    resumed an approval."""
    trusted: bool
    """A trusted source: the host, or a tool without ``untrusted_output``."""

    def describe(self) -> str:
        """``get_inbox (step 3)``, or ``declared by the host``."""
        return "declared by the host" if self.tool is None else f"{self.tool} (step {self.step})"


@dataclass(frozen=True, kw_only=True, slots=True)
class Provenance:
    """What the session knows about one value (``CheckContext.provenance``)."""

    value: str
    """The value asked about, as text."""
    trusted: ValueSource | None
    """The first trusted source that had it exactly (up to case and NFC), if any."""
    untrusted: ValueSource | None
    """The first untrusted result that had it, in any re-encoding (the skeleton), if any."""
    complete: bool
    """Every untrusted value of the session was recorded (the bound was never reached)."""

    @property
    def vouched(self) -> bool:
        """A trusted source has this value."""
        return self.trusted is not None

    @property
    def only_untrusted(self) -> bool:
        """No trusted source has it, and untrusted output had it (or may have: incomplete)."""
        return self.trusted is None and (self.untrusted is not None or not self.complete)


@dataclass(frozen=True, kw_only=True, slots=True)
class ProvenanceHit:
    """The sink argument that made a call wait for a human, for spans and the approver."""

    field: str
    """The argument (``to``, ``iban``; ``recipients/1`` for a list item)."""
    value: str
    """Its value as text (telemetry masks it before it reaches a span)."""
    source: ValueSource | None
    """The untrusted call it came from; None when no source at all vouched for it."""


class ProvenanceLedger:
    """Records and answers provenance for every session, over a counter store."""

    def __init__(
        self, *, counters: CounterStore, tools: Sequence[str], ttl: float, limit: int
    ) -> None:
        if len(tools) >= HOST_SLOT:
            raise ValueError(f"provenance holds at most {HOST_SLOT - 1} tools")
        self.counters = counters
        self.ttl = ttl
        self.limit = limit
        self._tools = tuple(tools)
        self._slots = {name: index + 1 for index, name in enumerate(tools)}

    # -- recording --------------------------------------------------------------------------------

    def record(
        self, session_id: str, data: Any, *, tool: str, step: int, trusted: bool, now: float
    ) -> None:
        """Keep the values of one tool result the model saw."""
        code = step * _SLOTS + self._slots[tool]
        if trusted:
            self._keep(session_id, "t", {trusted_form(v) for v in _spellings(data)}, code, now)
            return
        # Open first, close last: a recording cut short (the bound, a full store, a crash) leaves
        # the session marked incomplete, never silently short of an untrusted value.
        self.counters.incr(_open_key(session_id), now=now, ttl=self.ttl)
        since, first = _since_key(session_id), int(now)
        if not self.counters.add_within(since, first, first, now=now, ttl=self.ttl):
            self.counters.incr(since, 0, now=now, ttl=self.ttl)  # kept as long as the taint mark
        if self._keep(session_id, "u", {skeleton(v) for v in _spellings(data)}, code, now):
            self.counters.incr(_open_key(session_id), -1, now=now, ttl=self.ttl)

    def vouch(self, session_id: str, values: Iterable[object], *, now: float) -> None:
        """Values the host declares trusted: the user's message (its tokens too), own records."""
        forms = {trusted_form(v) for value in values for v in _spellings(value)}
        self._keep(session_id, "t", forms, HOST_SLOT, now)

    def _keep(self, session_id: str, kind: str, forms: set[str], code: int, now: float) -> bool:
        """Record ``forms``; False when the bound or a full store stopped it. One atomic
        set-if-absent per value (``add_within`` up to ``code``: refused when already set), and
        one count per value recorded."""
        counters, count_key = self.counters, _count_key(session_id)
        try:
            count = counters.get(count_key, now=now)
            for form in sorted(forms):  # sorted: the same values fill the bound the same way
                if not form:
                    continue
                if count >= self.limit:
                    return False
                key = _value_key(session_id, kind, form)
                if counters.add_within(key, code, code, now=now, ttl=self.ttl):
                    count = counters.incr(count_key, now=now, ttl=self.ttl)
        except StoreFull:
            return False
        return True

    # -- asking -----------------------------------------------------------------------------------

    def lookup(self, session_id: str, value: object, *, now: float) -> Provenance:
        """What the session knows about ``value`` (an exact value, or a token of earlier text)."""
        get = self.counters.get
        trusted = get(_value_key(session_id, "t", trusted_form(value)), now=now)
        untrusted = get(_value_key(session_id, "u", skeleton(value)), now=now)
        if not untrusted and isinstance(value, str):  # a token of it came from outside
            for token in sorted(tokens(value)):
                if untrusted := get(_value_key(session_id, "u", skeleton(token)), now=now):
                    break
        return Provenance(
            value=_text(value),
            trusted=self._source(trusted, trusted=True),
            untrusted=self._source(untrusted, trusted=False),
            complete=self.complete(session_id, now=now),
        )

    def complete(self, session_id: str, *, now: float) -> bool:
        """No untrusted value of the session went unrecorded."""
        counters = self.counters
        if counters.get(_open_key(session_id), now=now) > 0:
            return False
        since = counters.get(_since_key(session_id), now=now)
        if since and now >= since + self.ttl:  # the first untrusted values may have expired
            return False
        return counters.get(_count_key(session_id), now=now) < self.limit

    def _source(self, code: int, *, trusted: bool) -> ValueSource | None:
        if code <= 0:
            return None
        step, slot = divmod(code, _SLOTS)
        if slot == HOST_SLOT:
            return ValueSource(tool=None, step=0, trusted=True)
        tool = self._tools[slot - 1] if 0 < slot <= len(self._tools) else None
        return ValueSource(tool=tool, step=step, trusted=trusted)


def _spellings(data: Any) -> Iterator[object]:
    """Every value of a result worth keeping: short strings and numbers whole, tokens of text."""
    if isinstance(data, dict):
        for item in data.values():
            yield from _spellings(item)
    elif isinstance(data, list | tuple):
        for item in data:
            yield from _spellings(item)
    elif isinstance(data, str):
        if len(data) <= _WHOLE:
            yield data
        yield from tokens(data)
    elif isinstance(data, int | float) and not isinstance(data, bool):
        yield data


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _value_key(session_id: str, kind: str, form: str) -> str:
    hashed = hashlib.blake2b(form.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return f"prov:{session_id}:{kind}:{hashed}"


def _count_key(session_id: str) -> str:
    return f"prov:{session_id}:n"


def _since_key(session_id: str) -> str:
    return f"prov:{session_id}:since"


def _open_key(session_id: str) -> str:
    return f"prov:{session_id}:open"


def ledger_for(
    registry: ToolRegistry, policy: Policy, counters: CounterStore
) -> ProvenanceLedger | None:
    """The provenance ledger, in the counter store like taint: when the host asks for it, or
    when an argument-level taint mode has a tool with sink arguments to check."""
    argument_level = policy.taint_mode is not TaintMode.SESSION and any(
        spec.declares_sinks for spec in registry.values()
    )
    if not (policy.record_provenance or argument_level):
        return None
    return ProvenanceLedger(
        counters=counters,
        tools=tuple(registry),
        ttl=policy.session_ttl,
        limit=policy.provenance_limit,
    )

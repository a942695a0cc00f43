"""Masking: what a value may look like on a span. Runs before any attribute is set.

Two sources of sensitivity:

- the schema: argument fields a tool marks sensitive (``ToolSpec.sensitive_fields``) are masked whole,
  whatever they contain;
- detectors: values that look like e-mail addresses, card numbers (Luhn-checked), phone numbers, IBANs
  (mod-97-checked), bearer tokens, JWTs and API keys are masked wherever they appear, also inside free
  text, inside keys, and inside arguments that failed to parse or validate.

Two modes: ``redact`` replaces a value by ``[REDACTED:<kind>]``; ``hash`` replaces it by a keyed hash
(HMAC-SHA256 with the deployment key), ``[<kind>:h_<12 hex>]``, so that equal values correlate across
spans without being revealed. The principal is always a keyed hash (``p_<12 hex>``).

Untrusted tool results are also scanned for instruction-like text (``detect_injection``).
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "DETECTORS",
    "EXCERPT_CONTEXT",
    "INJECTION_RULES",
    "Detector",
    "InjectionMatch",
    "InjectionRule",
    "MaskMode",
    "Masker",
    "detect_injection",
    "find_injection",
    "luhn_valid",
]


class MaskMode(StrEnum):
    """How a sensitive value is replaced."""

    REDACT = "redact"
    """``[REDACTED:<kind>]``: nothing of the value survives."""
    HASH = "hash"
    """``[<kind>:h_<hex>]``: a keyed hash, equal values give equal hashes."""


_DOUBLED = {str(d): (2 * d - 9 if 2 * d > 9 else 2 * d) for d in range(10)}


def luhn_valid(digits: str) -> bool:
    """True when the digit string passes the Luhn checksum (card numbers)."""
    odd = digits[-1::-2]
    even = digits[-2::-2]
    total = sum(map(int, odd)) + sum(map(_DOUBLED.__getitem__, even))
    return total % 10 == 0


def _card_ok(match: str) -> bool:
    digits = _NON_DIGIT.sub("", match)
    if 13 <= len(digits) <= 19 and luhn_valid(digits):
        return True
    # A card among other digit groups ("12 4111 1111 1111 1111", a phone number and then a card):
    # any run of whole groups that is a card masks the whole candidate, so no group of the card
    # is left beside the mask. Windows are at most 19 digits: the work per candidate is linear.
    groups = [group for group in _SEPARATOR.split(match) if group]
    for start in range(len(groups)):
        window = ""
        for group in groups[start:]:
            window += group
            if len(window) > 19:
                break
            if len(window) >= 13 and luhn_valid(window):
                return True
    return False


_IBAN_REGISTRY = (
    "AD24 AE23 AL28 AT20 AZ28 BA20 BE16 BG22 BH22 BR29 BY28 CH21 CR22 CY28 CZ24 DE22 DK18 DO28 "
    "EE20 EG29 ES24 FI18 FO18 FR27 GB22 GE22 GI23 GL18 GR27 GT28 HR21 HU28 IE22 IL23 IQ23 IS26 "
    "IT27 JO30 KW30 KZ20 LB28 LC32 LI21 LT20 LU20 LV21 LY25 MC27 MD24 ME22 MK19 MR27 MT31 MU30 "
    "NL18 NO15 PK24 PL28 PS29 PT25 QA29 RO24 RS22 SA24 SC31 SE24 SI19 SK24 SM27 ST25 SV28 TL23 "
    "TN24 TR26 UA29 VA22 VG24 XK20"
)
_IBAN_LENGTHS = {
    _IBAN_REGISTRY[i : i + 2]: int(_IBAN_REGISTRY[i + 2 : i + 4])
    for i in range(0, len(_IBAN_REGISTRY), 5)
}
"""IBAN length by country (ISO 13616 registry): a candidate is checked at exactly that length."""


def _iban_number_ok(compact: str) -> bool:
    rearranged = compact[4:] + compact[:4]
    remainder = 0
    for char in rearranged:
        value = int(char, 36)
        remainder = (remainder * (100 if value > 9 else 10) + value) % 97
    return remainder == 1


def _iban_ok(match: str) -> bool:
    """The mod-97 check at the country's length, so text glued after the IBAN does not hide it."""
    length = _IBAN_LENGTHS.get(match[:2])
    compact = match.replace(" ", "")
    if length is None:  # a country not in the table: the whole candidate
        return 15 <= len(compact) <= 34 and _iban_number_ok(compact)
    return len(compact) >= length and _iban_number_ok(compact[:length])


def _phone_ok(match: str) -> bool:
    digits = sum(char.isdigit() for char in match)
    return 8 <= digits <= 15


def _key_ok(match: str) -> bool:
    """An ``sk-`` key has digits in it; hyphenated words (``sk-assessment-...``) do not."""
    return not match.startswith("sk-") or any(char.isdigit() for char in match)


_NON_DIGIT = re.compile(r"\D")
_SEPARATOR = re.compile(r"[ -]")


@dataclass(frozen=True, kw_only=True, slots=True)
class Detector:
    """A kind of value that is sensitive wherever it appears."""

    kind: str
    """Label in the mask (``email``, ``card``)."""
    pattern: re.Pattern[str]
    """Candidates; ``check`` decides."""
    check: Callable[[str], bool] | None = None
    """Confirms a candidate (Luhn for cards, mod 97 for IBANs) so ids and amounts are left alone."""


DETECTORS: tuple[Detector, ...] = (
    # Tokens first: a JWT or key may contain digit runs that other detectors would split.
    # Every pattern runs in linear time on any input (bench/masking.py): each either starts at a
    # literal, or can start only where a run of its own characters starts (a lookbehind excludes
    # starting inside one), and every repetition that can fail after a long scan is bounded.
    Detector(
        kind="bearer",
        pattern=re.compile(r"(?i)bearer[\s:=]+[A-Za-z0-9._~+/=-]{8,}"),
    ),
    Detector(
        kind="jwt",
        pattern=re.compile(
            r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"
        ),
    ),
    Detector(
        kind="api_key",
        pattern=re.compile(
            r"sk-[A-Za-z0-9_-]{16,}|(?:AKIA|ASIA)[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}"
            r"|xox[abpr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35}"
        ),
        check=_key_ok,
    ),
    Detector(
        kind="email",
        pattern=re.compile(
            r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
        ),
    ),
    Detector(
        kind="iban",
        pattern=re.compile(r"[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}"),
        check=_iban_ok,
    ),
    Detector(
        kind="card",
        pattern=re.compile(r"(?<!\d)\d(?:[ -]?\d){12,}"),
        check=_card_ok,
    ),
    Detector(
        kind="phone",
        pattern=re.compile(
            r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?|\d{1,4}[ .-])\d{3,5}[ .-]?\d{3,4}(?![\w])"
            r"|\+\d{8,15}(?!\d)"
        ),
        check=_phone_ok,
    ),
)
"""The built-in detectors, in the order they run."""

# A cheap pre-filter: text without any of these cannot match a detector.
_CANDIDATE = re.compile(
    r"@|\d(?:[ .()-]{0,2}\d){6}|[A-Z]{2}\d\d|(?i:bearer)|eyJ|sk-|AKIA|ASIA|gh[pousr]_|xox|AIza"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class InjectionRule:
    """Instruction-like text that has no business inside data."""

    name: str
    """The rule name put on the span (``ignore_instructions``)."""
    pattern: re.Pattern[str]


def _rule(name: str, pattern: str) -> InjectionRule:
    return InjectionRule(name=name, pattern=re.compile(pattern, re.IGNORECASE))


INJECTION_RULES: tuple[InjectionRule, ...] = (
    _rule(
        "ignore_instructions",
        r"\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+)?(?:of\s+)?(?:the\s+|your\s+)?"
        r"(?:previous|prior|above|earlier|preceding|system|original)?\s*"
        r"(?:instructions|prompts?|rules|guidelines|directions)",
    ),
    _rule(
        "system_notice",
        r"\b(?:system|admin(?:istrator)?|developer)\s*(?:notice|message|prompt|override|instruction)s?\b"
        r"|\[\s*system\s*\]|<\s*/?\s*system\s*>",
    ),
    _rule("role_override", r"\byou\s+are\s+now\b|\bact\s+as\s+(?:an?\s+)?(?:admin|system)"),
    _rule("new_instructions", r"\bnew\s+instructions?\s*:|\bdo\s+not\s+tell\s+the\s+user\b"),
    _rule(
        "tool_directive",
        r"\b(?:call|use|invoke|run)\s+(?:the\s+)?[a-z_]+_[a-z_]+\s+(?:tool|function)\b"
        r"|\brefund\s+\S+\s+in\s+full\b|\bskip\s+(?:the\s+)?verification\b",
    ),
)
"""The built-in injection rules, in the order they are tried."""


EXCERPT_CONTEXT = 60
"""Characters kept either side of a matched rule in ``guard.injection.excerpt``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class InjectionMatch:
    """Where a rule matched: the rule, the text it matched in, and the span of the match."""

    rule: str
    text: str
    start: int
    end: int

    def excerpt(self, context: int = EXCERPT_CONTEXT) -> str:
        """The match with up to ``context`` characters either side, ``…`` where text was cut."""
        lo, hi = max(self.start - context, 0), min(self.end + context, len(self.text))
        return ("…" if lo else "") + self.text[lo:hi] + ("…" if hi < len(self.text) else "")


def find_injection(
    texts: Iterable[str], rules: Iterable[InjectionRule] = INJECTION_RULES
) -> InjectionMatch | None:
    """The first rule that matches any of ``texts``, with where; None when all look like data."""
    rules = tuple(rules)
    for text in texts:
        for rule in rules:
            found = rule.pattern.search(text)
            if found:
                return InjectionMatch(
                    rule=rule.name, text=text, start=found.start(), end=found.end()
                )
    return None


def detect_injection(
    texts: Iterable[str], rules: Iterable[InjectionRule] = INJECTION_RULES
) -> str | None:
    """The name of the first rule that matches any of ``texts``; None when all look like plain data."""
    found = find_injection(texts, rules)
    return found.rule if found is not None else None


SCAN_LIMIT = 4096
"""Characters of one value the detectors scan (more when the length cap is larger): the rest is
replaced by its length and keyed hash, so the cost of masking is bounded on any input."""
_SCAN_MARGIN = 256
"""Characters scanned past the length cap: masking can shorten text, so a little more is shown."""
_BOUNDARY = re.compile(r"[\s,;]")
_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\([\"\\/bfnrt])")
_SIMPLE_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _last_boundary(head: str) -> int:
    """Where to cut ``head`` so no token (a word, a number with its separators) is split."""
    window = head[-_SCAN_MARGIN:]
    for index in range(len(window) - 1, -1, -1):
        if _BOUNDARY.match(window, index) and not _joins_digits(window, index):
            return len(head) - len(window) + index
    return max(len(head) - _SCAN_MARGIN, 0)  # one token longer than the margin: drop it whole


def _joins_digits(text: str, index: int) -> bool:
    """A space between two digits is inside a number (``4111 1111``)."""
    return 0 < index < len(text) - 1 and text[index - 1].isdigit() and text[index + 1].isdigit()


def _decode_escapes(text: str) -> str:
    """JSON string escapes decoded in text that did not parse (surrogate pairs joined)."""

    def decode(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return chr(int(match.group(1), 16))
        char = match.group(2)
        return _SIMPLE_ESCAPES.get(char, char)

    decoded = _ESCAPE.sub(decode, text)
    # pairs joined; a lone surrogate stays, for the span to make encodable and say so
    return decoded.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")


_sensitive_patterns: dict[frozenset[str], re.Pattern[str]] = {}


def _sensitive_pattern(names: frozenset[str]) -> re.Pattern[str]:
    """``"name":`` followed by a value (a string, maybe unterminated, or a bare token)."""
    pattern = _sensitive_patterns.get(names)
    if pattern is None:
        keys = "|".join(re.escape(name) for name in sorted(names))
        pattern = re.compile(r'("(?:' + keys + r')"\s*:\s*)(?:"(?:[^"\\]|\\.)*(?:"|\\?$)|[^,}\]]+)')
        if len(_sensitive_patterns) < 256:
            _sensitive_patterns[names] = pattern
    return pattern


class Masker:
    """Masks values before they become span attributes. Thread-safe; holds no per-call state.

    ``key`` is the deployment's secret: keep it out of the code, stable across restarts (so hashes
    correlate over time) and rotate it like any key.
    """

    def __init__(
        self,
        *,
        key: bytes,
        mode: MaskMode = MaskMode.REDACT,
        max_length: int = 1024,
        detectors: Iterable[Detector] = DETECTORS,
    ) -> None:
        if not key:
            raise ValueError("the masking key must not be empty")
        self._key = key
        self.mode = MaskMode(mode)
        self.max_length = max_length
        self._detectors = tuple(detectors)
        self._substitutions = tuple(
            (detector.pattern, self._substitute(detector)) for detector in self._detectors
        )
        self._principals: dict[str, str] = {}
        self._identifiers: dict[str, str] = {}
        self._scan_limit = max(SCAN_LIMIT, max_length + _SCAN_MARGIN)

    # hashing

    def keyed_hash(self, value: str, *, length: int = 12) -> str:
        """HMAC-SHA256 of ``value`` with the deployment key, as ``length`` hex characters."""
        digest = hmac.digest(self._key, value.encode("utf-8", "surrogatepass"), "sha256")
        return digest.hex()[:length]

    def principal(self, principal_id: str) -> str:
        """The pseudonym of a principal: always a keyed hash, whatever the mode."""
        cached = self._principals.get(principal_id)
        if cached is None:
            cached = "p_" + self.keyed_hash(principal_id)
            if len(self._principals) < 65_536:
                self._principals[principal_id] = cached
        return cached

    def identifier(self, value: str) -> str:
        """An identifier the host chose (a session id) as a span may show it: masked, capped, cached.

        Hosts sometimes build ids from what they know (``support-ann@example.com-3``).
        """
        cached = self._identifiers.get(value)
        if cached is None:
            cached = self.text(value)
            if len(self._identifiers) < 65_536:
                self._identifiers[value] = cached
        return cached

    def short_hash(self, value: str, prefix: str = "k_") -> str:
        """A short keyed hash for identifiers that must correlate but not be readable (keys)."""
        return prefix + self.keyed_hash(value, length=8)

    def _replacement(self, kind: str, value: str) -> str:
        if self.mode is MaskMode.HASH:
            return f"[{kind}:h_{self.keyed_hash(value)}]"
        return f"[REDACTED:{kind}]"

    # text

    def mask_text(self, text: str) -> str:
        """``text`` with every detected value replaced; unbounded input is cut before scanning."""
        if len(text) > self._scan_limit:
            boundary = _last_boundary(text[: self._scan_limit])
            rest = text[boundary:]
            text = text[:boundary] + f"…[+{len(rest)} chars h_{self.keyed_hash(rest)}]"
        if not _CANDIDATE.search(text):
            return text
        for pattern, replace in self._substitutions:
            text = pattern.sub(replace, text)
        return text

    def _substitute(self, detector: Detector) -> Callable[[re.Match[str]], str]:
        def replace(match: re.Match[str]) -> str:
            value = match.group(0)
            if detector.check is not None and not detector.check(value):
                return value
            return self._replacement(detector.kind, value)

        return replace

    def cap(self, text: str) -> str:
        """``text`` cut to ``max_length`` characters, marked when cut."""
        if len(text) <= self.max_length:
            return text
        return text[: max(self.max_length - 1, 0)] + "…"

    def text(self, text: str) -> str:
        """Masked, then capped: what free text (messages, raw arguments) may look like on a span.

        Only what can be shown is scanned: text longer than the cap plus a margin is cut first at a
        token boundary (never inside a number or a word, so no partial secret is left to slip past
        the detectors) and the rest is replaced by its length. That bounds the work per value.
        """
        return self.cap(self.mask_text(self._scan_window(text)))

    def _scan_window(self, text: str) -> str:
        limit = self.max_length + _SCAN_MARGIN
        if len(text) <= limit:
            return text
        head = text[:limit]
        boundary = _last_boundary(head)
        return head[:boundary] + f"…[+{len(text) - boundary} chars]"

    # structured values

    def mask_value(self, value: Any, sensitive: frozenset[str] | set[str] = frozenset()) -> Any:
        """A JSON-like value with sensitive fields masked whole and detected values masked inside."""
        return self._mask_value(value, sensitive, [self.max_length + _SCAN_MARGIN])

    def _mask_value(
        self, value: Any, sensitive: frozenset[str] | set[str], budget: list[int]
    ) -> Any:
        """``budget`` is what is left to show: past it, strings are cut (the rendering is capped)."""
        if isinstance(value, str):
            if len(value) > budget[0]:
                value = (
                    value[: _last_boundary(value[: max(budget[0], 0)])] + f"…[+{len(value)} chars]"
                )
            budget[0] -= len(value) + 3
            return self.mask_text(value)
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, float):
            if value.is_integer() and 1e12 <= abs(value) < 1e19:
                digits = str(int(abs(value)))  # a card sent as 4111111111111111.0
                if 13 <= len(digits) <= 19 and luhn_valid(digits):
                    return self._replacement("card", digits)
            return value
        if isinstance(value, int):
            digits = str(abs(value))
            if 13 <= len(digits) <= 19 and luhn_valid(digits):
                return self._replacement("card", digits)
            return value
        if isinstance(value, Mapping):
            masked: dict[str, Any] = {}
            for key, item in value.items():
                name = self.mask_text(str(key))
                budget[0] -= len(name) + 4
                if key in sensitive:
                    masked[name] = self._sensitive(item)
                else:
                    masked[name] = self._mask_value(item, sensitive, budget)
            return masked
        if isinstance(value, list | tuple):
            return [self._mask_value(item, sensitive, budget) for item in value]
        return self._mask_value(str(value), sensitive, budget)

    def _sensitive(self, value: Any) -> str:
        if self.mode is MaskMode.HASH:
            rendered = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
            return "h_" + self.keyed_hash(rendered)
        return "[REDACTED]"

    def needs_scan(self, text: str) -> bool:
        """False when no detector can match anywhere in ``text`` (a cheap pre-check)."""
        return _CANDIDATE.search(text) is not None

    def raw_json(self, raw: str, sensitive: frozenset[str] | set[str] = frozenset()) -> str:
        """Arguments as they arrived (maybe not JSON): parsed and masked when they parse, else text.

        Text that is not JSON is still read as JSON where it can be: ``\\u`` escapes are decoded
        before the detectors run (``"\\u0034\\u0031..."`` is a card too), and the values of
        schema-sensitive fields are masked whole wherever a ``"field":`` appears.
        """
        if sensitive:  # JSON that parses: its sensitive fields by name
            try:
                return self.json(json.loads(raw), sensitive)
            except (ValueError, RecursionError):
                pass
        text = self._scan_window(raw)
        if "\\" in text:
            text = _decode_escapes(text)
        if sensitive:
            text = _sensitive_pattern(frozenset(sensitive)).sub(
                lambda match: match.group(1) + '"[REDACTED]"', text
            )
        return self.cap(self.mask_text(text))

    def json(self, value: Any, sensitive: frozenset[str] | set[str] = frozenset()) -> str:
        """``mask_value`` rendered as compact JSON and capped."""
        rendered = json.dumps(
            self.mask_value(value, sensitive),
            separators=(",", ":"),
            ensure_ascii=False,
            default=str,
        )
        return self.cap(rendered)

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
    "INJECTION_RULES",
    "Detector",
    "InjectionRule",
    "MaskMode",
    "Masker",
    "detect_injection",
    "luhn_valid",
]


class MaskMode(StrEnum):
    """How a sensitive value is replaced."""

    REDACT = "redact"
    """``[REDACTED:<kind>]``: nothing of the value survives."""
    HASH = "hash"
    """``[<kind>:h_<hex>]``: a keyed hash, equal values give equal hashes."""


def luhn_valid(digits: str) -> bool:
    """True when the digit string passes the Luhn checksum (card numbers)."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _card_ok(match: str) -> bool:
    digits = re.sub(r"\D", "", match)
    return 13 <= len(digits) <= 19 and luhn_valid(digits)


def _iban_ok(match: str) -> bool:
    compact = match.replace(" ", "").upper()
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    number = "".join(str(int(char, 36)) for char in rearranged)
    return int(number) % 97 == 1


def _phone_ok(match: str) -> bool:
    digits = sum(char.isdigit() for char in match)
    return 8 <= digits <= 15


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
    Detector(
        kind="bearer",
        pattern=re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}"),
    ),
    Detector(
        kind="jwt",
        pattern=re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"),
    ),
    Detector(
        kind="api_key",
        pattern=re.compile(
            r"\b(?:sk-[A-Za-z0-9_-]{16,}|(?:AKIA|ASIA)[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}"
            r"|xox[abpr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35})"
        ),
    ),
    Detector(
        kind="email",
        pattern=re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"),
    ),
    Detector(
        kind="iban",
        pattern=re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b"),
        check=_iban_ok,
    ),
    Detector(
        kind="card",
        pattern=re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])"),
        check=_card_ok,
    ),
    Detector(
        kind="phone",
        pattern=re.compile(
            r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?|\d{1,4}[ .-])\d{3,5}[ .-]?\d{3,4}(?![\w])"
            r"|\+\d{8,15}\b"
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


def detect_injection(texts: Iterable[str], rules: Iterable[InjectionRule] = INJECTION_RULES) -> str | None:
    """The name of the first rule that matches any of ``texts``; None when all look like plain data."""
    rules = tuple(rules)
    for text in texts:
        for rule in rules:
            if rule.pattern.search(text):
                return rule.name
    return None


_HARD_CAP = 65_536


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
        if len(text) > _HARD_CAP:
            return f"[omitted: {len(text)} chars]"
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
        """Masked and capped: what free text (messages, raw arguments) may look like on a span."""
        return self.cap(self.mask_text(text))

    # structured values

    def mask_value(self, value: Any, sensitive: frozenset[str] | set[str] = frozenset()) -> Any:
        """A JSON-like value with sensitive fields masked whole and detected values masked inside."""
        if isinstance(value, str):
            return self.mask_text(value)
        if isinstance(value, bool) or value is None or isinstance(value, float):
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
                if key in sensitive:
                    masked[name] = self._sensitive(item)
                else:
                    masked[name] = self.mask_value(item, sensitive)
            return masked
        if isinstance(value, list | tuple):
            return [self.mask_value(item, sensitive) for item in value]
        return self.mask_text(str(value))

    def _sensitive(self, value: Any) -> str:
        if self.mode is MaskMode.HASH:
            rendered = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
            return "h_" + self.keyed_hash(rendered)
        return "[REDACTED]"

    def needs_scan(self, text: str) -> bool:
        """False when no detector can match anywhere in ``text`` (a cheap pre-check)."""
        return _CANDIDATE.search(text) is not None

    def raw_json(self, raw: str, sensitive: frozenset[str] | set[str] = frozenset()) -> str:
        """Arguments as they arrived (maybe not JSON): parsed and masked when they parse, else text."""
        if sensitive:  # text that is not JSON: the field names still say where secrets are
            try:
                return self.json(json.loads(raw), sensitive)
            except ValueError:
                pass
        return self.text(raw)

    def json(self, value: Any, sensitive: frozenset[str] | set[str] = frozenset()) -> str:
        """``mask_value`` rendered as compact JSON and capped."""
        rendered = json.dumps(
            self.mask_value(value, sensitive), separators=(",", ":"), ensure_ascii=False, default=str
        )
        return self.cap(rendered)

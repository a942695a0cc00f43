"""Masking gaps, attacked by class: every way a secret reached the trail or the log unmasked."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field

from guard import Effect, Guard, Policy, Risk, RolePolicy, ToolContext, tool
from guard.session import Principal
from guard.testing import ManualClock
from telemetry import Masker, attributes, configure, luhn_valid

from .conftest import KEY, make_call, read_spans

E2E = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
MASKER = Masker(key=KEY)


def with_check_digit(body: str) -> str:
    for digit in "0123456789":
        if luhn_valid(body + digit):
            return body + digit
    raise AssertionError  # pragma: no cover - one of ten digits always fits


CARDS = st.builds(
    lambda first, rest: with_check_digit(first + rest),
    st.sampled_from("3456"),
    st.text("0123456789", min_size=14, max_size=14),
)  # 16-digit Luhn-valid numbers
SEPARATED = st.builds(
    lambda card, sep: sep.join(card[i : i + 4] for i in range(0, 16, 4)),
    CARDS,
    st.sampled_from(["", " ", "-"]),
)
GLUE = st.text("abcxyzABC_0-", min_size=1, max_size=6)


def digits_of(card: str) -> str:
    return re.sub(r"\D", "", card)


def leaks(card: str, text: str) -> bool:
    """Does ``text`` still hold 12 or more of the card's digits in a row?"""
    digits = digits_of(card)
    flat = re.sub(r"[ -]", "", text)
    return any(digits[i : i + 12] in flat for i in range(len(digits) - 11))


class TestCardsAsNumbers:
    """Card numbers sent as JSON numbers, integer or float, are masked."""

    @SETTINGS
    @given(card=CARDS, as_float=st.booleans())
    def test_json_number(self, card: str, as_float: bool) -> None:
        """4111111111111111 and 4111111111111111.0 both become [REDACTED:card]."""
        number: Any = float(card) if as_float else int(card)
        masked = MASKER.json({"amount": number})
        assert "REDACTED:card" in masked, masked
        assert not leaks(card, masked)


class TestUnparsableJson:
    """Arguments that are not JSON: sensitive fields by name, escaped values, truncations."""

    @SETTINGS
    @given(
        value=st.text(st.characters(blacklist_categories=("Cs",)), min_size=6, max_size=40),
        cut=st.integers(0, 60),
        bare=st.booleans(),
    )
    def test_sensitive_field_value_never_shows(self, value: str, cut: int, bare: bool) -> None:
        """A card_number field's value is masked whole, however the JSON around it is broken."""
        rendered = value.replace('"', "").replace("\\", "")[:30] + "Q7Z"  # a marker to look for
        token = rendered.replace(" ", "").replace(",", "").replace("}", "").replace("]", "")
        if bare:
            raw = '{"order_id": "ORD-1", "card_number": ' + token + ', "note": "x"'
        else:
            raw = '{"order_id": "ORD-1", "card_number": "' + rendered + '", "note": "x'
        raw = raw[: len(raw) - cut % 10]
        masked = MASKER.raw_json(raw, frozenset({"card_number"}))
        assert "Q7Z" not in masked, (raw, masked)

    @SETTINGS
    @given(
        card=CARDS,
        broken=st.sampled_from(['{"n": "%s"', '{"n": "%s", ', '["%s" 1]', '{"n": "%s"}}']),
    )
    def test_escaped_card_in_invalid_json(self, card: str, broken: str) -> None:
        """A card written as \\u escapes inside JSON that does not parse is still a card."""
        escaped = "".join(f"\\u{ord(char):04x}" for char in card)
        masked = MASKER.raw_json(broken % escaped)
        assert "REDACTED:card" in masked
        assert not leaks(card, masked)


class TestGlued:
    """Secrets glued to words, dashes and underscores are found."""

    @SETTINGS
    @given(
        card=SEPARATED,
        before=st.sampled_from(["ref-", "id-", "-", "x_", "card", "#"]),
        after=st.sampled_from(["", "-x", "_", "ab", "."]),
    )
    def test_card_next_to_a_dash_or_word(self, card: str, before: str, after: str) -> None:
        """`ref-4111...` and friends are masked."""
        masked = MASKER.mask_text(f"see {before}{card}{after} please")
        assert not leaks(card, masked), masked

    @SETTINGS
    @given(glue=GLUE, kind=st.sampled_from(["aws", "sk", "iban", "jwt"]))
    def test_keys_and_ibans_after_a_word_character(self, glue: str, kind: str) -> None:
        """Keys and IBANs with a word character (or more) before them are masked."""
        secret = {
            "aws": "AKIAIOSFODNN7EXAMPLE",
            "sk": "sk-proj-abcdefghijklmnop1234",
            "iban": "GB82WEST12345698765432",
            "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w",
        }[kind]
        if kind == "jwt":
            glue = glue.rstrip("abcxyzABC_0-") + " "  # a JWT is a token of its own
        masked = MASKER.mask_text(f"x {glue}{secret}z tail")
        assert secret[4:] not in masked, masked


class TestSchemaEcho:
    """The `got` echo of schema errors: masked first, cut after; sensitive fields never echoed."""

    @staticmethod
    def guard_with(observer: Any = None) -> Guard:
        class CardArgs(BaseModel):
            model_config = ConfigDict(extra="forbid", strict=True)
            card_number: str = Field(max_length=8, json_schema_extra={"sensitive": True})
            note: str = Field(default="", max_length=5)

        @tool(arguments=CardArgs, effect=Effect.READ, risk=Risk.LOW)
        def check_card(args: CardArgs, ctx: ToolContext) -> dict[str, str]:
            """Check a card."""
            return {"ok": "yes"}

        policy = Policy(roles={"u": RolePolicy(tools=frozenset({"check_card"}))}, rate_limit=None)
        return Guard(tools=[check_card], policy=policy, clock=ManualClock(), observer=observer)

    @E2E
    @given(
        card=SEPARATED,
        words=st.lists(st.sampled_from(["my", "card", "is", "ok", "thanks"]), max_size=8),
    )
    def test_no_card_digits_in_the_message_or_the_trail(
        self, tmp_path_factory: pytest.TempPathFactory, card: str, words: list[str]
    ) -> None:
        """A card in an invalid field reaches neither the message's echo nor the span's text."""
        directory = tmp_path_factory.mktemp("echo")
        handle = configure(
            trail_dir=directory, masking_key=KEY, metrics=False, capture_content=True
        )
        guard = self.guard_with(handle.observer)
        note = " ".join([*words[:3], card, *words[3:]])
        result = guard.session("s", Principal(id="U", role="u")).execute(
            "check_card", json.dumps({"card_number": card, "note": note})
        )
        handle.shutdown()
        assert result.code == "INVALID_ARGUMENTS"
        assert "not echoed" in result.message  # card_number: sensitive, never echoed
        text = json.dumps([span["attrs"] for span in read_spans(directory)], ensure_ascii=False)
        assert "REDACTED:card" in text
        assert not leaks(card, text)

    def test_sensitive_field_not_echoed(self) -> None:
        """The sensitive field's problem says it was not echoed."""
        result = (
            self.guard_with()
            .session("s", Principal(id="U", role="u"))
            .execute("check_card", json.dumps({"card_number": "1234567890"}))
        )
        assert "not echoed" in result.message and "1234567890" not in result.message


class TestSessionId:
    """The session id is masked like any text a host may have built from what it knows."""

    @E2E
    @given(user=st.from_regex(r"[a-z]{3,8}", fullmatch=True))
    def test_email_in_session_id(self, tmp_path_factory: pytest.TempPathFactory, user: str) -> None:
        """An e-mail inside the conversation id does not reach the span."""
        directory = tmp_path_factory.mktemp("session")
        handle = configure(trail_dir=directory, masking_key=KEY, metrics=False)
        handle.observer.call_ended(*make_call(session_id=f"support.{user}@example.com-3"))
        handle.shutdown()
        (call,) = [s for s in read_spans(directory) if s["name"].startswith("execute_tool")]
        assert call["attrs"][attributes.GEN_AI_CONVERSATION_ID] == "[REDACTED:email]-3"


class TestLog:
    """Handler exceptions and validation errors reach the Python log masked."""

    def test_handler_exception_and_result_validation(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A tool raising with a card and a result model rejecting an e-mail: both masked in the log."""

        class Args(BaseModel):
            model_config = ConfigDict(extra="forbid")
            order_id: str

        class Out(BaseModel):
            model_config = ConfigDict(extra="forbid")
            count: int

        @tool(arguments=Args, effect=Effect.READ, risk=Risk.LOW)
        def explode(args: Args, ctx: ToolContext) -> dict[str, str]:
            """Fail with data in the message."""
            raise RuntimeError(f"card 4111 1111 1111 1111 declined for {args.order_id}")

        @tool(arguments=Args, effect=Effect.READ, risk=Risk.LOW, result_model=Out)
        def bad_result(args: Args, ctx: ToolContext) -> dict[str, str]:
            """Return what the result model rejects."""
            return {"count": "maria.silva@example.com"}

        policy = Policy(
            roles={"u": RolePolicy(tools=frozenset({"explode", "bad_result"}))}, rate_limit=None
        )
        handle = configure(trail_dir=tmp_path / "t", masking_key=KEY, metrics=False)
        guard = Guard(
            tools=[explode, bad_result],
            policy=policy,
            clock=ManualClock(),
            observer=handle.observer,
        )
        session = guard.session("s", Principal(id="U", role="u"))
        with caplog.at_level(logging.INFO):
            session.execute("explode", '{"order_id": "ORD-1"}')
            session.execute("bad_result", '{"order_id": "ORD-1"}')
        handle.shutdown()
        formatter = logging.Formatter("%(message)s")
        logged = "\n".join(
            formatter.format(record) for record in caplog.records if record.name == "guard"
        )
        assert "raised" in logged and "RuntimeError" in logged
        assert "[REDACTED:card]" in logged and "[REDACTED:email]" in logged
        assert "4111" not in logged and "maria.silva" not in logged


class TestLinearTime:
    """Adversarial inputs cost time linear in their length (main took 3-4 s on 64 KiB emails).

    Measured as a ratio in the same run, not against a clock: a quadruple-length input must not
    cost more than 10x (linear work gives about 4x, quadratic 16x), each the fastest of 5 tries
    so a busy machine's pauses do not count.
    """

    @pytest.mark.parametrize(
        "shape",
        [
            lambda n: "a" * (n - 1) + "@",
            lambda n: "eyJ-" * (n // 4),
            lambda n: "1 " * (n // 2),
            lambda n: "GB82 " * (n // 5),
            lambda n: "sk-" * (n // 3),
            lambda n: "x@" + "a." * (n // 2 - 1),
            lambda n: "bearer" + " " * (n - 7) + "x",
        ],
        ids=["email", "jwt", "digits", "iban", "key", "domain", "bearer"],
    )
    def test_linear(self, shape: Callable[[int], str]) -> None:
        """Every entry point a span value takes scales linearly on each hostile shape."""
        import time

        def fastest(function: Callable[[str], object], value: str) -> float:
            times = []
            for _ in range(5):
                start = time.perf_counter()
                function(value)
                times.append(time.perf_counter() - start)
            return min(times)

        entry_points: list[Callable[[str], object]] = [
            MASKER.text,
            MASKER.mask_text,
            MASKER.raw_json,
            lambda v: MASKER.json({"v": v}),
        ]
        for function in entry_points:
            small, large = fastest(function, shape(16_384)), fastest(function, shape(65_536))
            assert large < 10 * max(small, 1e-4), (function, small, large)


class TestLogFilterLifetime:
    """The masking filter lives as long as the telemetry that installed it."""

    def test_installed_then_removed(self, tmp_path: Path) -> None:
        """configure() puts one filter on the guard logger; shutdown() takes it off again."""
        from telemetry.logfilter import MaskingFilter

        def ours() -> list[logging.Filter]:
            return [f for f in logging.getLogger("guard").filters if isinstance(f, MaskingFilter)]

        first = configure(trail=False, masking_key=KEY, metrics=False)
        second = configure(trail=False, masking_key=KEY, metrics=False)
        assert len(ours()) == 1
        first.shutdown()
        assert len(ours()) == 1  # the second one's stays
        second.shutdown()
        assert ours() == []
        untouched = configure(trail=False, masking_key=KEY, metrics=False, mask_logs=False)
        assert ours() == []
        untouched.shutdown()


class TestCardAmongDigitGroups:
    """A card beside other digit groups (a phone number, an order number) is masked whole."""

    CARD = "4539 1488 0343 6467"

    @settings(max_examples=200, deadline=None)
    @given(
        before=st.lists(st.from_regex(r"\A[0-3]{1,4}\Z"), max_size=4),
        after=st.lists(st.from_regex(r"\A[0-3]{1,4}\Z"), max_size=4),
        plus=st.booleans(),
    )
    def test_no_group_of_the_card_is_left(
        self, before: list[str], after: list[str], plus: bool
    ) -> None:
        """Whatever digit groups stand around it, none of the card's groups survives masking."""
        text = ("+" if plus else "") + " ".join([*before, self.CARD, *after])
        masked = Masker(key=KEY).text(text)
        for group in ("4539", "1488", "6467"):  # groups of digits 0-3 only cannot spell these
            assert group not in masked, masked

    def test_a_phone_number_then_a_card(self) -> None:
        """The case hypothesis found: `+1 415 555 0100 4111 1111 1111 1111` left `1111 1111`."""
        masked = Masker(key=KEY).text("+1 415 555 0100 4111 1111 1111 1111")
        assert "1111" not in masked and "REDACTED" in masked

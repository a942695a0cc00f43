"""The config file: a complete example parses; a malformed one is refused with its line and reason."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from callgate.gateway import ConfigError, parse_config
from guard import Effect, Risk

ROOT = Path(__file__).resolve().parents[2]

MINIMAL = """\
upstreams:
  shop:
    command: [python, server.py]
principals:
  bot:
    tools: ["*"]
serve:
  stdio: {principal: bot}
"""


def refusal(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, Path("/etc/callgate/gateway.yaml"))
    return str(caught.value)


class TestValid:
    """What a correct file yields."""

    def test_the_documented_example_parses(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """docs/gateway.md's complete example is a valid config (the docs cannot rot)."""
        monkeypatch.setenv("GATEWAY_TOKEN_SUPPORT", "s" * 32)
        monkeypatch.setenv("GATEWAY_TOKEN_AUDIT", "a" * 32)
        monkeypatch.setenv("CRM_TOKEN", "crm-secret")
        text = (ROOT / "docs" / "gateway.md").read_text()
        example = re.search(r"```yaml\n(.*?)```", text, flags=re.DOTALL)
        assert example is not None
        config = parse_config(example.group(1), ROOT / "gateway.yaml")
        shop = next(u for u in config.upstreams if u.name == "shop")
        refund = shop.tools["refund"]
        assert refund.effect is Effect.WRITE and refund.risk is Risk.HIGH
        assert config.stdio_principal in config.principals
        assert {t.principal for t in config.http.tokens} <= set(config.principals)
        crm = next(u for u in config.upstreams if u.name == "crm")
        assert crm.headers["Authorization"] == "Bearer crm-secret"

    def test_defaults(self) -> None:
        """A minimal file: loopback HTTP, memory store, the guard's confirmation at high risk."""
        config = parse_config(MINIMAL)
        assert config.http.host == "127.0.0.1" and config.store is None
        assert config.policy.confirm_at is Risk.HIGH
        assert config.upstreams[0].exposed("get_order") == "get_order"


class TestRefused:
    """Each refusal names the file, the line, the key path and the reason."""

    def test_a_wrong_type_names_its_line(self) -> None:
        """timeout: soon on line 4."""
        text = MINIMAL.replace(
            "    command: [python, server.py]\n",
            "    command: [python, server.py]\n    timeout: soon\n",
        )
        assert refusal(text).startswith(
            "/etc/callgate/gateway.yaml:4: upstreams.shop.timeout: expected"
        )

    def test_an_unknown_key_is_refused_not_ignored(self) -> None:
        """A misspelt key would be a silently dropped rule."""
        text = MINIMAL + "policy:\n  confrim_at: high\n"
        message = refusal(text)
        assert ":10: policy.confrim_at: unknown key" in message and "confirm_at" in message

    def test_bad_choices_and_references(self) -> None:
        """A risk outside low/medium/high, a stdio principal that does not exist, duplicate keys."""
        risky = MINIMAL.replace(
            "    command: [python, server.py]\n",
            "    command: [python, server.py]\n    tools:\n      refund: {risk: huge}\n",
        )
        assert ":5: upstreams.shop.tools.refund.risk: expected one of low, medium, high" in refusal(
            risky
        )
        assert ":8: serve.stdio.principal: no principal named 'nobody'" in refusal(
            MINIMAL.replace("principal: bot}", "principal: nobody}")
        )
        assert "duplicate key 'bot'" in refusal(
            MINIMAL.replace("principals:\n", "principals:\n  bot: {tools: []}\n")
        )

    def test_broken_yaml_and_missing_sections(self) -> None:
        """Invalid YAML names its line; an upstream needs exactly one of command or url."""
        assert refusal("upstreams: [unclosed\n").startswith(
            "/etc/callgate/gateway.yaml:2: not valid YAML"
        )
        both = MINIMAL.replace(
            "    command: [python, server.py]\n", "    command: [x]\n    url: http://h/mcp\n"
        )
        assert "exactly one of command" in refusal(both)
        assert "at least one upstream" in refusal("principals: {bot: {tools: []}}\n")

    def test_http_tokens_must_be_real(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """An unset token variable is refused when HTTP serves (stdio starts); a short token at once."""
        monkeypatch.delenv("NOPE", raising=False)
        unset = MINIMAL + "  http:\n    tokens:\n      - {token_env: NOPE, principal: bot}\n"
        config = parse_config(unset)
        assert config.stdio_principal == "bot"
        with pytest.raises(ConfigError, match=r"tokens\[0\]\.token_env: environment variable NOPE"):
            config.http.bearer_tokens()
        short = MINIMAL + "  http:\n    tokens:\n      - {token: abc, principal: bot}\n"
        assert "at least 16 characters" in refusal(short) and "abc" not in refusal(short)

"""The config file: a complete example parses; a malformed one is refused with its line and reason."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from callgate.gateway import ConfigError, GatewayConfig, parse_config
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


def _keys(node: object) -> set[str]:
    """Every mapping key anywhere in a parsed YAML value."""
    if isinstance(node, dict):
        return set(node) | {k for value in node.values() for k in _keys(value)}
    if isinstance(node, list):
        return {k for value in node for k in _keys(value)}
    return set()


def _fields(model: type[BaseModel], seen: set[type[BaseModel]]) -> set[str]:
    """Every key the config models read, by the name the file uses (nested models included)."""
    if model in seen:
        return set()
    seen.add(model)
    names: set[str] = set()
    for name, info in model.model_fields.items():
        if name != "name":  # the key of its parent mapping, not a key of its own
            names.add(info.alias or name)
        stack: list[object] = [info.annotation]
        while stack:
            kind = stack.pop()
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                names |= _fields(kind, seen)
            stack.extend(getattr(kind, "__args__", ()))
    return names


class TestDocumented:
    """docs/gateway.md's complete example names every key the models read, and no other."""

    def test_every_key_is_in_the_documented_example(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A key added to a model without the docs (or documented but unread) fails here."""
        monkeypatch.setenv("CRM_TOKEN", "crm-secret")
        text = (ROOT / "docs" / "gateway.md").read_text()
        example = re.search(r"```yaml\n(.*?)```", text, flags=re.DOTALL)
        assert example is not None
        documented = _keys(yaml.safe_load(example.group(1)))
        read = _fields(GatewayConfig, set())
        assert read - documented == set()
        parse_config(example.group(1), ROOT / "gateway.yaml")  # and nothing documented is unread


NUMERIC = [
    ("policy", "confirmation_ttl"),
    ("policy", "elicitation_timeout"),
    ("policy", "validation_cooldown"),
    ("upstreams.shop", "timeout"),
    ("upstreams.shop", "connect_timeout"),
    ("upstreams.shop.tools.refund", "timeout"),
    ("upstreams.shop.tools.refund.rate_limit", "seconds"),
    ("policy.rate_limit", "seconds"),
]


def _with(section: str, key: str, value: str) -> str:
    """MINIMAL with ``section.key: value`` added (sections given as dotted paths)."""
    parts = section.split(".")
    tree: dict[str, object] = yaml.safe_load(MINIMAL)
    node = tree
    for part in parts:
        node = node.setdefault(part, {})  # type: ignore[assignment]
    if section.endswith("rate_limit"):
        node.update({"calls": 1})
    node[key] = "@VALUE@"
    return yaml.safe_dump(tree).replace("'@VALUE@'", value)


class TestHostileValues:
    """NaN, infinities, duplicate tokens and unset variables are refused, naming the key."""

    @pytest.mark.parametrize(("section", "key"), NUMERIC)
    @pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "-1", "0"])
    def test_every_duration_refuses_nan_infinity_and_non_positive(
        self, section: str, key: str, value: str
    ) -> None:
        """confirmation_ttl: .nan would expire every approval at once; each such key says so."""
        message = refusal(_with(section, key, value))
        assert f"{section}.{key}: " in message

    def test_duplicate_tokens_are_refused_without_echoing_them(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Two entries with one token (literal, or two variables holding it): refused by index."""
        token = "t" * 20
        literal = MINIMAL + (
            "  http:\n    tokens:\n"
            f"      - {{token: {token}, principal: bot}}\n"
            f"      - {{token: {token}, principal: bot}}\n"
        )
        assert "two entries carry the same token" in refusal(literal)
        assert token not in refusal(literal)
        monkeypatch.setenv("ONE", token)
        monkeypatch.setenv("TWO", token)
        variables = MINIMAL + (
            "  http:\n    tokens:\n"
            "      - {token_env: ONE, principal: bot}\n"
            "      - {token_env: TWO, principal: bot}\n"
        )
        with pytest.raises(ConfigError, match=r"tokens\[1\]: the same token"):
            parse_config(variables).http.bearer_tokens()

    def test_an_unset_variable_in_a_header_is_refused(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """${CRM_TOKEN} unset would send "Bearer " to the upstream: refused, naming the header."""
        monkeypatch.delenv("CRM_TOKEN", raising=False)
        text = MINIMAL.replace(
            "    command: [python, server.py]\n",
            "    command: [python, server.py]\n    headers: {Authorization: 'Bearer ${CRM_TOKEN}'}\n",
        )
        assert (
            ":4: upstreams.shop.headers.Authorization: environment variable CRM_TOKEN"
            in refusal(text)
        )

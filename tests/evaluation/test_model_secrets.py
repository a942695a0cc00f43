"""The evaluator's credentials go only to --base-url's origin, and never into output or DuckDB."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import duckdb
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from callgate.cli import main
from callgate.evaluation import ChatModel, ModelError
from callgate.evaluation.redact import redact_url, same_origin, scrub, url_secrets

from .cases import call, write
from .fake_openai import FakeOpenAI, serve

KEY = "sk-live-0123456789abcdef"
MESSAGES = [{"role": "user", "content": "Where is my order ORD-1001?"}]


@pytest.fixture(scope="class")
def api() -> Iterator[FakeOpenAI]:
    """The endpoint --base-url names (it answers with the redirect each test sets)."""
    with serve(FakeOpenAI(script={})) as fake:
        yield fake


@pytest.fixture(scope="class")
def elsewhere() -> Iterator[FakeOpenAI]:
    """A second server on another port: any request it gets went to another origin."""
    with serve(FakeOpenAI(script={})) as fake:
        yield fake


def origin(fake: FakeOpenAI) -> str:
    return fake.url.removesuffix("/v1")


def with_userinfo(url: str, userinfo: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{userinfo}@{rest}"


def ask(base_url: str, api_key: str | None) -> str:
    """The ModelError text a conversation ends with (the servers here never complete)."""
    model = ChatModel(model="m", base_url=base_url, api_key=api_key, timeout=10)
    with pytest.raises(ModelError) as caught:
        model.converse(MESSAGES, [], lambda name, arguments: pytest.fail("no call expected"))
    return str(caught.value)


class TestRedirects:
    """A redirect to another origin, or one that would drop the POST, is not followed."""

    @settings(max_examples=40, deadline=None)
    @given(
        code=st.sampled_from([301, 302, 303, 307, 308]),
        target=st.sampled_from(["other port", "other host name", "other scheme"]),
        credential=st.sampled_from(["api key", "userinfo"]),
    )
    def test_credentials_never_reach_another_origin(
        self,
        api: FakeOpenAI,
        elsewhere: FakeOpenAI,
        code: int,
        target: str,
        credential: str,
    ) -> None:
        """Any 30x to another origin: it gets no request; the error names the redirect, no key."""
        api.requests.clear()
        elsewhere.requests.clear()
        port = api.url.split(":")[2].split("/")[0]
        api.redirect = (
            code,
            {
                "other port": f"{origin(elsewhere)}/followed",
                "other host name": f"http://localhost:{port}/followed",
                "other scheme": f"https://127.0.0.1:{port}/followed",
            }[target],
        )
        base_url = api.url if credential == "api key" else with_userinfo(api.url, "bob:" + KEY)
        message = ask(base_url, KEY if credential == "api key" else None)
        assert elsewhere.requests == []
        assert [r["path"] for r in api.requests] == ["/v1/chat/completions"]
        assert api.requests[0]["auth"] is not None  # the one request that went: to the base URL
        assert f"redirected (HTTP {code})" in message and "not followed" in message
        assert KEY not in message

    def test_the_standard_opener_would_have_leaked(
        self, api: FakeOpenAI, elsewhere: FakeOpenAI
    ) -> None:
        """The control: urllib's default redirect handling sends the key to the other server."""
        elsewhere.requests.clear()
        api.redirect = (302, f"{origin(elsewhere)}/followed")
        request = urllib.request.Request(
            f"{api.url}/chat/completions",
            data=b"{}",
            headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)
        caught.value.close()
        assert [r["auth"] for r in elsewhere.requests] == [f"Bearer {KEY}"]

    def test_same_origin_307_is_followed_with_the_post(self, api: FakeOpenAI) -> None:
        """A redirect on the same origin that keeps the method carries the key and the body."""
        api.requests.clear()
        api.redirect = (307, f"{origin(api)}/followed")
        model = ChatModel(model="m", base_url=api.url, api_key=KEY, timeout=10)
        assert model.converse(MESSAGES, [], lambda name, arguments: pytest.fail()) == []
        assert [(r["method"], r["path"], r["auth"]) for r in api.requests] == [
            ("POST", "/v1/chat/completions", f"Bearer {KEY}"),
            ("POST", "/followed", f"Bearer {KEY}"),
        ]
        assert api.requests[1]["body"]["messages"] == MESSAGES

    def test_same_origin_302_is_not_followed(self, api: FakeOpenAI) -> None:
        """A 302 would turn the POST into a body-less GET: an error, not a silent empty answer."""
        api.requests.clear()
        api.redirect = (302, f"{origin(api)}/followed")
        assert "redirected (HTTP 302)" in ask(api.url, KEY)
        assert [r["method"] for r in api.requests] == ["POST"]


class TestCredentialsInTheURL:
    """Userinfo and key-like parameters of --base-url are used, and never shown."""

    def test_userinfo_is_basic_auth_and_the_query_stays(self) -> None:
        """user:pass@ is sent as Basic, ?api-key= reaches the endpoint; the error shows neither."""
        with serve(FakeOpenAI(script={}, fail_with=500)) as fake:
            base = with_userinfo(fake.url, "alice:pa%3Ass") + "?api-version=1&api-key=TOPSECRET"
            message = ask(base, None)
            request = fake.requests[0]
        assert request["path"] == "/v1/chat/completions?api-version=1&api-key=TOPSECRET"
        assert request["auth"] == "Basic " + base64.b64encode(b"alice:pa:ss").decode()
        assert message == f"{fake.url}?api-version=1&api-key=*** answered HTTP 500"

    @pytest.mark.parametrize(
        "base_url",
        [
            "http://user:Zq-hunter2@127.0.0.1:9/v1?token=Zq-hunter2",  # nothing listens on 9
            "ftp://user:Zq-hunter2@127.0.0.1/v1?key=Zq-hunter2",  # urllib quotes the URL
            "http://user:Zq-hunter2@127.0.0.1:notaport/v1?sig=Zq-hunter2",
        ],
    )
    def test_standard_library_errors_are_scrubbed(self, base_url: str) -> None:
        """The messages urllib and http.client raise, which quote the URL, lose the secret."""
        message = ask(base_url, "Zq-hunter2")
        assert "Zq-hunter2" not in message

    @settings(max_examples=200, deadline=None)
    @given(
        user=st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12),
        password=st.text(alphabet=st.characters(codec="ascii"), max_size=12),
        value=st.text(alphabet=st.characters(codec="ascii"), max_size=12),
        name=st.sampled_from(["api-key", "key", "access_token", "token", "sig", "X-Password"]),
    )
    def test_redact_url_leaves_no_secret(
        self, user: str, password: str, value: str, name: str
    ) -> None:
        """Any userinfo and key-like value: absent from redact_url and from a scrubbed message."""
        user, password, value = "Zq" + user, "Zq" + password, "Zq" + value
        url = (
            f"https://{quote(user, safe='')}:{quote(password, safe='')}@api.example/v1"
            f"?api-version=2&{name}={quote(value, safe='')}"
        )
        shown = redact_url(url)
        message = scrub(f"error for {url}: {unquote(url)}", url_secrets(url))
        for secret in {user, password, value, quote(user, safe=""), quote(value, safe="")}:
            assert secret not in shown
            assert secret not in message
        assert shown.startswith("https://api.example/v1?api-version=2&")

    def test_repr_shows_no_credential(self) -> None:
        """A ChatModel in a log line or a traceback shows neither the key nor the URL's secrets."""
        model = ChatModel(model="m", base_url="https://u:Zq-pw@h.example/v1?key=Zq-k", api_key=KEY)
        text = repr(model)
        assert "Zq-" not in text and KEY not in text and "h.example/v1?key=***" in text

    def test_same_origin(self) -> None:
        """Scheme, host and port (default ports included) make an origin."""
        assert same_origin("https://a.example/v1", "https://A.example:443/x")
        assert not same_origin("https://a.example/v1", "http://a.example/v1")
        assert not same_origin("http://127.0.0.1:80/", "http://localhost/")
        assert not same_origin("http://a.example:1/", "http://a.example:2/")


class TestEvalCommand:
    """`callgate eval --model` keeps credentials out of its output and its DuckDB tables."""

    def test_no_secret_in_output_or_database(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, elsewhere: FakeOpenAI
    ) -> None:
        """Credentials in the URL, a redirect elsewhere: none printed, stored or sent there."""
        elsewhere.requests.clear()
        monkeypatch.setenv("EVAL_KEY", KEY)
        cases = write(
            tmp_path / "c.jsonl",
            [
                {
                    "id": "m1",
                    "principal": "CUS-1",
                    "input": "Where is my order ORD-1001?",
                    "expected": [call("get_order", {"order_id": "ORD-1001"})],
                }
            ],
        )
        database = tmp_path / "e.duckdb"
        with serve(FakeOpenAI(script={}, redirect=(302, f"{origin(elsewhere)}/x"))) as fake:
            base = with_userinfo(fake.url, "carol:Zq-basic-pw") + "?api-key=Zq-query-key"
            result = CliRunner().invoke(
                main,
                ["eval", str(cases), "--json", "--model", "m", "--base-url", base,
                 "--api-key-env", "EVAL_KEY", "--db", str(database)],
            )  # fmt: skip
        assert elsewhere.requests == []
        out = json.loads(result.stdout)
        assert "redirected (HTTP 302)" in out["per_case"][0]["error"]
        with duckdb.connect(str(database), read_only=True) as con:
            stored: list[Any] = []
            for (table,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall():
                stored += con.execute(f'SELECT * FROM "{table}"').fetchall()
        assert stored
        for text in (result.output, repr(stored)):
            for secret in (KEY, "carol", "Zq-basic-pw", "Zq-query-key"):
                assert secret not in text

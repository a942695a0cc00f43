"""Duplicate JSON keys from a downstream client are refused before the SDK can merge them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from callgate.gateway._json import DUPLICATE_METHOD, RAW_ARGUMENTS_KEY, rewrite
from callgate.gateway.demo import gateway_command
from tests.gateway.conftest import effects, shop_config

CALL = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"shop_add_note","arguments":%s}}'


class TestRewrite:
    """Where the duplicate sits decides what happens to the message."""

    @pytest.mark.parametrize(
        "arguments",
        [
            '{"order_id":"A","order_id":"B","text":"x"}',
            '{"order_id":"A","text":{"k":1,"k":2}}',
            '{"order_id":"A","text":[{"a":1},{"b":[{"c":1,"c":2}]}]}',
            '{"order_id":"A","\\u006frder_id":"B","text":"x"}',
        ],
    )
    def test_duplicates_in_arguments_keep_their_text_for_the_guard(self, arguments: str) -> None:
        """Empty arguments, and the client's own text under the raw-arguments key, duplicates kept."""
        message = json.loads(rewrite(CALL % arguments) or "")
        assert message["params"]["arguments"] == {}
        raw = message["params"]["_meta"][RAW_ARGUMENTS_KEY]
        assert raw.count('"order_id"') + raw.count('"k"') + raw.count('"c"') >= 2

    def test_duplicates_in_the_envelope_become_an_error_or_are_dropped(self) -> None:
        """A second name or method: a refused method; a second id: nothing to answer, dropped."""
        twice = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}'
        assert json.loads(rewrite(twice) or "")["method"] == DUPLICATE_METHOD
        assert rewrite('{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}') is None

    def test_a_client_cannot_set_the_raw_arguments_key(self) -> None:
        """The key is the transport's: removed from what the client sent."""
        smuggled = (
            '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{},'
            f'"_meta":{{"{RAW_ARGUMENTS_KEY}":"{{}}"}}}}}}'
        )
        assert RAW_ARGUMENTS_KEY not in (rewrite(smuggled) or "")

    def test_clean_messages_pass_unchanged(self) -> None:
        """No duplicates: the very same text."""
        clean = CALL % '{"order_id":"A","text":"x"}'
        assert rewrite(clean) is clean


class TestOverStdio:
    """The gateway as a stdio server, fed raw JSON-RPC with duplicate keys."""

    def test_a_call_with_duplicate_keys_is_invalid_json_and_never_runs(
        self, tmp_path: Path
    ) -> None:
        """INVALID_JSON naming the key; the upstream counted no note; a clean call then runs."""
        config = tmp_path / "gateway.yaml"
        config.write_text(shop_config(tmp_path))
        command = gateway_command(config)
        lines = [
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            },
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
        ]
        text = "".join(json.dumps(line) + "\n" for line in lines)
        text += CALL % '{"order_id":"A","text":"x","text":"y"}' + "\n"
        text += (CALL % '{"order_id":"A","text":"z"}').replace('"id":7', '"id":8') + "\n"
        process = subprocess.Popen(
            [command.command, *command.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdin is not None and process.stdout is not None
        answers: dict[Any, Any] = {}
        try:
            process.stdin.write(text)
            process.stdin.flush()
            while not {7, 8} <= set(answers):  # each answer is one line; EOF ends the loop
                line = process.stdout.readline()
                if not line:
                    break
                message = json.loads(line)
                answers[message.get("id")] = message
        finally:
            process.stdin.close()
            process.wait(timeout=60)
            process.stdout.close()
        refused = answers[7]["result"]["_meta"]["callgate"]
        assert refused["code"] == "INVALID_JSON" and "duplicate key" in refused["message"]
        assert "result" in answers[8], answers[8]
        assert answers[8]["result"]["_meta"]["callgate"]["code"] == "OK"
        assert effects(tmp_path) == ["note A z"]

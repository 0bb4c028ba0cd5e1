"""sessionq's NOTIFY payloads have one encoder (sessionq.notify) and one decoder
(sessionq.db.notify): every channel the SQL sends on is declared, and what it sends decodes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import psycopg
import pytest

from sessionq.db import notify
from sessionq.db.notify import Channel

ROOT = Path(__file__).resolve().parents[2]


def test_sql_sends_only_through_the_encoder_on_declared_channels() -> None:
    sent: set[str] = set()
    for path in sorted((ROOT / "schema").glob("*.sql")):
        text = path.read_text()
        if path.name not in ("00_base.sql", "05_procrastinate.sql"):  # the encoder; procrastinate's channels
            assert "pg_notify(" not in text, f"{path.name} sends a NOTIFY without sessionq.notify"
        sent |= set(re.findall(r"sessionq\.notify\('(\w+)'", text))
    assert sent == {c.value for c in Channel}


def test_a_payload_too_large_for_notify_drops_its_row_and_still_decodes(database_url: str) -> None:
    big = {"session": "s-1", "state": "READY", "operation": "NONE", "generation": "g", "row": {"pad": "x" * 9000}}
    small = {**big, "row": {"id": "s-1"}}
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"LISTEN {Channel.SESSION}")
        conn.execute("SELECT sessionq.notify(%s, %s::jsonb)", (Channel.SESSION.value, json.dumps(big)))
        conn.execute("SELECT sessionq.notify(%s, %s::jsonb)", (Channel.SESSION.value, json.dumps(small)))
        payloads = [n.payload for n in conn.notifies(timeout=2, stop_after=2)]
    assert notify.session_change(payloads[0]) == notify.SessionChange("s-1", False, "READY", "NONE", "g", None)
    assert notify.session_change(payloads[1]).row == {"id": "s-1"}


@pytest.mark.parametrize(
    ("channel", "payload", "key"),
    [
        (Channel.SESSION, '{"session": "s", "gone": true}', "s"),
        (Channel.TASK, '{"session": "s"}', "s"),
        (Channel.IDLE, '{"session": "s"}', "s"),
        (Channel.CHECKPOINT, '{"checkpoint": "c"}', "c"),
        (Channel.DRAIN, '{"worker": "*"}', "*"),
    ],
)
def test_each_channel_names_its_key(channel: Channel, payload: str, key: str) -> None:
    assert notify.key_of(channel, payload) == key


@pytest.mark.parametrize("payload", ["s-1 READY NONE g", "[]", '{"state": "READY"}', '{"session": 1}'])
def test_a_payload_of_another_shape_is_refused(payload: str) -> None:
    with pytest.raises(notify.PayloadError):
        notify.key_of(Channel.SESSION, payload)

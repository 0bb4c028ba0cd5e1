"""Configuration: file + environment, validation with the key's name, documented reference."""

from pathlib import Path

import pytest

from sessionq import config


def test_file_then_environment(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("sessions:\n  idleTtl: 60s\n  quiescenceRecoveryInterval: 5s\nmetrics:\n  enabled: true\n")
    s = config.load(f, env={"SESSIONQ_SESSIONS__IDLE_TTL": "120s"})
    assert s["sessions.idleTtl"] == 120 and s["sessions.quiescenceRecoveryInterval"] == 5 and s["metrics.enabled"] is True


@pytest.mark.parametrize("content, words", [
    ("sessions:\n  idleTtl: 5m\n", "sessions.idleTtl"),
    ("sessions:\n  bogus: 1\n", "sessions.bogus: unknown configuration key"),
    ("metrics:\n  address: nowhere\n", "metrics.address"),
    ("- a list\n", "top level must be a mapping"),
    ("a: [unclosed\n", "not valid YAML"),
])
def test_bad_values_name_the_key(tmp_path, content, words):
    f = tmp_path / "c.yaml"
    f.write_text(content)
    with pytest.raises(config.ConfigError) as e:
        config.load(f, env={})
    assert words in str(e.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(config.ConfigError, match="cannot read configuration file"):
        config.load(tmp_path / "nope.yaml", env={})


def test_documented_reference_is_current():
    doc = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    assert config.reference_markdown() in doc, "run: python scripts/gen_docs.py"
    for key in config.KEYS:
        assert key.env in doc


def test_lifecycle_log_lines_carry_ids():
    import json
    import logging

    from sessionq import logs

    record = logging.LogRecord("sessionq.domain.operations", logging.INFO, __file__, 1, "claimed %s operation", ("create",), None)
    record.session_id, record.operation_id = "s-1", "g-1"
    token = logs.JOB_ID.set(42)
    try:
        logs.JobContextFilter().filter(record)
    finally:
        logs.JOB_ID.reset(token)
    line = json.loads(logs.JsonFormatter().format(record))
    assert line["msg"] == "claimed create operation" and line["level"] == "info"
    assert (line["session_id"], line["operation_id"], line["job_id"]) == ("s-1", "g-1", 42)
    text = logs.TextFormatter().format(record)
    assert "session_id=s-1" in text and "job_id=42" in text


@pytest.mark.parametrize("choice, module", [("uvloop", "uvloop"), ("asyncio", "asyncio")])
def test_long_running_commands_use_the_configured_event_loop(choice, module):
    from sessionq.cli.server import run

    settings = config.load(None, env={"SESSIONQ_SERVER__EVENT_LOOP": choice})

    async def loop_module() -> str:
        import asyncio

        return type(asyncio.get_running_loop()).__module__.split(".")[0]

    assert run(settings, loop_module()) == module


def test_unknown_event_loop_is_refused():
    with pytest.raises(config.ConfigError, match=r"server\.eventLoop"):
        config.load(None, env={"SESSIONQ_SERVER__EVENT_LOOP": "trio"})

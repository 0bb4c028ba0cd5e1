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


def test_typed_sections_are_generated_from_the_keys_and_current():
    from sessionq import config_sections

    assert Path(config_sections.__file__).read_text() == config.sections_module(), "run: python scripts/gen_docs.py"
    s = config.defaults()
    for key in config.KEYS:  # every key is an attribute of its section, with the same value
        node = s
        for part in key.path.split(".")[:-1]:
            node = getattr(node, part + "_" if part == "global" else part)
        assert getattr(node, key.attribute) == s[key.path], key.path


def test_typed_sections_carry_the_loaded_and_overridden_values(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("sessions:\n  idleTtl: 60s\nauth:\n  tokens:\n    t1: alice\nglobal:\n  clusterDomain: corp.example\n")
    s = config.load(f, env={"SESSIONQ_WORKERS__CONCURRENCY": "3", "SESSIONQ_RUNTIME__SIMULATOR__WORKERS": "7"})
    assert s.sessions.idle_ttl == 60.0 and isinstance(s.sessions.idle_ttl, float)
    assert s.auth.tokens == {"t1": "alice"} and s.global_.cluster_domain == "corp.example"
    assert s.workers.concurrency == 3 and s.runtime.simulator.workers == 7
    assert s.server.address == "127.0.0.1:8083" and s.logging.level == "info"
    o = s.with_overrides(**{"sessions.claimLifetime": 5.0, "auth.admins": ["root"]})
    assert o.sessions.claim_lifetime == 5.0 and o.auth.admins == ["root"] and o.sessions.idle_ttl == 60.0
    assert s.sessions.claim_lifetime == 120.0  # the original is unchanged
    with pytest.raises(config.ConfigError, match=r"sessions\.bogus: unknown configuration key"):
        s.with_overrides(**{"sessions.bogus": 1})


def test_code_reads_settings_through_the_typed_sections():
    """src/, jobs/ and cli/ never read a value by key path (settings["..."], settings.values)."""
    import re

    root = Path(__file__).parent.parent
    by_path = re.compile(r"settings(\.values)?\[|settings\.values\b|\.values\.get\(")
    offenders = [
        f"{path.relative_to(root)}:{n}"
        for folder in ("src/sessionq", "jobs", "cli")
        for path in (root / folder).rglob("*.py")
        if path.name != "config.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if by_path.search(line)
    ]
    assert offenders == []


def test_as_env_loads_back_to_the_same_values():
    """Settings.as_env (what `sessionq up` hands its other API processes) round-trips through load."""
    s = config.defaults().with_overrides(**{"auth.anonymousUser": "bob", "runtime.substrate.uidPreflight": False,
                                            "workers.concurrency": 3, "runtime.kind": "substrate"})
    paths = ("auth.anonymousUser", "runtime.substrate.uidPreflight", "workers.concurrency", "runtime.kind")
    env = s.as_env(*paths)
    assert env["SESSIONQ_AUTH__ANONYMOUS_USER"] == "bob" and env["SESSIONQ_RUNTIME__SUBSTRATE__UID_PREFLIGHT"] == "false"
    loaded = config.load(env=env)
    assert {p: loaded[p] for p in paths} == {p: s[p] for p in paths}

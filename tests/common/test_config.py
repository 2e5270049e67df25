from dataclasses import dataclass

import pytest

from burrow.common.config import load_config, setting


@dataclass(frozen=True)
class DemoConfig:
    host: str = setting("127.0.0.1", "address to listen on")
    port: int = setting(4000, "TCP port")
    timeout: float = setting(2.5, "deadline", unit="seconds")
    event_log: str | None = setting(None, "event log path")
    verbose: bool = setting(False, "chatty logs")


def test_defaults():
    assert load_config(DemoConfig, "demo", [], environ={}) == DemoConfig()


def test_environment_then_flags_take_precedence():
    env = {"BURROW_DEMO_PORT": "5000", "BURROW_DEMO_TIMEOUT": "1.5", "BURROW_DEMO_VERBOSE": "yes",
           "BURROW_DEMO_EVENT_LOG": "/tmp/x.jsonl"}
    cfg = load_config(DemoConfig, "demo", [], environ=env)
    assert (cfg.port, cfg.timeout, cfg.verbose, cfg.event_log) == (5000, 1.5, True, "/tmp/x.jsonl")
    cfg = load_config(DemoConfig, "demo", ["--port", "6000", "--no-verbose"], environ=env)
    assert (cfg.port, cfg.verbose) == (6000, False)


def test_bad_values_are_reported_with_their_source():
    with pytest.raises(ValueError, match="BURROW_DEMO_PORT"):
        load_config(DemoConfig, "demo", [], environ={"BURROW_DEMO_PORT": "many"})
    with pytest.raises(ValueError, match="--timeout"):
        load_config(DemoConfig, "demo", ["--timeout", "soon"], environ={})


def test_help_names_env_variables_and_units(capsys):
    with pytest.raises(SystemExit):
        load_config(DemoConfig, "demo", ["--help"], environ={})
    out = capsys.readouterr().out
    assert "BURROW_DEMO_TIMEOUT" in out and "[seconds]" in out

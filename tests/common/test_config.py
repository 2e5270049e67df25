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


@pytest.mark.parametrize("argv,environ,named", [
    ([], {"BURROW_DEMO_PORT": "many"}, "BURROW_DEMO_PORT: expected int, got 'many'"),
    (["--timeout", "soon"], {}, "--timeout: expected float, got 'soon'"),
    ([], {"BURROW_DEMO_VERBOSE": "maybe"}, "BURROW_DEMO_VERBOSE: expected a boolean"),
    (["--bogus"], {}, "unrecognized arguments: --bogus"),
])
def test_bad_values_are_one_line_naming_their_source(capsys, argv, environ, named):
    with pytest.raises(SystemExit) as exit_:
        load_config(DemoConfig, "demo", argv, environ=environ)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("burrow-demo: error: ") and named in err, err


def test_help_shows_each_default_once_with_its_unit(capsys):
    with pytest.raises(SystemExit):
        load_config(DemoConfig, "demo", ["--help"], environ={})
    out = " ".join(capsys.readouterr().out.split()).partition("options:")[2]  # argparse wraps lines
    assert "BURROW_DEMO_TIMEOUT; default: 2.5 seconds)" in out
    assert "(env BURROW_DEMO_PORT; default: 4000)" in out
    assert "(env BURROW_DEMO_VERBOSE; default: off)" in out
    assert "(env BURROW_DEMO_EVENT_LOG; default: none)" in out
    assert "None" not in out and out.count("default") == 5


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        load_config(DemoConfig, "demo", ["--version"], environ={})
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("burrow-demo ")

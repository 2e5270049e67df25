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


@dataclass(frozen=True)
class RenamedConfig:
    admin_port: int = setting(9000, "admin port (0 = any free port)", off=-1)
    stun_port: int = setting(3478, "STUN port", off=0)
    per_second: float = setting(10.0, "rate", "messages/s", name="message_rate", aliases=("per_second",))


def test_off_turns_any_port_off_and_renamed_flags_keep_their_old_names(capsys):
    cfg = load_config(RenamedConfig, "demo", ["--admin-port", "off", "--stun-port", "OFF"], environ={})
    assert (cfg.admin_port, cfg.stun_port) == (-1, 0)
    assert load_config(RenamedConfig, "demo", [], environ={"BURROW_DEMO_ADMIN_PORT": "off"}).admin_port == -1
    assert load_config(RenamedConfig, "demo", ["--admin-port", "0"], environ={}).admin_port == 0
    assert load_config(RenamedConfig, "demo", ["--message-rate", "5"], environ={}).per_second == 5
    assert load_config(RenamedConfig, "demo", ["--per-second", "6"], environ={}).per_second == 6
    env = {"BURROW_DEMO_PER_SECOND": "7", "BURROW_DEMO_MESSAGE_RATE": "8"}  # the current name wins
    assert load_config(RenamedConfig, "demo", [], environ=env).per_second == 8
    assert load_config(RenamedConfig, "demo", [], environ={"BURROW_DEMO_PER_SECOND": "7"}).per_second == 7
    with pytest.raises(SystemExit):
        load_config(RenamedConfig, "demo", ["--help"], environ={})
    out = " ".join(capsys.readouterr().out.split())
    assert "--message-rate MESSAGE_RATE rate (env BURROW_DEMO_MESSAGE_RATE; default: 10 messages/s)" in out
    assert "--per-second" not in out and "off turns it off" in out


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        load_config(DemoConfig, "demo", ["--version"], environ={})
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("burrow-demo ")

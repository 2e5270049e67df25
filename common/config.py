"""Config helpers: one frozen dataclass per service, every field a CLI flag and an env variable.

A field is declared with `setting(default, help, unit=...)`. `load_config(Cls, "mailbox", argv)`
builds an argparse parser whose flags are the field names (`max_message_bytes` -> `--max-message-bytes`);
each flag also reads `BURROW_MAILBOX_MAX_MESSAGE_BYTES`. Precedence: flag > environment > default.
Conventions every server shares: durations in seconds, a port is turned off with `off`, a rate and its
burst are `--THING-rate` and `--THING-burst`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(ValueError):
    """A flag or environment variable has a value we cannot use."""


def setting(default: Any, help: str, unit: str | None = None, *, off: Any = None, name: str | None = None,
            aliases: Sequence[str] = ()) -> Any:
    """Declare a config field with its help text and unit (shown in --help).

    `off`: for a port, the value that turns it off; the flag and env variable then also accept the word
    `off` (the one way to say it on every server). `name`: the public flag/env name when it differs from
    the field's; `aliases`: older public names, still accepted (not shown in --help).
    """
    return dataclasses.field(default=default, metadata={"help": help, "unit": unit, "off": off, "name": name,
                                                         "aliases": tuple(aliases)})


def public_name(f: dataclasses.Field) -> str:
    """The name a field has on the command line (`--public-name`) and in the environment."""
    return f.metadata.get("name") or f.name


def env_name(service: str, field_name: str) -> str:
    return f"BURROW_{service.upper()}_{field_name.upper()}"


def _base_type(annotation: Any) -> tuple[type, bool]:
    """Return (scalar type, optional?) for `int`, `str | None`, `Optional[float]`..."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0], True
    return annotation, False


def _convert(kind: type, raw: str, where: str) -> Any:
    if kind is bool:
        low = raw.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigError(f"{where}: expected a boolean (true/false), got {raw!r}")
    try:
        return kind(raw)
    except ValueError as exc:
        raise ConfigError(f"{where}: expected {kind.__name__}, got {raw!r}") from exc


_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds"}


def burrow_version() -> str:
    """The installed package's version (read only when asked: it costs an import at start-up)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("burrow")
    except PackageNotFoundError:
        return "unknown"


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `PROG: error: WHAT (see PROG --help)` and exit status 2."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class VersionAction(argparse.Action):
    """`--version`: print `PROG VERSION` and exit 0."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str = "print the version and exit") -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog} {burrow_version()}")
        parser.exit()


def default_text(default: Any, unit: str | None = None, off: Any = None) -> str:
    """How --help shows a default: `default: 60 seconds`, `default: on`, `default: none`."""
    if off is not None and default == off:
        return "default: off"
    if isinstance(default, bool):
        return "default: " + ("on" if default else "off")
    if default is None:
        return "default: none" + (f"; unit: {_UNIT_WORDS.get(unit, unit)}" if unit else "")
    if isinstance(default, str):
        return f"default: {default!r}" if default == "" or default.strip() != default else f"default: {default}"
    if isinstance(default, float) and default.is_integer():
        default = int(default)
    unit_word = _UNIT_WORDS.get(unit, unit) if unit else ""
    return f"default: {default}" + (f" {unit_word}" if unit_word else "")


def build_parser(cls: type, service: str, description: str = "") -> argparse.ArgumentParser:
    parser = Parser(prog=f"burrow-{service}", description=description or cls.__doc__)
    parser.add_argument("--version", action=VersionAction)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind, _optional = _base_type(hints[f.name])
        text = f.metadata.get("help", "")
        off = f.metadata.get("off")
        if off is not None:
            text += "; off turns it off"
        # one default, with its unit; a help text that already explains its default keeps only that
        shown = [f"env {env_name(service, public_name(f))}"]
        if "default" not in text:
            shown.append(default_text(f.default, f.metadata.get("unit"), off))
        text = f"{text} ({'; '.join(shown)})".replace("%", "%%")
        flag = "--" + public_name(f).replace("_", "-")
        if kind is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction,
                                default=None, help=text)
        else:
            parser.add_argument(flag, dest=f.name, default=None, metavar=public_name(f).upper(), help=text)
            for old in f.metadata.get("aliases", ()):
                parser.add_argument("--" + old.replace("_", "-"), dest=f.name, default=None, help=argparse.SUPPRESS)
    return parser


def load_config(cls: type[T], service: str, argv: Sequence[str] | None = None,
                environ: Mapping[str, str] | None = None, description: str = "") -> T:
    """Parse flags and environment into the frozen dataclass `cls`."""
    environ = os.environ if environ is None else environ
    parser = build_parser(cls, service, description)
    args = parser.parse_args(argv)
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        kind, optional = _base_type(hints[f.name])
        raw = getattr(args, f.name)
        where = "--" + public_name(f).replace("_", "-")
        for name in (public_name(f), *f.metadata.get("aliases", ())):  # the current name first
            if raw is None and env_name(service, name) in environ:
                raw = environ[env_name(service, name)]
                where = env_name(service, name)
        if raw is None:
            continue
        off = f.metadata.get("off")
        if isinstance(raw, str) and off is not None and raw.strip().lower() == "off":
            values[f.name] = off
        elif isinstance(raw, str) and optional and raw == "" and kind is not str:
            values[f.name] = None
        elif isinstance(raw, bool):
            values[f.name] = raw
        else:
            try:
                values[f.name] = _convert(kind, raw, where)
            except ConfigError as exc:
                parser.error(str(exc))  # one line on stderr, exit status 2
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
        raise  # unreachable: parser.error exits


def describe(config: Any) -> str:
    """One line per field, for start-up logs."""
    return "\n".join(f"  {f.name} = {getattr(config, f.name)!r}" for f in dataclasses.fields(config))

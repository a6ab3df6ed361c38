"""The command line the training parsed, as `hello` reports it (`options`):
dbh's `scenario from-command --external` passes each of its keys in the
command's own syntax (`--batch-size 2`, a positional dataset folder, a
switch) instead of a `key=value` word argparse would refuse (Note [A
command's own syntax] in harness/scenario/command_syntax.h).

Under dbh, `import dbh_adapter` has argparse remember the last parser that
read the process's own command line and what it parsed; nothing else
changes (outside dbh argparse is left untouched). `hello` then reports that
parser's options, and the parsed namespace's keys beside the configuration
the training gave (its keys win): a flag the command line sets is a key of
the configuration too."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

# What one `hello` carries of the parser; dbh reads at most as many
# (scenario::kMaxParserOptions, 8 strings of at most 100 bytes each).
MAX_OPTIONS = 512
MAX_STRINGS = 8
MAX_STRING = 100

_parsed: tuple[argparse.ArgumentParser, argparse.Namespace] | None = None
_MARK = "_dbh_records_parse"


def record_parses() -> None:
    """Has ArgumentParser remember the last parse of the process's own
    command line (`parse_args()` with no list: sys.argv). Idempotent."""
    original = argparse.ArgumentParser.parse_known_args
    if getattr(original, _MARK, False):
        return

    def parse_known_args(self: argparse.ArgumentParser, args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        result = original(self, args, namespace)
        if args is None:
            global _parsed
            _parsed = (self, result[0])
        return result

    setattr(parse_known_args, _MARK, True)
    argparse.ArgumentParser.parse_known_args = parse_known_args  # type: ignore[method-assign, assignment]


def _kind(action: argparse.Action) -> str | None:
    if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
        return None
    if not action.option_strings:
        return "positional"
    if isinstance(action, argparse._StoreTrueAction):
        return "on"
    if isinstance(action, argparse._StoreFalseAction):
        return "off"
    if action.nargs == 0:  # store_const, count, BooleanOptionalAction's pair: no value word
        return None
    return "value"


def _nargs(action: argparse.Action) -> int:
    if action.nargs is None:
        return 1
    if isinstance(action.nargs, int):
        return action.nargs
    return -1  # '?', '*', '+', REMAINDER: a variable number


def parser_options(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """The parser's options as `hello`'s `options`: {dest, strings, kind,
    nargs}, kind `value`, `on` (store_true), `off` (store_false) or
    `positional`; help, version, sub-commands and options that take no value
    otherwise are left out."""
    out: list[dict[str, Any]] = []
    for action in parser._actions:
        kind = _kind(action)
        if kind is None or not isinstance(action.dest, str) or len(out) >= MAX_OPTIONS:
            continue
        strings = [s for s in action.option_strings if len(s) <= MAX_STRING][:MAX_STRINGS]
        if kind != "positional" and not strings:
            continue
        out.append({"dest": action.dest[:MAX_STRING], "strings": strings, "kind": kind, "nargs": _nargs(action)})
    return out


def parsed_command_line() -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """The options of the last parser that read the process's command line
    and the namespace it parsed (as a dict), or None when none has."""
    if _parsed is None:
        return None
    parser, namespace = _parsed
    return parser_options(parser), dict(vars(namespace))


def command_line_report() -> dict[str, Any]:
    """`hello`'s `options` and the parsed namespace flattened (its keys join
    the training's configuration; None values are left out); empty when no
    parser read the command line."""
    from ._config import flatten_config

    parsed = parsed_command_line()
    if parsed is None:
        return {}
    options, namespace = parsed
    return {"options": options, "config": flatten_config(namespace)}

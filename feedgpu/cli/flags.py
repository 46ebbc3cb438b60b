"""Each command's flags, declared once: the flag, its help, and the options field it sets.

A flag's default is its options field's default (argparse keeps None, the dataclass fills in),
so a default lives in one place; `options_from` builds the options object from parsed args.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# What a flag sets: a field of the command's options object, a PipelineSpec override, a
# DeviceConfig field, or nothing (the command reads it itself).
OPTIONS, SPEC, DEVICE, COMMAND = "options", "spec", "device", "command"


@dataclass(frozen=True)
class Flag:
    """One command-line flag.

    Attributes:
        name: the flag ("--max-size"); a name without dashes is a positional argument.
        help: what it does, for --help.
        target: what it sets (OPTIONS, SPEC, DEVICE or COMMAND).
        to: the field it sets (default: the flag's name in snake case).
        convert: applied to the parsed value before it is set.
        kwargs: the rest, as argparse takes them (type, choices, metavar, action, nargs).
    """

    name: str
    help: str
    target: str = OPTIONS
    to: str | None = None
    convert: Callable[[Any], Any] | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def dest(self) -> str:
        """The attribute argparse stores the value under."""
        return self.name.lstrip("-").replace("-", "_")

    @property
    def sets(self) -> str:
        """The field this flag sets."""
        return self.to or self.dest


def value(name: str, help: str, type: Any = str, **kwargs: Any) -> Flag:
    """A flag taking a value (`--quality 90`)."""
    target = kwargs.pop("target", OPTIONS)
    sets = kwargs.pop("to", None)
    convert = kwargs.pop("convert", None)
    return Flag(name, help, target, sets, convert, {"type": type, **kwargs})


def switch(name: str, help: str, **kwargs: Any) -> Flag:
    """A boolean `--flag/--no-flag`."""
    target = kwargs.pop("target", OPTIONS)
    sets = kwargs.pop("to", None)
    return Flag(name, help, target, sets, None, {"action": argparse.BooleanOptionalAction})


def action(name: str, help: str) -> Flag:
    """A flag that asks for something to be done instead of the command (`--print-schema`)."""
    return Flag(name, help, COMMAND, None, None, {"action": "store_true"})


def add_flags(parser: argparse.ArgumentParser, flags: Sequence[Flag]) -> None:
    """Declare flags on a parser; absent optional flags parse as None (their field's default)."""
    for f in flags:
        kwargs = dict(f.kwargs)
        if f.name.startswith("-"):
            kwargs.setdefault("default", None)
        parser.add_argument(f.name, help=f.help, **kwargs)


def values_for(args: argparse.Namespace, flags: Sequence[Flag], target: str) -> dict[str, Any]:
    """Field -> value of the flags given on the command line that set target."""
    out = {}
    for f in flags:
        given = getattr(args, f.dest, None)
        if f.target == target and given is not None and given != []:
            out[f.sets] = f.convert(given) if f.convert else given
    return out


def options_from(
    cls: Callable[..., Any], args: argparse.Namespace, flags: Sequence[Flag], **extra: Any
) -> Any:
    """The options object of a command: cls(fields from its flags, then extra)."""
    return cls(**{**values_for(args, flags, OPTIONS), **extra})

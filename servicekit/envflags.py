"""Flag defaults from the environment, one rule for every command line.

``apply_env(parser)`` gives each ``--some-flag`` of an argparse parser the default found in
``QUEUEPILOT_SOME_FLAG`` (or in the names given in ``aliases``), converted by the flag's own ``type``
and checked against its ``choices``; a flag on the command line still wins.  On/off flags
(``store_true``, ``store_false``, ``BooleanOptionalAction``) read the environment with
:func:`parse_bool`: ``1/true/yes/on`` is on, ``0/false/no/off`` is off, anything else is an error.
A bad value raises :class:`EnvError`, one line naming the variable (report it with
``parser.error``: usage error, exit status 2).  Each flag's help gains ``[env NAME]``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import Any

DEFAULT_PREFIX = "QUEUEPILOT_"
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


class EnvError(ValueError):
    """An environment variable holds a value its flag does not accept."""


def parse_bool(text: str) -> bool:
    """``1/true/yes/on`` -> True, ``0/false/no/off`` -> False (any case, surrounding blanks ignored);
    ValueError for anything else, the empty string included."""
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f"{text!r} is not a boolean (use 1/true/yes/on or 0/false/no/off)")


def env_name(flag: str, prefix: str = DEFAULT_PREFIX) -> str:
    """``--resync-seconds`` -> ``QUEUEPILOT_RESYNC_SECONDS``."""
    return prefix + flag.lstrip("-").replace("-", "_").upper()


def _long_flag(action: argparse.Action) -> str | None:
    longs = [s for s in action.option_strings if s.startswith("--")]
    if isinstance(action, argparse.BooleanOptionalAction):  # --flag / --no-flag: the variable is FLAG
        longs = [s for s in longs if not s.startswith("--no-")]
    return longs[0] if longs else None


def _convert(action: argparse.Action, name: str, raw: str) -> Any:
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction | argparse.BooleanOptionalAction):
        try:
            on = parse_bool(raw)
        except ValueError as e:
            raise EnvError(f"{name}: {e}") from None
        return (not on) if isinstance(action, argparse._StoreFalseAction) else on
    if not isinstance(action, argparse._StoreAction):
        raise EnvError(f"{name}: {action.option_strings[0]} cannot be set from the environment")
    value: Any = raw
    if action.type is not None:
        try:
            value = action.type(raw)  # type: ignore[operator]
        except (ValueError, TypeError, argparse.ArgumentTypeError) as e:
            raise EnvError(f"{name}={raw!r}: {e}") from None
    if action.choices is not None and value not in action.choices:
        raise EnvError(f"{name}={raw!r}: choose from {', '.join(map(str, action.choices))}")
    return value


def apply_env(
    parser: argparse.ArgumentParser,
    env: Mapping[str, str] | None = None,
    *,
    prefix: str = DEFAULT_PREFIX,
    aliases: Mapping[str, Sequence[str]] | None = None,
    skip: Sequence[str] = (),
) -> dict[str, str]:
    """Set the parser's defaults from ``env`` (default ``os.environ``); returns {dest: variable used}.

    ``aliases`` maps a flag's ``dest`` to the variable names to read, first found wins (e.g.
    ``{"node_name": ("NODE_NAME", "QUEUEPILOT_NODE_NAME")}``); ``skip`` lists dests that never read
    the environment.  Raises :class:`EnvError` for the first bad value.
    """
    env = os.environ if env is None else env
    aliases = aliases or {}
    used: dict[str, str] = {}
    for action in parser._actions:
        flag = _long_flag(action)
        if flag is None or action.dest in ("help", "version") or action.dest in skip:
            continue
        names = tuple(aliases.get(action.dest, (env_name(flag, prefix),)))
        if action.help is not argparse.SUPPRESS:
            action.help = f"{action.help or ''} [env {', '.join(names)}]".strip()
        name = next((n for n in names if n in env), None)
        if name is None:
            continue
        parser.set_defaults(**{action.dest: _convert(action, name, env[name])})
        used[action.dest] = name
    return used


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows every flag's default (``(default: ...)``; none where the default is unset or an empty list,
    which the help then describes in words) and keeps the description's line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default == []:
            return action.help
        return super()._get_help_string(action)

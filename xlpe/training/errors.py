"""The one exception type of a user error in `xlpe-train` (a bad argument, argument combination or input file),
raised anywhere in the training layer: the command prints its message as one line and exits 2, no traceback;
and the "did you mean" of a mistyped flag (`suggest_option`, `unknown_flags_message`), which every command line
uses (standard library only, so the CLI can use it before torch is imported)."""

from __future__ import annotations

import difflib
import json


class UsageError(ValueError):
    """A bad argument, argument combination or input found before or during setup: `xlpe-train` prints one line,
    exits 2. A ValueError, so library callers can catch either."""


def _underscored(option: str) -> str:
    return "--" + option[2:].replace("-", "_") if option.startswith("--") else option


def suggest_option(given: str, options) -> str | None:
    """The option of `options` (long flags, e.g. "--num_beams") closest to the mistyped `given` (dash and
    underscore spellings compare equal), or None when none is close."""
    name = _underscored(given.split("=", 1)[0])
    known = {_underscored(option): _underscored(option) for option in options if option.startswith("--")}
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return known[close[0]] if close else None


def unknown_flags_message(unknown, options) -> str:
    """`unrecognized arguments: --sorce a (did you mean --source?)`: argparse's message with a suggestion for
    each mistyped long flag."""
    pairs = [
        (item.split("=", 1)[0], suggestion)
        for item in map(str, unknown)
        if item.startswith("--")
        for suggestion in [suggest_option(item, options)]
        if suggestion
    ]
    text = f"unrecognized arguments: {' '.join(map(str, unknown))}"
    if len(pairs) == 1:
        return f"{text} (did you mean {pairs[0][1]}?)"
    hints = ", ".join(f"{suggestion} for {given}" for given, suggestion in pairs)
    return text + (f" (did you mean {hints}?)" if hints else "")


__all__ = ["UsageError", "suggest_option", "unknown_flags_message"]


def key_line(text: str, key: str) -> int:
    """The line of `text` (JSON) where `"key":` first appears (1 when not found): where a user error in a JSON file
    the user wrote is."""
    needle = json.dumps(key)
    for number, line in enumerate(text.split("\n"), 1):
        if needle in line and line.split(needle, 1)[1].lstrip().startswith(":"):
            return number
    return 1

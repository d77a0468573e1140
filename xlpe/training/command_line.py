"""The one parse of an `xlpe-train` command line: argv -> {flag: value given}, and its `--help`, before torch is
imported.

Both are built from a *flag schema*: each option's spellings, destination, `nargs`, constant, choices, help text
and default, read off the real argument parser (`RunConfig`'s, over the argument dataclasses) and shipped with the
package (`xlpe/cli/train_flags.json`, served while its key matches, else made once and cached: `xlpe.cli.train`).
The schema holds the argument dataclasses only: what the registries add (each registered family's flags, the
family and tagger names in two help texts) is added when the schema is read (`with_registries`), so a family, an
XL position form or a tagger added in code or in a plugin never makes the shipped schema stale.
What it returns holds only the flags given (argparse's SUPPRESS defaults), so which flags were given is what the
parse saw, never reconstructed from argv strings. Values stay text, except the constants of bare boolean flags
(`--do_train` is True, `--no_x` False); `RunConfig` converts them with the dataclass fields' own types. An unknown
flag, a missing value or a value outside a flag's choices is a `CommandLineError` of one line (with "did you mean").
Standard library only.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UsageError, unknown_flags_message

SCHEMA_VERSION = 2


class CommandLineError(UsageError):
    """A command line that cannot be read (unknown flag, missing value, a value outside the choices)."""


# ---------------------------------------------------------------------------------------------------------
# The schema: what the parser needs of each option, as JSON
# ---------------------------------------------------------------------------------------------------------


def entry_of(action: argparse.Action) -> dict:
    """What the parse and the help need of one option, as JSON (the help as its template: `help_template`)."""
    return {
        "options": list(action.option_strings),
        "dest": action.dest,
        "store": "false" if isinstance(action, argparse._StoreFalseAction) else "value",
        "nargs": action.nargs,
        "const": action.const if isinstance(action.const, (bool, int, float, str, type(None))) else None,
        "choices": [str(choice) for choice in action.choices] if action.choices else None,
        "help": getattr(action, "help_template", action.help),
        "default": None if action.default is None else str(action.default),
        "metavar": action.metavar,
        "required": action.required,
    }


def schema_of(parser: argparse.ArgumentParser, registry_flags: Iterable[str] = ()) -> dict:
    """The flag schema of `parser` (help excluded): {"flags": entries, "registry_at": where the registries' flags
    go}; the flags named in `registry_flags` (the families' fields) are left out, their place kept."""
    entries, registry_at, registry_flags = [], None, set(registry_flags)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        if action.dest in registry_flags:
            registry_at = len(entries) if registry_at is None else registry_at
            continue
        entries.append(entry_of(action))
    return {"flags": entries, "registry_at": len(entries) if registry_at is None else registry_at}


# ---------------------------------------------------------------------------------------------------------
# What the registries add (light: the registries import no model module)
# ---------------------------------------------------------------------------------------------------------


def registry_help() -> dict[str, str]:
    """{placeholder: text} of the help texts that name the registries' entries."""
    from ..models.registry import MODEL_FAMILIES
    from ..models.taggers import tagger_help

    return {"{families}": ", ".join(MODEL_FAMILIES), "{taggers}": tagger_help()}


def expand_registry_help(text: str | None) -> str | None:
    """A help text with the registries' names in place of `{families}` / `{taggers}`."""
    if not text:
        return text
    for placeholder, names in registry_help().items():
        text = text.replace(placeholder, names)
    return text


def family_flag_entries() -> list[dict]:
    """The schema entries of the registered families' flags, as `HfArgumentParser` makes them from
    `arguments.model_arguments_class`'s fields (`str | None`-style fields with a default of None; choices when the
    field has them)."""
    from ..models.registry import family_flags

    entries = []
    for name, _, help_text, choices in family_flags():
        entries.append(
            {
                "options": [f"--{name}", *([f"--{name.replace('_', '-')}"] if "_" in name else [])],
                "dest": name,
                "store": "value",
                "nargs": None,
                "const": None,
                "choices": [str(choice) for choice in choices] if choices else None,
                "help": help_text,
                "default": None,
                "metavar": None,
                "required": False,
            }
        )
    return entries


def with_registries(schema: dict) -> list[dict]:
    """The schema's entries with the registries' flags in their place and the registries' names in the help."""
    flags = [dict(entry, help=expand_registry_help(entry["help"])) for entry in schema["flags"]]
    at = schema["registry_at"]
    return flags[:at] + family_flag_entries() + flags[at:]


def schema_json(schema: dict, key: str) -> str:
    return json.dumps({"version": SCHEMA_VERSION, "key": key, **schema}, indent=1) + "\n"


def read_schema(path: Path, key: str) -> dict | None:
    """The schema in `path` when it was made for `key` (the code and releases in use), else None."""
    try:
        stored = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(stored, dict) or stored.get("version") != SCHEMA_VERSION or stored.get("key") != key:
        return None
    return {"flags": stored["flags"], "registry_at": stored["registry_at"]}


def options_of(entries: list[dict]) -> set[str]:
    return {option for entry in entries for option in entry["options"]}


# ---------------------------------------------------------------------------------------------------------
# The parse
# ---------------------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, raised (argparse would print the usage and exit)
        raise CommandLineError(message)


def help_parser(entries: list[dict], prog: str = "xlpe-train") -> argparse.ArgumentParser:
    """An argparse parser whose `format_help()` is the real parser's help text (`HfArgumentParser`'s formatter:
    defaults shown), made from the schema's entries without importing torch."""
    parser = argparse.ArgumentParser(prog=prog, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for entry in entries:
        kwargs = {"dest": entry["dest"], "help": entry["help"], "default": entry["default"]}
        if entry["store"] == "false":
            parser.add_argument(*entry["options"], action="store_false", **kwargs)
            continue
        for key in ("nargs", "const", "choices", "metavar"):
            if entry[key] is not None:
                kwargs[key] = entry[key]
        parser.add_argument(*entry["options"], required=entry["required"], **kwargs)
    return parser


def build_parser(entries: list[dict]) -> argparse.ArgumentParser:
    """An argparse parser of the schema's options whose defaults are all absent (SUPPRESS): it returns what was
    given and nothing else."""
    parser = _Parser(prog="xlpe-train", add_help=False, argument_default=argparse.SUPPRESS, allow_abbrev=True)
    for entry in entries:
        if entry["store"] == "false":
            parser.add_argument(*entry["options"], dest=entry["dest"], action="store_false")
            continue
        kwargs = {"dest": entry["dest"]}
        if entry["nargs"] is not None:
            kwargs["nargs"] = entry["nargs"]
        if entry["nargs"] == "?":
            kwargs["const"] = entry["const"]
        if entry["choices"]:
            kwargs["choices"] = entry["choices"]
        parser.add_argument(*entry["options"], **kwargs)
    return parser


def parse_command_line(argv: Sequence[str], entries: list[dict]) -> dict:
    """{destination: value} of the flags given in `argv` (values as text; bare boolean flags as their constant)."""
    parser = build_parser(entries)
    try:
        namespace, unknown = parser.parse_known_args(list(argv))
    except argparse.ArgumentError as error:  # (exit_on_error: a bad value of a known flag)
        raise CommandLineError(str(error)) from None
    if unknown:
        raise CommandLineError(unknown_flags_message(unknown, options_of(entries)))
    return vars(namespace)


def arguments_file(argv: Sequence[str]) -> Path | None:
    """The JSON arguments file of `xlpe-train args.json` (argv is that one path), else None."""
    return Path(argv[0]) if len(argv) == 1 and str(argv[0]).endswith(".json") else None


@dataclass(frozen=True)
class GivenFlags:
    """The flags of one command line, as given: `values` are text (bare boolean flags: their constant) from a
    command line, JSON values from an arguments file (`file`, its `text` kept for line numbers)."""

    values: dict = field(default_factory=dict)
    file: Path | None = None
    text: str | None = None


def read_given(argv: Sequence[str], entries: list[dict]) -> GivenFlags:
    """The one read of `argv`: the JSON arguments file it names (a damaged file, or one that is not an object of
    names and values, is a CommandLineError naming the file and line), or its flags (`parse_command_line`)."""
    path = arguments_file(argv)
    if path is None:
        return GivenFlags(parse_command_line(argv, entries))
    try:
        text = path.read_text(encoding="utf-8")
        values = json.loads(text)
    except json.JSONDecodeError as error:
        raise CommandLineError(f"{path}:{error.lineno}: not valid JSON ({error.msg})") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CommandLineError(f"{path}: cannot be read ({type(error).__name__})") from None
    if not isinstance(values, dict):
        raise CommandLineError(
            f"{path}: the arguments file must hold a JSON object of argument names and values, "
            f"got {type(values).__name__}"
        )
    return GivenFlags(values, path, text)

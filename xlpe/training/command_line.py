"""What `xlpe-train` knows of its command line before torch is imported (standard library only).

The command line itself is parsed once, by `HfArgumentParser` over the argument dataclasses
(`run_config.read_given`), which imports transformers' training arguments and so torch. Two answers come before
that, from the *help cache*: the text of `--help` and the list of option spellings (a mistyped flag gets "did you
mean" at once). The cache is written by the real parser the first time it is built on a machine
(`$XDG_CACHE_HOME/xlpe/help/`, default `~/.cache/xlpe/help/`) and served while its key matches: the Python and
transformers versions, the sources that shape the parser (`HELP_SOURCES`), the registries' families, fields and
taggers (`registry.help_signature`) and the terminal width. Nothing generated ships with the package.

`xlpe-train args.json` (argv is one `.json` path) reads its arguments from that file instead (`read_arguments_file`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UsageError

HELP_SOURCES = ("arguments.py", "run_config.py", "recipes.json", "errors.py")  # in xlpe/training/


class CommandLineError(UsageError):
    """A command line that cannot be read (unknown flag, missing value, a value outside the choices)."""


@dataclass(frozen=True)
class GivenFlags:
    """The flags of one command line as given, typed by the argument dataclasses' field types (`values`), or the
    JSON values of an arguments file (`file`, its `text` kept for line numbers)."""

    values: dict = field(default_factory=dict)
    file: Path | None = None
    text: str | None = None


# ---------------------------------------------------------------------------------------------------------
# The help cache
# ---------------------------------------------------------------------------------------------------------


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "?"


def help_key() -> str:
    """What the cached help must have been made from to be served (module docstring)."""
    from ..models.registry import help_signature

    digest = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for name in HELP_SOURCES:
        digest.update(name.encode() + (here / name).read_bytes())
    digest.update(help_signature().encode())
    python = ".".join(map(str, sys.version_info[:2]))
    width = shutil.get_terminal_size().columns
    return f"python {python}, transformers {_version('transformers')}, width {width}, sources {digest.hexdigest()}"


def help_cache_file(key: str) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xlpe" / "help"
    return root / f"xlpe-train-{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"


def cached_help() -> dict | None:
    """{"help": text, "options": spellings} of the parser in use, when the cache holds it (else None)."""
    key = help_key()
    try:
        stored = json.loads(help_cache_file(key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(stored, dict) or stored.get("key") != key:
        return None
    return stored


def store_help(text: str, options: Sequence[str]) -> dict:
    """Cache the real parser's help text and option spellings (an unwritable cache only costs speed)."""
    key = help_key()
    stored = {"key": key, "help": text, "options": sorted(options)}
    cache = help_cache_file(key)
    with contextlib.suppress(OSError):
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(stored) + "\n", encoding="utf-8")
        os.replace(partial, cache)
    return stored


def unknown_options(argv: Sequence[str], options: Sequence[str]) -> list[str]:
    """The `--flag` tokens of `argv` that are no option (`--flag=value` by its flag) and the values after them, for
    a "did you mean" before the parse; argparse's abbreviations (a unique prefix of one option) count as known, as
    the parse takes them."""
    known, unknown, after_unknown = set(options), [], False
    for token in argv:
        if not token.startswith("--") or token == "--":
            if after_unknown:  # its value, as argparse lists it
                unknown.append(token)
            continue
        name = token.split("=", 1)[0]
        after_unknown = name not in known and sum(option.startswith(name) for option in known) != 1
        if after_unknown:
            unknown.append(token)
    return unknown


# ---------------------------------------------------------------------------------------------------------
# The JSON arguments file
# ---------------------------------------------------------------------------------------------------------


def arguments_file(argv: Sequence[str]) -> Path | None:
    """The JSON arguments file of `xlpe-train args.json` (argv is that one path), else None."""
    return Path(argv[0]) if len(argv) == 1 and str(argv[0]).endswith(".json") else None


def read_arguments_file(path: Path) -> GivenFlags:
    """The arguments of a JSON file: a damaged file, or one that is not an object of names and values, is a
    CommandLineError naming the file and line (the values are checked against the fields' types later:
    `arguments.check_argument_types`)."""
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

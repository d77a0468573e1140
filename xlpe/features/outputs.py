"""The one rule for what a command may write (docs/command_line.md, "What a command may write").

`check_destination(path, flag, inputs, ...)` is called by every command for each output it writes, before any work:

* **Never over an input.** An output that is, contains, or lies inside one of the command's inputs (model,
  data files, prepared and export directories, reorderers, tokenizers; paths resolved through symlinks, and the
  same file reached by a hard link) is refused, even with `--overwrite_output`:
  `--output runs/M is the --model directory: writing there would destroy the input; choose another --output`.
* **Only over its own kind.** An existing output directory is replaced (with `--overwrite_output`) only when it
  is empty or holds what this command writes: its artefact record (`xlpe_artefact.json`) names that kind, or,
  without a record, its files are those of that kind (`directory_holds`). A trained model given as an export
  output, a prepared dataset given as a compare-mt report directory, a folder of other files: refused, naming
  what it holds.
* **A symbolic link is written through.** An output given as a link is checked and written as its target (the
  target gets the new content, the link stays a link), never replaced by a file.
* **The destination can be written.** A directory where a file is expected (and the reverse), a missing parent
  directory, a parent that is not writable: refused up front, one line.

`OutputRefused` (a ValueError) carries the one-line message; the command prints it as `PROG: error: ...`, exit 2.
`output_file_lock(path, command)` holds `.<name>.xlpe.lock` beside an output file while a command makes it (a
second command writing the same file stops at once, naming the first; the lock file is removed when done).
Writing itself (temporary sibling, rename, one-line `OutputWriteError` on a full disk) is
`text_files.write_text_atomic` and friends.

Standard library and numpy only (imported by CLI modules before argument parsing).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from .artefacts import LOCK_NAME, RECORD_NAME, ArtefactMismatch, DirectoryInUse, directory_lock, read_record
from .text_files import OutputExistsError, through_links

# what a directory holds, recognised by its files when it has no artefact record: (kind, files that mark it)
KIND_MARKERS = (
    ("export", ("export_manifest.json",)),
    ("export", ("ctranslate2_manifest.json",)),
    ("prepared-dataset", ("dataset_dict.json",)),
    ("model", ("config.json",)),
    ("compare-mt-report", ("report.txt",)),
)
KIND_NAMES = {  # how a message names a kind
    "export": "an xlpe-export export (export_manifest.json or ctranslate2_manifest.json)",
    "prepared-dataset": "a prepared dataset (dataset_dict.json)",
    "model": "a model (config.json)",
    "compare-mt-report": "a compare-mt report (report.txt)",
    "reorderer": "a reorderer",
    "training-run": "an xlpe-train run",
}
IGNORED = {LOCK_NAME, ".DS_Store"}  # entries that do not make a directory "hold" anything


class OutputRefused(ValueError):
    """An output the command may not write (over an input, over another kind of artefact, an unwritable place)."""


# ---------------------------------------------------------------------------------------------------------
# Never over an input
# ---------------------------------------------------------------------------------------------------------


def _resolved(path: str | os.PathLike) -> Path:
    return Path(os.path.expanduser(os.fspath(path))).resolve()


def _is_within(inner: Path, outer: Path) -> bool:
    return inner != outer and outer in inner.parents


def _same(a: Path, b: Path) -> bool:
    with contextlib.suppress(OSError):
        return a.exists() and b.exists() and os.path.samefile(a, b)
    return False


def _inputs(inputs: Mapping[str, object]) -> Iterator[tuple[str, str]]:
    """(flag, path) for each local input path: None, '' and '-' (stdin) are skipped, lists give each item."""
    for flag, value in inputs.items():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if item is None or item == "" or item == "-":
                continue
            yield flag, os.fspath(item)


def check_not_input(path: str | os.PathLike, flag: str, inputs: Mapping[str, object]) -> None:
    """OutputRefused when `path` is, contains, or lies inside one of `inputs` ({flag: path or list of paths}).
    Paths are compared resolved (symlinks followed) and, where both exist, with `os.path.samefile` (hard links).
    An input that does not exist locally (a Hub id) is skipped: there is nothing there to destroy."""
    output = _resolved(path)
    for input_flag, value in _inputs(inputs):
        if not os.path.lexists(os.path.expanduser(value)):
            continue  # nothing there to destroy (a Hub id, stdin's name)
        source = _resolved(value)
        what = "directory" if source.is_dir() else "file"
        if source == output or _same(source, output):
            relation = f"is the {input_flag} {what}"
        elif _is_within(output, source):
            relation = f"lies inside the {input_flag} {what} {value}"
        elif _is_within(source, output):
            relation = f"contains the {input_flag} {what} {value}"
        else:
            continue
        raise OutputRefused(
            f"{flag} {os.fspath(path)} {relation}: writing there would destroy the input; choose another {flag}"
        )


# ---------------------------------------------------------------------------------------------------------
# Only over its own kind
# ---------------------------------------------------------------------------------------------------------


def _entries(directory: Path) -> list[str]:
    return [entry.name for entry in directory.iterdir() if entry.name not in IGNORED]


def directory_holds(directory: str | os.PathLike) -> str | None:
    """What an existing directory holds: None when empty (or missing), its record's kind (`xlpe_artefact.json`),
    else the kind its files mark (`KIND_MARKERS`), else "other" (files no xlpe command wrote)."""
    directory = Path(directory)
    if not directory.is_dir() or not _entries(directory):
        return None
    try:
        record = read_record(directory)
    except ArtefactMismatch:
        record = None
    if record is not None:
        return record.kind
    for kind, markers in KIND_MARKERS:
        if all((directory / marker).is_file() for marker in markers):
            return kind
    return "other"


def describe_kind(kind: str, directory: Path) -> str:
    if kind == "other":
        count = len(_entries(directory))
        return f"{count} entr{'y' if count == 1 else 'ies'} that no xlpe command wrote there"
    return KIND_NAMES.get(kind, f"a {kind} ({RECORD_NAME})")


def check_own_kind(path: str | os.PathLike, flag: str, kinds: Iterable[str], refuse_other: bool = True) -> None:
    """OutputRefused when the existing directory `path` holds something other than `kinds` (what this command
    writes): `--overwrite_output` replaces a command's own earlier output, never anything else. `refuse_other=False`
    leaves a directory of unrecognised files to the caller (xlpe-train writes beside what is there)."""
    held = directory_holds(path)
    if held is None or held in kinds or (held == "other" and not refuse_other):
        return
    raise OutputRefused(
        f"{flag} {os.fspath(path)}: holds {describe_kind(held, Path(path))}, not what this command writes; "
        f"it is not replaced, even with --overwrite_output: choose another {flag}"
    )


# ---------------------------------------------------------------------------------------------------------
# The destination can be written
# ---------------------------------------------------------------------------------------------------------


def _nearest_existing(path: Path) -> Path:
    for candidate in [path, *path.parents]:
        if candidate.exists():
            return candidate
    return Path("/")  # pragma: no cover


def check_writable_place(path: str | os.PathLike, flag: str, create_parents: bool = False) -> None:
    """OutputRefused when the directory that will hold `path` is missing (unless `create_parents`: then the nearest
    existing ancestor must be a writable directory), is not a directory, or cannot be written."""
    path = Path(os.path.expanduser(os.fspath(path)))
    parent = path.absolute().parent
    if not parent.exists() and not create_parents:
        raise OutputRefused(f"{flag} {os.fspath(path)}: no such directory {path.parent}")
    place = _nearest_existing(parent)
    if not place.is_dir():
        raise OutputRefused(f"{flag} {os.fspath(path)}: {place} is a file, not a directory")
    if not os.access(place, os.W_OK | os.X_OK):
        raise OutputRefused(f"{flag} {os.fspath(path)}: cannot write in {place} (permission denied)")


def check_destination(
    path: str | os.PathLike,
    flag: str,
    inputs: Mapping[str, object],
    *,
    overwrite: bool,
    kind: str = "file",
    owns: Iterable[str] = (),
    allow_flag: str = "--overwrite_output",
    create_parents: bool = False,
    refuse_other: bool = True,
    exists_ok: bool = False,
) -> None:
    """Every check an output gets before the command does any work, first failure raised as one line:

    1. not an input (`check_not_input`; even with `overwrite`);
    2. `kind="file"`: not an existing directory; `kind="dir"`: not an existing file, and an existing non-empty
       directory holds one of `owns` (`check_own_kind`; even with `overwrite`);
    3. an existing output needs `overwrite` (OutputExistsError naming `allow_flag`) unless `exists_ok` (commands
       that resume or reuse their directory decide themselves);
    4. its place can be written (`check_writable_place`)."""
    shown = os.fspath(path)
    check_not_input(path, flag, inputs)
    target = Path(os.path.expanduser(shown))
    if kind == "file" and target.is_dir():
        raise OutputRefused(f"{flag} {shown}: is a directory, expected a file name")
    if kind == "dir" and target.exists() and not target.is_dir():
        raise OutputRefused(f"{flag} {shown}: is a file, expected a directory")
    if kind == "dir" and target.is_dir():
        check_own_kind(target, flag, owns, refuse_other=refuse_other)
        if not overwrite and not exists_ok:  # (an empty one too: the command's own rule, found before any work)
            raise OutputExistsError(f"{flag} {shown}: the directory exists; pass {allow_flag} to replace it")
    elif target.exists() and not overwrite and not exists_ok:
        raise OutputExistsError(f"{flag} {shown}: the file exists; pass {allow_flag} to replace it")
    if target.exists():
        if not os.access(target.absolute().parent, os.W_OK | os.X_OK):
            raise OutputRefused(f"{flag} {shown}: cannot write in {target.absolute().parent} (permission denied)")
        return
    check_writable_place(target, flag, create_parents=create_parents)


# ---------------------------------------------------------------------------------------------------------
# One writer per output file
# ---------------------------------------------------------------------------------------------------------


def lock_path_for(path: str | os.PathLike) -> Path:
    """The lock file of an output file: `.<name>.xlpe.lock` beside it (beside its target when it is a symbolic link:
    the file written, `text_files.through_links`)."""
    path = through_links(path)
    return path.with_name(f".{path.name}.xlpe.lock")


@contextlib.contextmanager
def output_file_lock(path: str | os.PathLike, command: str, flag: str = "--output") -> Iterator[Path]:
    """Hold an exclusive lock on output file `path` for the block: `artefacts.directory_lock` on
    `.<name>.xlpe.lock` beside it (an advisory `flock`: a killed run leaves no stale lock; the file is removed when
    the block ends). A second command asking for it is refused at once: OutputRefused naming the holder (command,
    pid, start time)."""
    lock, held = lock_path_for(path), contextlib.ExitStack()
    try:
        held.enter_context(directory_lock(lock.parent, command, lock_file=lock))
    except DirectoryInUse as error:
        raise OutputRefused(
            f"{flag} {os.fspath(path)} is in use by {error.holder}: wait for it to finish or choose another {flag}"
        ) from None
    with held:
        yield lock


__all__ = [
    "KIND_MARKERS",
    "OutputRefused",
    "check_destination",
    "check_not_input",
    "check_own_kind",
    "check_writable_place",
    "describe_kind",
    "directory_holds",
    "lock_path_for",
    "output_file_lock",
]

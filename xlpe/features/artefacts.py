"""What made an artefact, recorded beside it and checked when it is reused; directories locked while in use.

Every artefact a command reuses (output and work directories, caches, plans, shards, fold checkpoints, reorderers,
attached tokenizers and reorderers, resume checkpoints) carries an `ArtefactRecord`: its kind, the code's format
version, the digests of the inputs it was made from and the options that shaped it. A command about to reuse an
artefact builds the record it *would* write and calls `verify_artefact`: a difference is an `ArtefactMismatch`, a
one-line ValueError naming the artefact, the first differing fact (old and new) and the flag that overrides the
check, so a rerun with other data or flags never silently keeps or mixes the old result (docs/command_line.md,
"Reruns, resumes and reused artefacts"). Options a resume may change (a learning rate, the number of steps) are
listed by the caller as `changeable`: they are returned, so the command can say which ones it applies.

Digests are SHA-256 of unambiguous encodings: `digest(value)` of canonical JSON (sorted keys, no whitespace: a
list of strings cannot collide with another list whose items contain the separator), `lines_digest` of
length-prefixed UTF-8 lines, `file_digest` of a file's bytes.

`directory_lock(path, command)`: an exclusive advisory lock (`fcntl.flock`) on `<path>/.xlpe.lock`; a second
process asking for it fails at once with `DirectoryInUse` naming the holder (pid, command, start time). The lock
goes with the process (a killed run leaves no stale lock). `shared=True` lets several jobs share a directory
(the shard jobs of one plan) while excluding an exclusive holder; `lock_file` puts the lock beside a directory
that the locked command itself removes or replaces.

Lowest layer but `models/`: imports nothing from xlpe.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

RECORD_NAME = "xlpe_artefact.json"
LOCK_NAME = ".xlpe.lock"
FORMAT_VERSION = 1  # bump when what an artefact holds changes meaning: older records are then refused by name


class ArtefactMismatch(ValueError):
    """A reused artefact made from other inputs, options or code: one line naming it, the difference and the override.
    Attributes: `path`, `fact` (the first differing fact: "kind", "format", "input <name>", "option <name>")."""

    def __init__(self, message: str, path: str, fact: str):
        super().__init__(message)
        self.path, self.fact = path, fact


class DirectoryInUse(ValueError):
    """Another live process holds the directory's lock; the message names it, `holder` is its line (command, pid,
    start time)."""

    def __init__(self, message: str, holder: str = ""):
        super().__init__(message)
        self.holder = holder


# ---------------------------------------------------------------------------------------------------------
# Digests of unambiguous encodings
# ---------------------------------------------------------------------------------------------------------


def canonical_json(value) -> str:
    """JSON with sorted keys and no insignificant whitespace: equal values give equal strings, and the encoding of
    a string never contains an unescaped separator, so different structures never encode alike."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def digest(value) -> str:
    """SHA-256 (hex) of `canonical_json(value)`."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def lines_digest(lines: Iterable[str]) -> str:
    """SHA-256 (hex) of the lines, each as its UTF-8 length (8 bytes) then its bytes: the line boundaries are part
    of the digest, whatever characters the lines hold."""
    hasher = hashlib.sha256()
    count = 0
    for line in lines:
        data = line.encode("utf-8", "surrogatepass")
        hasher.update(len(data).to_bytes(8, "little"))
        hasher.update(data)
        count += 1
    hasher.update(count.to_bytes(8, "little"))
    return hasher.hexdigest()


def file_digest(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """SHA-256 (hex) of a file's bytes, read in chunks."""
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            hasher.update(block)
    return hasher.hexdigest()


# ---------------------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------------------


@dataclass
class ArtefactRecord:
    """What made an artefact. `inputs`: name -> digest; `options`: name -> JSON value (the options that shape it)."""

    kind: str  # what the artefact is: "reorderer", "jackknife", "prepared-plan", "training-run", ...
    inputs: dict = field(default_factory=dict)  # name -> digest of an input (data file, tokenizer, model, ...)
    options: dict = field(default_factory=dict)  # name -> value of an option that shapes the artefact
    format: int = FORMAT_VERSION  # the code's format version when it was made

    def to_json(self) -> dict:
        return json.loads(canonical_json(asdict(self)))  # normalised (tuples -> lists), checked JSON-able


def record_path(directory: str | os.PathLike) -> Path:
    return Path(directory) / RECORD_NAME


def write_record(directory: str | os.PathLike, record: ArtefactRecord) -> Path:
    """Write `record` as `<directory>/xlpe_artefact.json`, atomically (a reader never sees half a record)."""
    path = record_path(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(
        json.dumps(record.to_json(), indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    os.replace(temporary, path)
    return path


def read_record(directory: str | os.PathLike) -> ArtefactRecord | None:
    """The record in `directory`, or None when there is none. A damaged record is an ArtefactMismatch naming the
    file and line (never a traceback from deep inside)."""
    path = record_path(directory)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ArtefactMismatch(
            f"{path}:{error.lineno}: not a valid artefact record ({error.msg}); delete the "
            "directory or pass the override flag to make it anew",
            str(path),
            "record",
        ) from None
    except UnicodeDecodeError:
        raise ArtefactMismatch(f"{path}: not UTF-8 text: not an artefact record", str(path), "record") from None
    expected = {"kind": str, "inputs": dict, "options": dict, "format": int}
    if not isinstance(data, dict) or any(not isinstance(data.get(key), kind) for key, kind in expected.items()):
        raise ArtefactMismatch(
            f"{path}: an artefact record needs kind (text), inputs and options (objects) and format (an integer)",
            str(path),
            "record",
        )
    return ArtefactRecord(kind=data["kind"], inputs=data["inputs"], options=data["options"], format=data["format"])


def _short(value) -> str:
    text = value if isinstance(value, str) else canonical_json(value)
    if isinstance(value, str) and len(text) == 64 and all(c in "0123456789abcdef" for c in text):
        return text[:12]  # a digest
    return text if len(text) <= 60 else text[:57] + "..."


def differences(old: ArtefactRecord, new: ArtefactRecord) -> list[tuple[str, object, object]]:
    """(fact, old value, new value) for every fact that differs, kind and format first, then inputs, options."""
    found = []
    if old.kind != new.kind:
        found.append(("kind", old.kind, new.kind))
    if old.format != new.format:
        found.append(("format", old.format, new.format))
    for section in ("inputs", "options"):
        before, after = getattr(old, section), getattr(new, section)
        for name in sorted(set(before) | set(after)):
            if canonical_json(before.get(name)) != canonical_json(after.get(name)):
                found.append((f"{section[:-1]} {name}", before.get(name), after.get(name)))
    return found


SHOWN_DIFFERENCES = 6  # the differences an ArtefactMismatch names (then how many more)


def verify_artefact(
    directory: str | os.PathLike,
    expected: ArtefactRecord,
    *,
    override: str,
    changeable: Iterable[str] = (),
    what: str | None = None,
) -> list[tuple[str, object, object]]:
    """Check that the artefact in `directory` was made as `expected` says. Returns the differing options listed in
    `changeable` (the caller applies them and says so); any other difference raises ArtefactMismatch:

        runs/reorderer: holds a reorderer made from other data and options (input source: 3f2a9c1b0d4e, now
        91bc07d2e8aa; option d_model: 256, now 512); pass --overwrite to replace it

    A directory without a record (made by an older version, or by hand) is refused the same way: what it holds
    cannot be checked. `what` names the artefact in the message (default: the directory)."""
    name = what or str(directory)
    old = read_record(directory)
    if old is None:
        raise ArtefactMismatch(
            f"{name}: holds no record of what made it ({RECORD_NAME}), so it cannot be reused "
            f"safely; pass {override} to make it anew",
            str(directory),
            "record",
        )
    changeable = {f"option {option}" for option in changeable}
    allowed, blocking = [], []
    for fact, before, after in differences(old, expected):
        (allowed if fact in changeable else blocking).append((fact, before, after))
    if blocking:
        fact, before, after = blocking[0]
        reason = {
            "kind": f"holds a {old.kind}, not a {expected.kind}",
            "format": f"was made by another version of xlpe (format {before}, now {after})",
        }.get(fact)
        if reason is None:  # every difference named (inputs first), old value, now the new one
            labels = [
                label
                for label, prefix in (("data", "input"), ("options", "option"))
                if any(other.startswith(prefix) for other, _, _ in blocking)
            ]
            shown = "; ".join(f"{f}: {_short(b)}, now {_short(a)}" for f, b, a in blocking[:SHOWN_DIFFERENCES])
            more = f"; and {len(blocking) - SHOWN_DIFFERENCES} more" if len(blocking) > SHOWN_DIFFERENCES else ""
            reason = f"holds a {old.kind} made from other {' and '.join(labels)} ({shown}{more})"
        raise ArtefactMismatch(f"{name}: {reason}; pass {override} to replace it", str(directory), fact)
    return [(fact.split(" ", 1)[1], before, after) for fact, before, after in allowed]


# ---------------------------------------------------------------------------------------------------------
# Directory locks
# ---------------------------------------------------------------------------------------------------------


def _holder(text: str) -> str:
    """The recorded holder of a lock ("CMD (pid N, since T)") if that process still lives, else a generic name."""
    import re

    match = re.search(r"\(pid (\d+),", text)
    if match:
        try:
            os.kill(int(match.group(1)), 0)
            return text
        except (ProcessLookupError, PermissionError, ValueError):
            pass
    return "another xlpe process"


@contextlib.contextmanager
def directory_lock(
    directory: str | os.PathLike, command: str, *, shared: bool = False, lock_file: str | os.PathLike | None = None
) -> Iterator[Path]:
    """Hold `<directory>/.xlpe.lock` (or `lock_file`) for the block; a conflicting holder -> DirectoryInUse at once.

    `shared=True` takes a shared lock: any number of shared holders (e.g. the shard jobs of one plan) run together,
    and an exclusive holder (planning anew, merging) waits for none of them: it is refused while any holds it."""
    import fcntl

    path = Path(directory)
    lock_path = Path(lock_file) if lock_file is not None else path / LOCK_NAME
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        handle = open(lock_path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle.fileno(), (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = _holder(handle.read().strip())
            handle.close()
            raise DirectoryInUse(
                f"{path} is in use by {holder}: wait for it to finish or choose another directory", holder
            ) from None
        try:  # the file an exclusive holder removed as it let go: lock the one at the path now
            same = os.fstat(handle.fileno()).st_ino == os.stat(lock_path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        handle.close()
    try:
        if not shared:  # the one holder says who it is (shared holders leave the last exclusive holder's line)
            handle.seek(0)
            handle.truncate()
            started = datetime.datetime.now().isoformat(timespec="seconds")
            handle.write(f"{command} (pid {os.getpid()}, since {started})\n")
            handle.flush()
        yield lock_path
    finally:
        if not shared:  # leave nothing behind: removed while still held (a waiting opener then retries above)
            with contextlib.suppress(OSError):
                lock_path.unlink()
        handle.close()  # releases the lock


__all__ = [
    "ArtefactMismatch",
    "ArtefactRecord",
    "DirectoryInUse",
    "FORMAT_VERSION",
    "LOCK_NAME",
    "RECORD_NAME",
    "canonical_json",
    "differences",
    "digest",
    "directory_lock",
    "file_digest",
    "lines_digest",
    "read_record",
    "record_path",
    "verify_artefact",
    "write_record",
]

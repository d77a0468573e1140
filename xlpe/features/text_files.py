"""The one reader of user text files, and the one writer of command outputs.

Every text file a user gives (parallel sources and targets, Pharaoh alignments, hypotheses, references, talp gold
alignments, order files, `xlpe-translate` input, stdin) is read by `read_text_lines` (or `decode_text_lines` for
bytes already in memory), with these rules (docs/command_line.md, "Text files"):

* **UTF-8 only.** Undecodable bytes raise `TextFileError` (a ValueError) naming `file:line:byte offset`, the bad
  byte and its column: `corpus.de:17: invalid UTF-8 at byte offset 5321 (invalid start byte: byte 0xff at column 4)`.
* **A byte-order mark at the start of the file is dropped** (editors on Windows write one; it would otherwise be
  glued to the first word of the first line).
* **No NUL bytes, no UTF-16/UTF-32.** A NUL byte is never text: a file holding one is a `TextFileError` naming
  `file:line`, and when the first kilobyte looks like UTF-16 or UTF-32 without a byte-order mark (NULs at every
  other byte: ASCII text in UTF-16) the message says so and how to convert: `looks like UTF-16-LE; convert to
  UTF-8 (iconv -f UTF-16LE -t UTF-8)`. (Without this check ASCII text in UTF-16 *is* valid UTF-8, its lines
  shifted by NUL bytes.) A UTF-16 or UTF-32 byte-order mark is refused the same way rather than decoded: the
  streaming readers (`scan_text_file`, `read_text_line_range`) work on UTF-8 byte offsets, and one encoding for
  every reader keeps line k of every file the same line.
* **Lines end at `\\n` only.** A `\\r` right before the `\\n` (a CRLF file) is part of the line terminator and
  removed, as is a `\\r` that ends the file; a bare `\\r` anywhere else stays *inside* its line: it never splits a
  line, so line k of the output is always line k of the input (Python's universal newlines, `str.splitlines()`
  and `open()` in text mode would split there and misalign every later line with its parallel file). Readers
  that split words with `str.split()` treat it as whitespace.
* **A final newline does not start another line**; an empty file has no lines.
* Names ending in `.gz` are decompressed (a corrupt gzip stream is a `TextFileError` too).

The whole file is read and decoded in bulk (no per-line Python work: a million lines in well under a second).

Outputs (`write_text_atomic`, `write_bytes_atomic`, `atomic_output_dir`) are written beside their final name and
renamed into place when complete, so a reader never sees half a file and two concurrent writers never interleave:
the last rename wins with a whole file. An output given as a symbolic link is written through it to its target
(`through_links`), never replaced by a file. An OSError while writing (a full disk, a vanished directory) removes the
temporary file and is an `OutputWriteError`: one line naming the output and the error. `check_output` refuses an
existing output unless the caller allows overwriting it; what else a command may not write over (its inputs,
another command's artefact, an unwritable place) is `xlpe.features.outputs`. `files_swapped_into` writes new
files into an existing directory the same way (staged beside it, swapped in, config.json last, put back on failure).
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import gzip
import hashlib
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BOM = b"\xef\xbb\xbf"


class TextFileError(ValueError):
    """A text file that cannot be read as UTF-8 lines; the message starts with `file:line:`.

    Attributes: `path` (str), `line` (1-based, or None), `byte_offset` (0-based offset in the decompressed file,
    or None)."""

    def __init__(self, message: str, path: str, line: int | None = None, byte_offset: int | None = None):
        super().__init__(message)
        self.path, self.line, self.byte_offset = path, line, byte_offset


class OutputWriteError(ValueError, OSError):
    """An output that could not be written (full disk, permissions, ...): one line naming the path and the error;
    the partial file was removed. Both a ValueError (a command's one-line user error) and an OSError."""


class OutputExistsError(ValueError):
    """An output that exists already and may not be overwritten; the message names it and the flag that allows it."""


# ----------------------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------------------

# byte-order marks of encodings the readers refuse (longest first: UTF-32-LE's starts like UTF-16-LE's)
FOREIGN_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32-LE", "UTF-32LE"),
    (b"\x00\x00\xfe\xff", "UTF-32-BE", "UTF-32BE"),
    (b"\xff\xfe", "UTF-16-LE", "UTF-16LE"),
    (b"\xfe\xff", "UTF-16-BE", "UTF-16BE"),
)
SNIFF_BYTES = 1024  # how much of a file `guess_wide_encoding` looks at


def guess_wide_encoding(data: bytes) -> tuple[str, str] | None:
    """(name, iconv name) when `data` (a file's first bytes) looks like UTF-16 or UTF-32: a UTF-16/32 byte-order
    mark, or NUL bytes at most positions of one parity (of four for UTF-32), as ASCII text in those encodings has.
    None otherwise."""
    for bom, name, iconv in FOREIGN_BOMS:
        if data.startswith(bom):
            return name, iconv
    head = data[:SNIFF_BYTES]
    if len(head) < 2 or b"\0" not in head:
        return None
    if len(head) >= 4:
        quads = [head[k::4].count(0) / len(head[k::4]) for k in range(4)]
        if quads[1] > 0.9 and quads[2] > 0.9 and quads[3] > 0.9 and quads[0] < 0.5:
            return "UTF-32-LE", "UTF-32LE"
        if quads[0] > 0.9 and quads[1] > 0.9 and quads[2] > 0.9 and quads[3] < 0.5:
            return "UTF-32-BE", "UTF-32BE"
    even, odd = head[0::2].count(0) / len(head[0::2]), head[1::2].count(0) / len(head[1::2])
    if odd >= 0.3 and odd > 2 * even:
        return "UTF-16-LE", "UTF-16LE"
    if even >= 0.3 and even > 2 * odd:
        return "UTF-16-BE", "UTF-16BE"
    return None


def check_not_utf16(data: bytes, origin: str = "<input>", base: bytes | None = None) -> None:
    """TextFileError naming `origin:line` when `data` starts with a UTF-16/UTF-32 byte-order mark or holds a NUL byte
    (a NUL is never text; the message says "looks like UTF-16-LE..." when the bytes look so, `guess_wide_encoding`).
    `base`: the file's first bytes, when `data` is a later part of it (the guess is made from the file's start)."""
    for bom, name, iconv in FOREIGN_BOMS if base is None else ():
        if data.startswith(bom):
            raise TextFileError(
                f"{origin}:1: starts with a {name} byte-order mark: not UTF-8 text; convert to UTF-8 "
                f"(iconv -f {iconv} -t UTF-8)",
                origin,
                1,
                0,
            )
    at = data.find(b"\0")
    if at < 0:
        return
    line_number = data.count(b"\n", 0, at) + 1
    column = at - (data.rfind(b"\n", 0, at) + 1)
    wide = guess_wide_encoding(data if base is None else base)
    advice = (
        f"looks like {wide[0]}; convert to UTF-8 (iconv -f {wide[1]} -t UTF-8)"
        if wide
        else "NUL bytes are not text; expected UTF-8 text"
    )
    raise TextFileError(
        f"{origin}:{line_number}: NUL byte at byte offset {at} (column {column}): {advice}", origin, line_number, at
    )


def decode_text_lines(data: bytes, origin: str = "<input>") -> list[str]:
    """The lines of UTF-8 `data` (rules in the module docstring); `origin` names the source in errors."""
    check_not_utf16(data, origin)
    offset = len(BOM) if data.startswith(BOM) else 0
    try:
        text = data[offset:].decode("utf-8") if offset else data.decode("utf-8")
    except UnicodeDecodeError as error:
        start = error.start + offset
        line_number = data.count(b"\n", 0, start) + 1
        column = start - (data.rfind(b"\n", 0, start) + 1)
        raise TextFileError(
            f"{origin}:{line_number}: invalid UTF-8 at byte offset {start} ({error.reason}: byte {data[start]:#04x} "
            f"at column {column}); expected UTF-8 text",
            origin,
            line_number,
            start,
        ) from None
    if not text:
        return []
    if "\r" in text:
        text = text.replace("\r\n", "\n")  # CRLF line ends; a bare \r stays inside its line
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline does not start another line
    elif lines[-1].endswith("\r"):
        lines[-1] = lines[-1][:-1]  # a CRLF file cut before its last \n
    return lines


def read_text_bytes(path: str | os.PathLike) -> bytes:
    """The bytes of a file (decompressed when the name ends in .gz); a corrupt gzip stream is a TextFileError."""
    path = Path(path)
    if path.suffix != ".gz":
        return path.read_bytes()
    try:
        with gzip.open(path, "rb") as handle:
            return handle.read()
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise TextFileError(f"{path}: not a readable gzip file ({error})", str(path)) from None


def read_text_lines(path: str | os.PathLike) -> list[str]:
    """Lines of a UTF-8 text file (plain, or gzip if the name ends in .gz), without line terminators.

    Raises TextFileError (a ValueError) naming the file, the 1-based line and the byte offset of the first
    undecodable byte. A leading byte-order mark is dropped; lines end at `\\n` (CRLF too), never at a bare `\\r`."""
    return decode_text_lines(read_text_bytes(path), str(path))


# ----------------------------------------------------------------------------------------------------------
# Reading a corpus too large to hold: one scan, then line ranges
# ----------------------------------------------------------------------------------------------------------

SCAN_BLOCK = 1 << 23  # bytes read at a time by `scan_text_file` and `read_text_line_range`


@dataclass
class TextFileScan:
    """What one streaming pass over a text file learned: its line count (by `read_text_lines`' rules), the
    SHA-256 of its (decompressed) bytes, and the byte offset at which every `every`-th line starts."""

    path: str
    lines: int
    sha256: str
    line_offsets: list[int]  # line_offsets[k] = byte offset (decompressed) of line k * every


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def scan_text_file(path: str | os.PathLike, every: int) -> TextFileScan:
    """Count the lines of a UTF-8 text file (plain or .gz) in one streaming pass of bounded memory, checking that
    it decodes (a TextFileError naming file:line:byte as `read_text_lines` would), hashing it, and recording the
    byte offset of every `every`-th line so that `read_text_line_range` can start there."""
    path = Path(path)
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    digest, decoder = hashlib.sha256(), codecs.getincrementaldecoder("utf-8")()
    offsets, newlines, consumed, last, head = [0], 0, 0, b"\n", b""
    try:
        with _open_binary(path) as handle:
            first = handle.read(len(BOM))
            if first == BOM:  # the BOM is not part of line 1 (read_text_lines)
                head, consumed = BOM, len(BOM)
                digest.update(first)
            while block := (handle.read(SCAN_BLOCK) if head or consumed else first + handle.read(SCAN_BLOCK)):
                digest.update(block)
                if not consumed:
                    check_not_utf16(block[:SNIFF_BYTES], str(path))  # a UTF-16/32 byte-order mark
                if b"\0" in block:  # located (file:line) by the bulk reader on the bytes up to it
                    decode_text_lines(_bytes_up_to_error(path, consumed + block.index(b"\0") + 1), str(path))
                try:
                    decoder.decode(block)
                except UnicodeDecodeError:  # locate it with the bulk decoder's message (file:line:byte)
                    decode_text_lines(_bytes_up_to_error(path, consumed + len(block)), str(path))
                    raise  # pragma: no cover - the bulk decoder raised already
                ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
                first_line = newlines + 1  # the line started after the k-th newline is line k (0-based)
                wanted = np.arange(-(-first_line // every) * every, newlines + len(ends) + 1, every)
                offsets += (consumed + ends[wanted - first_line] + 1).tolist()
                newlines, consumed, last = newlines + len(ends), consumed + len(block), block[-1:]
            decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        decode_text_lines(_bytes_up_to_error(path, consumed), str(path))
        raise  # pragma: no cover
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise TextFileError(f"{path}: not a readable gzip file ({error})", str(path)) from None
    lines = newlines + (1 if consumed > len(head) and last != b"\n" else 0)
    return TextFileScan(str(path), lines, digest.hexdigest(), [o for k, o in enumerate(offsets) if k * every < lines])


def count_text_lines(path: str | os.PathLike) -> int:
    """The number of lines `read_text_lines` would return, counted in one streaming pass (no decoding)."""
    path = Path(path)
    newlines, consumed, last, head = 0, 0, b"\n", 0
    try:
        with _open_binary(path) as handle:
            first = handle.read(len(BOM))
            if first == BOM:
                head = consumed = len(BOM)
            while block := (handle.read(SCAN_BLOCK) if head or consumed else first + handle.read(SCAN_BLOCK)):
                newlines, consumed, last = newlines + block.count(b"\n"), consumed + len(block), block[-1:]
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise TextFileError(f"{path}: not a readable gzip file ({error})", str(path)) from None
    return newlines + (1 if consumed > head and last != b"\n" else 0)


def _bytes_up_to_error(path: Path, end: int) -> bytes:
    with _open_binary(path) as handle:
        return handle.read(end)


def read_text_line_range(path: str | os.PathLike, start: int, stop: int, start_offset: int | None = None) -> list[str]:
    """Lines start..stop-1 (0-based) of a UTF-8 text file, by `read_text_lines`' rules, reading only what it must:
    from `start_offset` (the byte offset of line `start`, from `scan_text_file`; plain files seek there, gzip
    decompresses up to it) or from the beginning. Errors name the file, the absolute line and byte offset."""
    path = Path(path)
    if stop <= start:
        return []
    line = position = 0
    data = b""
    with _open_binary(path) as handle:
        if start_offset:
            handle.seek(start_offset)
            line, position = start, start_offset
        while line < start:  # skip whole lines up to `start`, counting newlines only
            block = handle.read(SCAN_BLOCK)
            if not block:
                return []
            ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
            if start - line > len(ends):
                line, position = line + len(ends), position + len(block)
                continue
            cut = int(ends[start - line - 1]) + 1
            data, line, position = block[cut:], start, position + cut
        chunks, wanted, seen = [data], stop - start, data.count(b"\n")
        while seen < wanted and (block := handle.read(SCAN_BLOCK)):
            chunks.append(block)
            seen += block.count(b"\n")
    data = b"".join(chunks)
    if seen >= wanted:  # cut after the last wanted line's newline
        data = data[: int(np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)[wanted - 1]) + 1]
    inside = position > 0  # not at the file's start: a leading BOM belongs to the line (kept by a leading "\n")
    try:
        lines = decode_text_lines(b"\n" + data if inside else data, str(path))
    except TextFileError as error:  # numbers relative to this range: make them absolute
        number, at = error.line + start - inside, error.byte_offset + position - inside
        message = str(error).replace(f"{path}:{error.line}:", f"{path}:{number}:", 1)
        raise TextFileError(
            message.replace(f"byte offset {error.byte_offset}", f"byte offset {at}", 1), str(path), number, at
        ) from None
    return lines[1:] if inside else lines


# ----------------------------------------------------------------------------------------------------------
# Writing outputs
# ----------------------------------------------------------------------------------------------------------


def check_output(path: str | os.PathLike, flag: str, overwrite: bool, allow_flag: str = "--overwrite_output") -> None:
    """OutputExistsError when `path` exists and `overwrite` is false (the message names `flag` and `allow_flag`);
    ValueError when its parent directory does not exist."""
    path = Path(path)
    if path.exists() and not overwrite:
        kind = "directory" if path.is_dir() else "file"
        raise OutputExistsError(f"{flag} {path}: the {kind} exists; pass {allow_flag} to replace it")
    if not path.parent.is_dir():
        raise ValueError(f"{flag} {path}: no such directory {path.parent}")


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to a temporary file beside `path`, then rename it to `path`: readers see the old file
    or the whole new one, and of two concurrent writers the last one to finish wins with its whole file. The
    file gets the mode a plain `open()` would give it (the umask). The temporary file is removed on failure."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def through_links(path: str | os.PathLike) -> Path:
    """`path`, or where it points when it is a symbolic link (followed to the end; a dangling link gives the missing
    target): an output given as a link is written *through* it, to its target, and the link stays a link."""
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """`write_text_atomic` for bytes already encoded (a PNG, say): same temporary file, rename, mode and cleanup.
    A symbolic link is written through (`through_links`): its target gets the new content."""
    path = through_links(path)
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        raise OutputWriteError(f"cannot write {path}: {error.strerror or error}") from None
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError) and not isinstance(error, OutputWriteError):
            hint = "; free some space or write elsewhere" if is_disk_full(error) else ""
            raise OutputWriteError(
                f"cannot write {path}: {error.strerror or error} (nothing was written there{hint})"
            ) from None
        raise
    return path


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(error: BaseException) -> bool:
    """Whether `error` says the disk (or the user's quota) is full: an OSError of ENOSPC/EDQUOT, or the plain
    Exception the Rust `tokenizers` library raises for one ("No space left on device (os error 28)")."""
    if isinstance(error, OSError):
        return error.errno in DISK_FULL_ERRNOS
    return type(error) is Exception and any(f"(os error {code})" in str(error) for code in DISK_FULL_ERRNOS)


@contextlib.contextmanager
def staging_dir(path: str | os.PathLike, create_parent: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory beside `path` (creating its parent if asked), with the mode a plain
    `mkdir` would give it under the umask (mkdtemp's 0700 would keep a shared folder from its other users);
    removed if the block raises (a full disk there: OutputWriteError naming `path`). The caller renames it into
    place."""
    path = Path(path)
    if create_parent:
        path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    os.chmod(staging, 0o777 & ~_umask())
    try:
        yield staging
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if is_disk_full(error) and not isinstance(error, OutputWriteError):
            reason = error.strerror if isinstance(error, OSError) and error.strerror else "No space left on device"
            raise OutputWriteError(
                f"cannot write {path}: {reason} (nothing was left there; free some space or write elsewhere)"
            ) from None
        raise


@contextlib.contextmanager
def atomic_output_dir(path: str | os.PathLike, overwrite: bool = True) -> Iterator[Path]:
    """Yield a fresh temporary directory beside `path` (`staging_dir`); when the block finishes, it replaces
    `path` (an existing directory is moved aside first and deleted after the rename, so `path` is always a
    complete directory). On an exception the temporary directory is removed and `path` is left as it was.
    `overwrite=False`: an existing `path` (say, written by a concurrent run meanwhile) is an OutputExistsError. A
    symbolic link is written through (`through_links`): the directory it points to is replaced, the link stays."""
    path = through_links(path)
    with staging_dir(path) as staging:
        yield staging
        if path.exists():
            if not overwrite:
                raise OutputExistsError(f"{path}: exists (written meanwhile?); pass --overwrite_output to replace it")
            if not path.is_dir():
                raise ValueError(f"output {path} is a file, expected a directory")
            retired = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, retired / "old")
            os.replace(staging, path)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(staging, path)


@contextlib.contextmanager
def files_swapped_into(directory: str | os.PathLike, last: Sequence[str] = ("config.json",), stale=None):
    """Yield a fresh temporary directory beside `directory` (`staging_dir`); when the block finishes, each file and
    folder written there replaces its namesake in the existing `directory`, the names in `last` after all others
    (config.json: a model's commit point, so a kill in between leaves the old config over the new weights, which
    loads as the old model), and `stale(name)` (e.g. old weight shards) removes other entries of `directory`. The
    rest of `directory` (checkpoints, results, its lock) is untouched. An exception, in the block or while
    swapping, puts back every entry already replaced: `directory` is as it was. A symbolic link is written through."""
    directory = through_links(directory)
    with staging_dir(directory) as staging:
        yield staging
        retired = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".old", dir=directory.parent))
        moved: list[tuple[Path, Path | None]] = []  # (entry in directory, its old version kept in retired)
        names = sorted(entry.name for entry in staging.iterdir())
        names = [n for n in names if n not in last] + [n for n in last if n in names]
        old_only = [e.name for e in directory.iterdir() if stale is not None and e.name not in names and stale(e.name)]
        try:
            for name in old_only:
                os.replace(directory / name, retired / name)
                moved.append((directory / name, retired / name))
            for name in names:
                target = directory / name
                kept = None
                if os.path.lexists(target):
                    kept = retired / name
                    os.replace(target, kept)
                moved.append((target, kept))
                os.replace(staging / name, target)
        except BaseException:
            for target, kept in reversed(moved):  # the new entry out, the old one back
                if os.path.isdir(target) and not os.path.islink(target):
                    shutil.rmtree(target, ignore_errors=True)
                elif os.path.lexists(target):
                    os.unlink(target)
                if kept is not None and os.path.lexists(kept):
                    os.replace(kept, target)
            raise
        finally:
            shutil.rmtree(retired, ignore_errors=True)
            shutil.rmtree(staging, ignore_errors=True)


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


__all__ = [
    "BOM",
    "OutputExistsError",
    "OutputWriteError",
    "TextFileError",
    "TextFileScan",
    "atomic_output_dir",
    "files_swapped_into",
    "check_not_utf16",
    "check_output",
    "count_text_lines",
    "decode_text_lines",
    "guess_wide_encoding",
    "is_disk_full",
    "read_text_bytes",
    "read_text_line_range",
    "read_text_lines",
    "scan_text_file",
    "staging_dir",
    "through_links",
    "write_bytes_atomic",
    "write_text_atomic",
]

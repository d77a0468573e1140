"""The one text reader (`xlpe.features.text_files`) and every reader built on it: line ends (LF, CRLF, never a bare
CR), byte-order marks, non-UTF-8 bytes reported as file:line:byte offset, gzip; and a property test feeding random
bytes to every reader of user text, whose only outcomes may be the expected lines or the documented error."""

from __future__ import annotations

import gzip
import io
import re
import sys
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xlpe.evaluation import alignment_quality as aq
from xlpe.evaluation.metrics import read_lines
from xlpe.features import alignment
from xlpe.features.corpus import read_parallel_files
from xlpe.features.text_files import (
    BOM,
    OutputExistsError,
    TextFileError,
    atomic_output_dir,
    check_output,
    decode_text_lines,
    read_text_lines,
    write_text_atomic,
)


def expected_lines(data: bytes) -> list[str]:
    """The documented rules, written line by line (the reader does the same in bulk)."""
    text = data.removeprefix(BOM).decode("utf-8")
    parts = text.split("\n")
    if parts[-1] == "":
        parts.pop()
    return [part[:-1] if part.endswith("\r") else part for part in parts]


def test_line_ends_bom_and_gzip(tmp_path):
    cases = {
        b"one\r\ntwo\n\nfour": ["one", "two", "", "four"],
        b"a\rb\nc\n": ["a\rb", "c"],  # a bare CR never splits a line
        b"a\r\r\nb\r": ["a\r", "b"],  # CRLF is the terminator; a CR ending the file too
        BOM + b"erste Zeile\nzweite\n": ["erste Zeile", "zweite"],
        b"x\n" + BOM + b"y\n": ["x", "\ufeffy"],  # only a mark at the start of the file is one
        b"": [],
        b"\n": [""],
        b"\r": [""],
    }
    for data, lines in cases.items():
        path = tmp_path / "f.txt"
        path.write_bytes(data)
        assert read_text_lines(path) == lines == expected_lines(data), data
        packed = tmp_path / "f.txt.gz"
        packed.write_bytes(gzip.compress(data))
        assert read_text_lines(packed) == lines


def test_invalid_utf8_names_file_line_and_byte_offset(tmp_path):
    path = tmp_path / "broken.de"
    path.write_bytes(b"gut\nauch gut\nabc\xffdef\n")
    with pytest.raises(
        TextFileError, match=rf"^{path}:3: invalid UTF-8 at byte offset 16 .*byte 0xff at column 3"
    ) as info:
        read_text_lines(path)
    assert (info.value.path, info.value.line, info.value.byte_offset) == (str(path), 3, 16)
    assert isinstance(info.value, ValueError)
    path.write_bytes(BOM + b"\xc3(")  # the offset counts the mark too: it is an offset in the file
    with pytest.raises(TextFileError, match=r":1: invalid UTF-8 at byte offset 3 "):
        read_text_lines(path)
    bad_gzip = tmp_path / "x.gz"
    bad_gzip.write_bytes(b"not gzip at all")
    with pytest.raises(TextFileError, match=rf"{bad_gzip}: not a readable gzip file"):
        read_text_lines(bad_gzip)


def test_every_reader_uses_the_one_implementation():
    assert alignment.read_text_lines is read_text_lines


def test_atomic_outputs(tmp_path):
    target = tmp_path / "out.txt"
    write_text_atomic(target, "a\n")
    with pytest.raises(OutputExistsError, match=rf"--output {target}: the file exists; pass --overwrite_output"):
        check_output(target, "--output", overwrite=False)
    check_output(target, "--output", overwrite=True)
    with pytest.raises(ValueError, match="no such directory"):
        check_output(tmp_path / "nowhere" / "x", "--output", overwrite=False)
    texts = [f"{k}\n" * 20000 for k in range(6)]  # concurrent writers: the last rename wins, whole files only
    threads = [threading.Thread(target=write_text_atomic, args=(target, text)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert target.read_text() in texts
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # no temporary file left

    directory = tmp_path / "prepared"
    with pytest.raises(RuntimeError), atomic_output_dir(directory) as staging:
        (staging / "half").write_text("x")
        raise RuntimeError("failed half way")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # nothing left behind
    with atomic_output_dir(directory) as staging:
        (staging / "one").write_text("1")
    with atomic_output_dir(directory) as staging:
        (staging / "two").write_text("2")
    assert sorted(p.name for p in directory.iterdir()) == ["two"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt", "prepared"]


# ------------------------------------------------------------------------------------------ property test

PIECES = [
    b"a",
    b"b c",
    b" ",
    b"\t",
    b"\r",
    b"\n",
    b"\r\n",
    BOM,
    b"\xff",
    b"\xc3",
    "\u00fc".encode(),
    "\u732b".encode(),
    b"0-1",
    b"1p2",
    b" ||| ",
    b"\x00",
]
random_bytes = st.one_of(st.binary(max_size=40), st.lists(st.sampled_from(PIECES), max_size=25).map(b"".join))
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _outcome(data: bytes):
    """(lines, None) or (None, (line, byte offset)) by the documented rules: a UTF-16/32 byte-order mark is an error
    at line 1, offset 0; then the first NUL byte is one; then the first byte that is not UTF-8."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")):
        return None, (1, 0)
    if b"\0" in data:
        at = data.index(b"\0")
        return None, (data.count(b"\n", 0, at) + 1, at)
    try:
        return expected_lines(data), None
    except UnicodeDecodeError:
        try:
            data.decode("utf-8")  # the offset in the file (a leading mark is valid UTF-8 itself)
        except UnicodeDecodeError as error:
            return None, (data.count(b"\n", 0, error.start) + 1, error.start)
        raise


# what an error says after `file:line: `: bytes that are not UTF-8, a NUL byte, or a UTF-16/32 byte-order mark
ERROR_KINDS = r"(invalid UTF-8 at byte offset {offset} |NUL byte at byte offset {offset} |starts with a UTF-)"


@SETTINGS
@given(data=random_bytes)
def test_line_readers_give_the_expected_lines_or_the_documented_error(tmp_path, data):
    from xlpe.cli.translate import read_input

    path = tmp_path / "text.txt"
    path.write_bytes(data)
    lines, error = _outcome(data)
    readers = [
        read_text_lines,
        read_lines,
        read_input,
        lambda p: decode_text_lines(p.read_bytes(), str(p)),
        lambda p: read_parallel_files(p, p).sources,
    ]
    for reader in readers:
        if error is None:
            assert reader(path) == lines
        else:
            with pytest.raises(TextFileError) as info:
                reader(path)
            assert (info.value.line, info.value.byte_offset) == error
            assert re.match(re.escape(f"{path}:{error[0]}: ") + ERROR_KINDS.format(offset=error[1]), str(info.value))


@SETTINGS
@given(data=random_bytes)
def test_stdin_reader(monkeypatch, data):
    from xlpe.cli.translate import read_input

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    lines, error = _outcome(data)
    if error is None:
        assert read_input("-") == lines
    else:
        with pytest.raises(TextFileError, match=rf"^<stdin>:{error[0]}: " + ERROR_KINDS.format(offset=error[1])):
            read_input("-")


@SETTINGS
@given(data=random_bytes)
def test_parsing_readers_give_one_entry_per_line_or_a_value_error(tmp_path, data):
    """Readers that parse their lines (gold and predicted alignments, Pharaoh files, order files): one entry per
    expected line, or a ValueError (TextFileError, AlignmentFormatError, a malformed line) naming the file."""
    from xlpe.cli.reorder import read_orders

    path = tmp_path / "parsed.txt"
    path.write_bytes(data)
    lines, _ = _outcome(data)
    count = len(lines) if lines is not None else 0
    readers = [
        aq.read_talp,
        aq.read_links,
        lambda p: read_orders(str(p), [2] * count),
        lambda p: alignment.read_pharaoh_file(p, [3] * count, [3] * count),
    ]
    for reader in readers:
        try:
            parsed = reader(path)
        except ValueError as error:
            assert str(path) in str(error)
        else:
            assert lines is not None and len(parsed) == len(lines)


# ----------------------------------------------------------------------------------------------------------
# Streaming scan and line ranges (corpus scale): the same lines as read_text_lines, in pieces
# ----------------------------------------------------------------------------------------------------------

PIECES = st.sampled_from([b"a", b"word ", b" ", b"\r", b"\n", b"\r\n", "é".encode(), "\ufeff".encode()])


@settings(max_examples=150, deadline=None)
@given(pieces=st.lists(PIECES, max_size=30), every=st.integers(1, 4), block=st.integers(1, 9), gz=st.booleans())
def test_scan_and_line_ranges_match_read_text_lines(tmp_path_factory, pieces, every, block, gz):
    import gzip as gzip_module

    from xlpe.features import text_files

    data = b"".join(pieces)
    path = tmp_path_factory.mktemp("scan") / ("f.txt.gz" if gz else "f.txt")
    path.write_bytes(gzip_module.compress(data) if gz else data)
    expected = text_files.read_text_lines(path)
    original = text_files.SCAN_BLOCK
    text_files.SCAN_BLOCK = block  # tiny blocks: every line and BOM straddles a block boundary somewhere
    try:
        scan = text_files.scan_text_file(path, every)
        assert scan.lines == len(expected) == text_files.count_text_lines(path)
        for k, offset in enumerate(scan.line_offsets):
            for stop in range(k * every, len(expected) + 2):
                assert text_files.read_text_line_range(path, k * every, stop, offset) == expected[k * every : stop]
        for start in range(len(expected) + 1):
            assert text_files.read_text_line_range(path, start, len(expected) + 1) == expected[start:]
    finally:
        text_files.SCAN_BLOCK = original


def test_line_range_errors_name_the_absolute_line(tmp_path):
    from xlpe.features.text_files import TextFileError, read_text_line_range, scan_text_file

    path = tmp_path / "bad.txt"
    path.write_bytes(b"x\n" * 10 + b"bad\xffbyte\n" + b"y\n")
    message = r"bad.txt:11: invalid UTF-8 at byte offset 23 \(invalid start byte: byte 0xff at column 3\)"
    with pytest.raises(TextFileError, match=message):
        scan_text_file(path, 4)
    for start, offset in ((0, 0), (4, 8), (10, 20)):
        with pytest.raises(TextFileError, match=message) as error:
            read_text_line_range(path, start, 12, offset)
        assert (error.value.line, error.value.byte_offset) == (11, 23)

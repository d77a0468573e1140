"""Text input that cannot be silently misread (xlpe.features.text_files; docs/command_line.md, "Text files"): NUL
bytes and UTF-16/UTF-32 (with or without a byte-order mark) are refused naming file:line, by every reader (bulk,
streaming scan, line ranges) and so by every command (xlpe-translate, xlpe-prepare here)."""

from __future__ import annotations

import pytest
from conftest import TOY_SENTENCES, save_tiny_xlpe_model
from hypothesis import given, settings
from hypothesis import strategies as st

from xlpe.cli import prepare, translate
from xlpe.features.text_files import (
    TextFileError,
    decode_text_lines,
    read_text_line_range,
    read_text_lines,
    scan_text_file,
)

LINES = ["the cat sees the dog", "a dog", "die katze", "x", "last line"]
ENCODINGS = {  # name -> (bytes of LINES, what the message must say)
    "utf-16-le": ("utf-16-le", "looks like UTF-16-LE; convert to UTF-8 (iconv -f UTF-16LE -t UTF-8)"),
    "utf-16-be": ("utf-16-be", "looks like UTF-16-BE; convert to UTF-8 (iconv -f UTF-16BE -t UTF-8)"),
    "utf-16-bom": ("utf-16", "UTF-16-LE byte-order mark"),
    "utf-16-be-bom": ("utf-16-be", "UTF-16-BE byte-order mark"),
    "utf-32-le": ("utf-32-le", "looks like UTF-32-LE"),
}


def encoded(name: str) -> bytes:
    codec, _ = ENCODINGS[name]
    data = "".join(line + "\n" for line in LINES).encode(codec)
    return ("\ufeff".encode(codec) + data) if name == "utf-16-be-bom" else data


def readers(path):
    return {
        "read_text_lines": lambda: read_text_lines(path),
        "scan_text_file": lambda: scan_text_file(path, 2),
        "read_text_line_range": lambda: read_text_line_range(path, 0, 3),
    }


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_utf16_and_utf32_are_refused_by_every_reader(tmp_path, name):
    path = tmp_path / "corpus.en"
    path.write_bytes(encoded(name))
    for reader, read in readers(path).items():
        with pytest.raises(TextFileError) as error:
            read()
        assert str(error.value).startswith(f"{path}:1: ") and ENCODINGS[name][1] in str(error.value), reader


def test_a_nul_byte_is_refused_naming_its_line(tmp_path):
    path = tmp_path / "corpus.en"
    path.write_bytes(b"one\ntwo\nthr\x00ee\nfour\n")
    for reader, read in [*readers(path).items(), ("range from line 2", lambda: read_text_line_range(path, 2, 4, 8))]:
        with pytest.raises(TextFileError) as error:
            read()
        assert str(error.value).startswith(f"{path}:3: NUL byte at byte offset 11"), (reader, str(error.value))
        assert error.value.line == 3


# any text without NUL and without line breaks inside lines; a leading U+FEFF would be taken for a byte-order mark
LINE = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\n\r\ufeff"), max_size=20)


@settings(max_examples=200, deadline=None)
@given(st.lists(LINE, max_size=8))
def test_utf8_lines_round_trip(lines):
    assert decode_text_lines("".join(line + "\n" for line in lines).encode("utf-8")) == lines


@settings(max_examples=200, deadline=None)
@given(st.lists(LINE, min_size=1, max_size=8), st.sampled_from(["utf-16-le", "utf-16-be"]))
def test_utf16_without_bom_is_refused_when_it_has_an_ascii_char(lines, codec):
    text = "".join(line + "\n" for line in lines)  # the newline is an ASCII char: a NUL byte in UTF-16
    with pytest.raises(TextFileError):
        decode_text_lines(text.encode(codec), "f")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, toy_tokenizer):
    return save_tiny_xlpe_model(toy_tokenizer, tmp_path_factory.mktemp("model") / "M")


def _one_error(capsys, prog):
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith(f"{prog}: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
    return lines[0]


@pytest.mark.parametrize("name", ["utf-16-le", "utf-16-be", "utf-16-bom", "nul-line-3"])
def test_translate_and_prepare_refuse_them(tmp_path, capsys, model_dir, name):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"a b\nc d\ne\x00f\n" if name == "nul-line-3" else encoded(name))
    good = tmp_path / "good.txt"
    good.write_text("".join(line + "\n" for line in (TOY_SENTENCES[:3] if name == "nul-line-3" else LINES)))
    where = f"{bad}:3: NUL byte" if name == "nul-line-3" else f"{bad}:1: "
    out = tmp_path / "out.txt"
    assert translate.main(["--model", str(model_dir), "--input", str(bad), "--output", str(out), "--quiet"]) == 2
    assert _one_error(capsys, "xlpe-translate").startswith(f"xlpe-translate: error: {where}")
    assert not out.exists()
    with pytest.raises(SystemExit) as exit:
        prepare.main(["--source", str(good), "--target", str(bad), "--output", str(tmp_path / "prepared")])
    assert exit.value.code == 2
    assert _one_error(capsys, "xlpe-prepare").startswith(f"xlpe-prepare: error: {where}")
    assert not (tmp_path / "prepared").exists()

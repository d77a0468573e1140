"""Word alignment: Pharaoh parsing and files, symmetrisation, eflomal on real sentence pairs."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xlpe.alignment import (
    AlignmentFormatError,
    align_with_eflomal,
    eflomal_directional,
    format_pharaoh,
    grow_diag_final,
    parse_pharaoh_line,
    read_pharaoh_file,
    read_text_lines,
    symmetrize,
)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
MULTI30K = SHARED_DATA / "multi30k" / "raw"
FAST_EFLOMAL = dict(n_iterations=(4, 4, 8), n_samplers=1)  # test speed; the defaults iterate far longer


def pairs(flat):
    return sorted(zip(flat[0::2], flat[1::2]))


# ---------------------------------------------------------------- files and Pharaoh lines


def test_parse_pharaoh_line():
    assert parse_pharaoh_line("0-0 2-1  1-3\n", 3, 4) == [0, 0, 2, 1, 1, 3]
    assert parse_pharaoh_line("", 0, 0) == []
    assert format_pharaoh([0, 0, 2, 1]) == "0-0 2-1" == format_pharaoh([(0, 0), (2, 1)])
    for bad in ("0-", "a-1", "1:2", "1-2-3", "-1-2", "1p2", "１-2"):
        with pytest.raises(AlignmentFormatError, match=r"align\.txt:7: malformed alignment link"):
            parse_pharaoh_line(f"0-0 {bad}", 5, 5, "align.txt", 7)
    with pytest.raises(AlignmentFormatError, match=r"align\.txt:3: link 2-1 is outside .* i < 2 .* j < 5"):
        parse_pharaoh_line("0-0 2-1", 2, 5, "align.txt", 3)
    with pytest.raises(AlignmentFormatError, match="j < 1 target words"):
        parse_pharaoh_line("0-1", 2, 1, "align.txt", 3)


def test_read_pharaoh_file(tmp_path):
    path = tmp_path / "links.txt"
    path.write_text("0-0 1-1\n\n0-1\n")
    assert read_pharaoh_file(path, [2, 0, 1], [2, 0, 2]) == [[0, 0, 1, 1], [], [0, 1]]
    with pytest.raises(ValueError, match=rf"{path} has 3 lines, src\.txt has 2"):
        read_pharaoh_file(path, [2, 0], [2, 0], "src.txt")
    with pytest.raises(AlignmentFormatError, match=rf"{path}:3: link 0-1 is outside"):
        read_pharaoh_file(path, [2, 0, 1], [2, 0, 1])


def test_read_text_lines(tmp_path):
    plain = tmp_path / "a.txt"
    plain.write_bytes(b"one\r\ntwo\n\nfour")
    assert read_text_lines(plain) == ["one", "two", "", "four"]
    packed = tmp_path / "a.txt.gz"
    with gzip.open(packed, "wb") as handle:
        handle.write("ein\nzwei\n".encode())
    assert read_text_lines(packed) == ["ein", "zwei"]
    broken = tmp_path / "broken.txt"
    broken.write_bytes(b"fine\nstill fine\nbad \xff byte\n")
    with pytest.raises(ValueError, match=rf"{broken}:3: invalid UTF-8 .*0xff at column 4"):
        read_text_lines(broken)


# ---------------------------------------------------------------- symmetrisation


def test_symmetrization_methods_on_a_worked_example():
    # forward and reverse agree on 0-0 and 2-2; grow-diag adds 1-1 (diagonal neighbour, both ends free);
    # 1-2 is no longer addable (both ends aligned); final-and adds 3-4 (both ends free, forward only)
    forward = [(0, 0), (1, 1), (2, 2), (3, 4)]
    reverse = [(0, 0), (1, 2), (2, 2)]
    assert pairs(symmetrize([forward], [reverse], "intersection")[0]) == [(0, 0), (2, 2)]
    assert pairs(symmetrize([forward], [reverse], "union")[0]) == [(0, 0), (1, 1), (1, 2), (2, 2), (3, 4)]
    assert pairs(symmetrize([forward], [reverse], "grow-diag")[0]) == [(0, 0), (1, 1), (2, 2)]
    assert pairs(symmetrize([forward], [reverse], "grow-diag-final-and")[0]) == [(0, 0), (1, 1), (2, 2), (3, 4)]
    assert pairs(symmetrize([forward], [reverse], "forward")[0]) == forward
    with pytest.raises(ValueError, match="unknown symmetrization"):
        symmetrize([forward], [reverse], "grow")
    # final (or) also takes a link with one free end; final-and does not
    assert (1, 2) not in grow_diag_final([(0, 0), (1, 1)], [(1, 2)], final="and")
    assert (1, 2) in grow_diag_final([(0, 0), (5, 5)], [(1, 2), (1, 5)], final="or")


@st.composite
def directional_alignments(draw):
    n, m = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    cells = st.tuples(st.integers(0, n - 1), st.integers(0, m - 1))
    return sorted(draw(st.sets(cells, max_size=12))), sorted(draw(st.sets(cells, max_size=12)))


@settings(deadline=None, max_examples=60)
@given(st.lists(directional_alignments(), min_size=1, max_size=8))
def test_vectorised_symmetrize_equals_per_sentence_grow(sentences):
    forward = [f for f, _ in sentences]
    reverse = [r for _, r in sentences]
    for method, final in (("grow-diag-final-and", "and"), ("grow-diag-final", "or"), ("grow-diag", None)):
        result = symmetrize(forward, reverse, method)
        for s, (f, r) in enumerate(sentences):
            grown = grow_diag_final(f, r, final=final)
            assert pairs(result[s]) == grown
            assert set(f) & set(r) <= set(grown) <= set(f) | set(r)


# ---------------------------------------------------------------- eflomal


@pytest.fixture(scope="module")
def multi30k_slice():
    if not MULTI30K.is_dir():
        pytest.skip(f"{MULTI30K} not found")
    return read_text_lines(MULTI30K / "train.en.gz")[:300], read_text_lines(MULTI30K / "train.de.gz")[:300]


def test_eflomal_on_real_pairs(multi30k_slice):
    english, german = multi30k_slice
    forward, reverse = eflomal_directional(english, german, **FAST_EFLOMAL)
    links = symmetrize(forward, reverse, "grow-diag-final-and")
    assert len(links) == len(forward) == len(reverse) == 300
    for src, tgt, f, r, sym in zip(english, german, forward, reverse, links):
        n, m = len(src.split()), len(tgt.split())
        assert all(i < n and j < m for i, j in pairs(sym))
        assert len({j for _, j in pairs(f)}) == len(pairs(f))  # forward: a target word has <= 1 source word
        assert len({i for i, _ in pairs(r)}) == len(pairs(r))  # reverse: a source word has <= 1 target word
        assert set(pairs(f)) & set(pairs(r)) <= set(pairs(sym)) <= set(pairs(f)) | set(pairs(r))
    # a sentence aligned to itself: almost every link is on the diagonal
    self_links = align_with_eflomal(english, english, **FAST_EFLOMAL)
    diagonal = sum(i == j for flat in self_links for i, j in pairs(flat))
    assert diagonal / sum(len(flat) // 2 for flat in self_links) > 0.9


def test_eflomal_skips_empty_sentences():
    forward, reverse = eflomal_directional(["a b", "", "c d"], ["x y", "z", "u v"], **FAST_EFLOMAL)
    assert forward[1] == [] and reverse[1] == []
    assert len(forward[0]) >= 2 and len(forward[2]) >= 2

"""Word alignment: Pharaoh parsing and files, symmetrisation, eflomal on real sentence pairs."""

from __future__ import annotations

import gzip

import pytest
from conftest import SHARED_DIR
from hypothesis import given, settings
from hypothesis import strategies as st

from xlpe.features.alignment import (
    AlignmentFormatError,
    align_with_eflomal,
    eflomal_directional,
    format_pharaoh,
    grow_diag_final,
    parse_pharaoh_line,
    read_pharaoh_file,
    read_text_lines,
    symmetrize,
    vote_links,
)

SHARED_DATA = SHARED_DIR / "data"
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
        handle.write(b"ein\nzwei\n")
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


def koehn_reference(e2f, f2e, final):
    """Koehn's pseudo-code, literally: sweeps over the whole alignment matrix (slow, obviously right)."""
    e2f, f2e = set(e2f), set(f2e)
    union, alignment = e2f | f2e, e2f & f2e
    size = max([max(i, j) for i, j in union], default=0) + 2
    neighbours = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))
    aligned_e = lambda e: any(a == e for a, _ in alignment)  # noqa: E731
    aligned_f = lambda f: any(b == f for _, b in alignment)  # noqa: E731
    added = True
    while added:
        added = False
        for e in range(size):
            for f in range(size):
                if (e, f) in alignment:
                    for de, df in neighbours:
                        e_new, f_new = e + de, f + df
                        if (
                            (not aligned_e(e_new) or not aligned_f(f_new))
                            and (e_new, f_new) in union
                            and (e_new, f_new) not in alignment
                        ):
                            alignment.add((e_new, f_new))
                            added = True
    if final:
        for a in (e2f, f2e):
            for e in range(size):
                for f in range(size):
                    free_e, free_f = not aligned_e(e), not aligned_f(f)
                    if ((free_e and free_f) if final == "and" else (free_e or free_f)) and (e, f) in a:
                        alignment.add((e, f))
    return sorted(alignment)


@settings(deadline=None, max_examples=300)
@given(directional_alignments(), st.sampled_from(["and", "or", None]))
def test_grow_diag_final_is_koehns_reference_procedure(sentence, final):
    forward, reverse = sentence
    assert grow_diag_final(forward, reverse, final=final) == koehn_reference(forward, reverse, final)


def test_grow_diag_order_matters_and_follows_the_reference():
    """A case where the order of the sweep decides: (0, 0) is accepted; its neighbours (1, 0) [below] and (0, 1)
    [right] are both in the union. The reference visits (0, 0)'s neighbours in the order (-1,0) (0,-1) (1,0)
    (0,1): (1, 0) is added first (source word 1 was free); then (0, 1) still has a free target word: added."""
    forward, reverse = [(0, 0), (1, 0)], [(0, 0), (0, 1)]
    assert (
        grow_diag_final(forward, reverse, final=None)
        == koehn_reference(forward, reverse, None)
        == [(0, 0), (0, 1), (1, 0)]
    )


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


# ---------------------------------------------------------------- a stabler oracle: majority vote over runs


@settings(deadline=None, max_examples=100)
@given(st.lists(st.lists(directional_alignments(), min_size=3, max_size=3), min_size=1, max_size=4), st.integers(1, 3))
def test_vote_keeps_exactly_the_links_enough_runs_share(sentences_by_run, min_votes):
    runs = [[links for links, _ in sentence] for sentence in zip(*sentences_by_run)]  # 3 runs x sentences
    voted = vote_links(runs, min_votes)
    for s, links in enumerate(voted):
        per_run = [set(run[s]) for run in runs]
        expected = sorted(p for p in set().union(*per_run) if sum(p in r for r in per_run) >= min_votes)
        assert pairs(links) == expected
    assert vote_links([runs[0]], 1) == [[x for p in sorted(set(links)) for x in p] for links in runs[0]]


def test_alignment_runs_vote_and_bad_values(multi30k_slice):
    english, german = (side[:60] for side in multi30k_slice)
    voted = align_with_eflomal(english, german, runs=3, **FAST_EFLOMAL)
    assert len(voted) == 60 and all(
        all(i < len(s.split()) and j < len(t.split()) for i, j in pairs(links))
        for links, s, t in zip(voted, english, german)
    )
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="runs"):
            align_with_eflomal(english, german, runs=bad)
    from xlpe.features.prepare import PrepareOptions

    with pytest.raises(ValueError, match="alignment_runs"):
        PrepareOptions(alignment_runs=0)
    assert PrepareOptions(alignment_runs=3).describe()["alignment_runs"] == 3  # part of the cache key

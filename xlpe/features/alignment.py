"""Word alignment: eflomal in both directions, symmetrisation, and Pharaoh `i-j` files.

The oracle reorderings (XL PE Sec. 3.1/4: "we first obtain word alignments from parallel data using GIZA++ or
FastAlign") and the DPE target ranks (DPE Sec. 3.1) are read off word alignments. We align with eflomal
(Östling & Tiedemann 2016; a Bayesian HMM+fertility aligner, much faster than fast_align) in the forward and
the reverse direction and symmetrise with grow-diag-final-and (Koehn et al. 2005), or intersection / union /
grow-diag / grow-diag-final. Alignments computed elsewhere are read from Pharaoh files (`0-0 1-2 ...`, one
line per sentence pair, 0-based source-target indices, as fast_align, GIZA++ converters and eflomal write).

Links of one sentence are a flat list [i0, j0, i1, j1, ...] (compact in Arrow); functions also accept
(i, j) pairs.
"""

from __future__ import annotations

import bisect
import contextlib
import io
import itertools
import logging
import math
import os
import tempfile
from collections.abc import Sequence

import numpy as np

from .text_files import TextFileError, read_text_lines  # noqa: F401  (re-exported: the one reader of text files)


class AlignmentFormatError(ValueError):
    """A malformed Pharaoh line or a link outside its sentence pair; the message names file and line."""


# ----------------------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------------------


def parse_pharaoh_line(
    line: str, source_length: int, target_length: int, origin: str = "<alignment>", line_number: int = 0
) -> list[int]:
    """Flat links [i0, j0, ...] of one Pharaoh line, checked against the sentence lengths."""
    flat: list[int] = []
    for token in line.split():
        source, dash, target = token.partition("-")
        if not (dash and source.isdigit() and target.isdigit() and source.isascii() and target.isascii()):
            raise AlignmentFormatError(
                f"{origin}:{line_number}: malformed alignment link {token!r}; expected 'i-j' with 0-based "
                f"source index i and target index j"
            )
        i, j = int(source), int(target)
        if i >= source_length or j >= target_length:
            raise AlignmentFormatError(
                f"{origin}:{line_number}: link {token} is outside the sentence pair: expected i < "
                f"{source_length} source words and j < {target_length} target words"
            )
        flat += (i, j)
    return flat


def read_pharaoh_file(
    path: str | os.PathLike,
    source_lengths: Sequence[int],
    target_lengths: Sequence[int],
    source_origin: str = "the source file",
) -> list[list[int]]:
    """All links of a Pharaoh file, one flat list per line, validated line by line.

    `source_lengths`/`target_lengths` are the word counts of every sentence pair (one per line of the
    parallel files; skipped pairs included, so line numbers match).
    """
    lines = read_text_lines(path)
    if len(lines) != len(source_lengths):
        raise ValueError(
            f"line counts differ: alignment file {path} has {len(lines)} lines, {source_origin} has "
            f"{len(source_lengths)}"
        )
    return [
        parse_pharaoh_line(line, s, t, str(path), n)
        for n, (line, s, t) in enumerate(zip(lines, source_lengths, target_lengths), start=1)
    ]


def format_pharaoh(links) -> str:
    """One Pharaoh line from flat links or (i, j) pairs."""
    pairs = np.asarray(links, dtype=np.int64).reshape(-1, 2)
    return " ".join(f"{i}-{j}" for i, j in pairs.tolist())


def _as_pairs(links) -> list[tuple[int, int]]:
    flat = iter(_flat(links))
    return list(zip(flat, flat))


# ----------------------------------------------------------------------------------------------------------
# Symmetrisation
# ----------------------------------------------------------------------------------------------------------

SYMMETRIZATIONS = ("grow-diag-final-and", "grow-diag-final", "grow-diag", "intersection", "union", "forward", "reverse")
_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))  # "diag": 8 neighbours


def grow_diag_final(forward, reverse, final: str | None = "and") -> list[tuple[int, int]]:
    """Koehn et al. (2005) symmetrisation of one sentence pair, exactly as Koehn's reference pseudo-code
    (the grow-diag-final(-and) heuristic of Moses / the Statistical MT book):

        alignment = intersect(e2f, f2e); GROW-DIAG(); FINAL(e2f); FINAL(f2e)
        GROW-DIAG: repeat until nothing is added: for e = 0..n, for f = 0..m, if (e, f) is aligned: for each
            neighbour (e', f') in the order (-1,0) (0,-1) (1,0) (0,1) (-1,-1) (-1,1) (1,-1) (1,1): if e' or f'
            is unaligned and (e', f') is in the union, align it
        FINAL-AND(a): for e' = 0..n, for f' = 0..m: if e' and f' are both unaligned and (e', f') in a, align it
        (FINAL, `final="or"`: e' or f' unaligned; `final=None`: grow-diag alone)

    Points added during a sweep are visited in the same sweep when they come later in (e, f) order, as in the
    pseudo-code's loop over the alignment matrix; "unaligned" is always judged on the current alignment.
    Returns sorted (i, j) pairs (i = source word, j = target word).
    """
    forward, reverse = set(_as_pairs(forward)), set(_as_pairs(reverse))
    union = forward | reverse
    alignment = forward & reverse
    aligned_source = {i for i, _ in alignment}
    aligned_target = {j for _, j in alignment}
    grew = len(union) > len(alignment)
    while grew:
        grew, points, k = False, sorted(alignment), 0
        while k < len(points):
            e, f = points[k]
            for de, df in _NEIGHBOURS:
                point = (e + de, f + df)
                if point in union and point not in alignment and (point[0] not in aligned_source or point[1] not in aligned_target):
                    alignment.add(point)
                    aligned_source.add(point[0])
                    aligned_target.add(point[1])
                    if point > (e, f):  # later in the sweep's order: visited in this sweep
                        bisect.insort(points, point)
                    grew = True
            k += 1
    if final is not None:
        for direction in (forward, reverse):
            for i, j in sorted(direction - alignment):
                free_source, free_target = i not in aligned_source, j not in aligned_target
                if (free_source and free_target) if final == "and" else (free_source or free_target):
                    alignment.add((i, j))
                    aligned_source.add(i)
                    aligned_target.add(j)
    return sorted(alignment)


def symmetrize(
    forward: Sequence, reverse: Sequence, method: str = "grow-diag-final-and"
) -> list[list[int]]:
    """Symmetrise per-sentence forward and reverse links (flat lists or pairs) with `method`.

    Vectorised over the corpus: intersection and union are set operations on integer keys of all links at
    once; only sentences where the two directions disagree go through the Python grow loop.
    """
    if method not in SYMMETRIZATIONS:
        raise ValueError(f"unknown symmetrization {method!r}; choose from {', '.join(SYMMETRIZATIONS)}")
    if len(forward) != len(reverse):
        raise ValueError(f"forward has {len(forward)} sentences, reverse has {len(reverse)}")
    if method in ("forward", "reverse"):
        return [_flat(links) for links in (forward if method == "forward" else reverse)]
    (sent_f, pairs_f), (sent_r, pairs_r) = _link_arrays(forward), _link_arrays(reverse)
    stride = int(max(pairs_f.max(initial=0), pairs_r.max(initial=0))) + 1
    keys_f = _sorted_unique(sent_f * stride * stride + pairs_f[:, 0] * stride + pairs_f[:, 1])
    keys_r = _sorted_unique(sent_r * stride * stride + pairs_r[:, 0] * stride + pairs_r[:, 1])
    merged = np.sort(np.concatenate([keys_f, keys_r]))  # (np.unique/intersect1d hash: slower here)
    repeated = merged[1:] == merged[:-1]
    both = merged[1:][repeated]
    either = merged[np.r_[True, ~repeated]] if len(merged) else merged
    if method in ("intersection", "union"):
        return _keys_to_lists(both if method == "intersection" else either, len(forward), stride)
    result = _keys_to_lists(both, len(forward), stride)
    in_both = np.zeros(len(either), dtype=bool)
    in_both[np.searchsorted(either, both)] = True
    disagreeing = _sorted_unique(either[~in_both] // (stride * stride))
    final = {"grow-diag-final-and": "and", "grow-diag-final": "or", "grow-diag": None}[method]
    for s in disagreeing.tolist():
        grown = grow_diag_final(forward[s], reverse[s], final=final)
        result[s] = [x for pair in grown for x in pair]
    return result


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    values = np.sort(values)
    return values[np.r_[True, values[1:] != values[:-1]]] if len(values) else values


def _link_arrays(per_sentence: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """Sentence index of every link and the (i, j) pairs, concatenated (one pass over plain ints)."""
    flat_lists = [_flat(links) for links in per_sentence]
    counts = np.fromiter(map(len, flat_lists), dtype=np.int64, count=len(flat_lists)) // 2
    values = np.fromiter(itertools.chain.from_iterable(flat_lists), dtype=np.int64, count=int(counts.sum()) * 2)
    return np.repeat(np.arange(len(flat_lists), dtype=np.int64), counts), values.reshape(-1, 2)


def _flat(links) -> list[int]:
    """Flat [i0, j0, ...] from a flat list, (i, j) pairs or an array."""
    if isinstance(links, np.ndarray):
        return links.reshape(-1).tolist()
    if not links or isinstance(links[0], int):
        return links
    if isinstance(links[0], np.integer):
        return [int(x) for x in links]
    return [int(x) for pair in links for x in pair]


def _keys_to_lists(keys: np.ndarray, num_sentences: int, stride: int) -> list[list[int]]:
    """Inverse of the keys sentence * stride^2 + i * stride + j: sorted flat links per sentence."""
    sentence, rest = np.divmod(keys, stride * stride)
    flat = np.stack(np.divmod(rest, stride), axis=1).reshape(-1).tolist()
    bounds = np.searchsorted(sentence, np.arange(num_sentences + 1)) * 2
    bounds = bounds.tolist()
    return [flat[bounds[s] : bounds[s + 1]] for s in range(num_sentences)]


# ----------------------------------------------------------------------------------------------------------
# eflomal
# ----------------------------------------------------------------------------------------------------------


def _parse_trusted(lines: Sequence[str]) -> list[list[int]]:
    return [[int(x) for x in line.replace("-", " ").split()] for line in lines]


def eflomal_directional(
    sources: Sequence[str], targets: Sequence[str], priors: str | os.PathLike | None = None, **eflomal_options
) -> tuple[list[list[int]], list[list[int]]]:
    """Forward and reverse eflomal links (flat lists, 0-based source-target) for whitespace-tokenised
    sentence pairs. Empty sentences get no links (eflomal is not run on them). `priors`: an eflomal priors file
    (`alignment_priors`) the sampler starts from. `eflomal_options` go to `eflomal.Aligner` (model=3,
    n_samplers, n_iterations, rel_iterations, null_prior, ...)."""
    try:
        import eflomal
    except ImportError as error:  # pragma: no cover - eflomal is a dependency
        raise ImportError("word alignment needs eflomal: pip install eflomal") from error
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} source sentences but {len(targets)} target sentences")
    if isinstance(eflomal_options.get("n_iterations"), list):  # e.g. from JSON on the command line
        eflomal_options["n_iterations"] = tuple(eflomal_options["n_iterations"])
    nonempty = [k for k, (s, t) in enumerate(zip(sources, targets)) if s.split() and t.split()]
    forward: list[list[int]] = [[] for _ in sources]
    reverse: list[list[int]] = [[] for _ in sources]
    if not nonempty:
        return forward, reverse
    with tempfile.TemporaryDirectory(prefix="xlpe-eflomal-") as workdir, \
            (open(priors, encoding="utf-8") if priors is not None else contextlib.nullcontext()) as priors_input:
        fwd_path, rev_path = os.path.join(workdir, "forward"), os.path.join(workdir, "reverse")
        quiet_logger = logging.getLogger("eflomal")  # its INFO lines ("Prepared N sentences ...") are noise here
        level = quiet_logger.level
        quiet_logger.setLevel(max(level, logging.WARNING))
        try:
            eflomal.Aligner(**eflomal_options).align(
                [" ".join(sources[k].split()) for k in nonempty],
                [" ".join(targets[k].split()) for k in nonempty],
                links_filename_fwd=fwd_path,
                links_filename_rev=rev_path,
                priors_input=priors_input,
                quiet=True,
            )
        finally:
            quiet_logger.setLevel(level)
        for path, out in ((fwd_path, forward), (rev_path, reverse)):
            lines = read_text_lines(path)
            if len(lines) != len(nonempty):
                raise RuntimeError(f"eflomal wrote {len(lines)} lines to {path}, expected {len(nonempty)}")
            for k, links in zip(nonempty, _parse_trusted(lines)):
                out[k] = links
    return forward, reverse


def vote_links(runs: Sequence[Sequence[Sequence]], min_votes: int) -> list[list[int]]:
    """Per sentence, the links that at least `min_votes` of the alignment `runs` contain (flat lists out)."""
    voted = []
    for per_run in zip(*runs):
        counts: dict[tuple[int, int], int] = {}
        for links in per_run:
            for pair in set(_as_pairs(links)):
                counts[pair] = counts.get(pair, 0) + 1
        voted.append([x for pair in sorted(p for p, c in counts.items() if c >= min_votes) for x in pair])
    return voted


def align_with_eflomal(
    sources: Sequence[str],
    targets: Sequence[str],
    symmetrization: str = "grow-diag-final-and",
    runs: int = 1,
    priors: str | os.PathLike | None = None,
    **eflomal_options,
) -> list[list[int]]:
    """Symmetrised word alignment of whitespace-tokenised sentence pairs: eflomal forward + reverse, then
    `symmetrize(..., symmetrization)`. One flat link list per pair.

    eflomal samples (it seeds itself from /dev/urandom and runs OpenMP threads: it cannot be seeded), so two
    runs on the same corpus disagree on some links. `runs=K > 1` aligns K times and keeps, per direction, the
    links a strict majority of the runs agree on before symmetrising: a more stable oracle for K times the
    alignment cost (measured in BENCHMARKS.md, "Oracle stability"). `priors`: see `eflomal_directional`."""
    if not isinstance(runs, int) or runs < 1:
        raise ValueError(f"runs (alignment runs to vote over) must be an integer >= 1, got {runs!r}")
    directional = [eflomal_directional(sources, targets, priors, **eflomal_options) for _ in range(runs)]
    if runs == 1:
        forward, reverse = directional[0]
    else:
        majority = runs // 2 + 1
        forward = vote_links([f for f, _ in directional], majority)
        reverse = vote_links([r for _, r in directional], majority)
    return symmetrize(forward, reverse, symmetrization)


# ----------------------------------------------------------------------------------------------------------
# eflomal at corpus scale: priors learned once, shards aligned with them
# ----------------------------------------------------------------------------------------------------------


def eflomal_iterations(num_pairs: int, rel_iterations: float = 1.0) -> tuple[int, int, int]:
    """eflomal's own default iteration counts (IBM1, HMM, fertility) for a corpus of `num_pairs` sentence pairs:
    n = max(2, round(rel_iterations * 5000 / sqrt(num_pairs))), then (max(2, n // 4), n // 4, n) (read off the
    counts eflomal prints; the larger the corpus, the fewer sweeps it needs). A shard aligned with the whole
    corpus's priors runs the whole corpus's counts, so sharding does not make alignment dearer per pair."""
    n = max(2, int(round(rel_iterations * 5000 / math.sqrt(max(num_pairs, 1)))))
    return max(2, n // 4), max(1, n // 4), n


def alignment_priors(sources: Sequence[str], targets: Sequence[str], forward: Sequence, reverse: Sequence) -> str:
    """eflomal's Dirichlet priors (the text `eflomal-makepriors` writes: lexical, HMM jump and fertility counts)
    learned from forward and reverse links of whitespace-tokenised pairs, e.g. one eflomal run on a large sample
    of the corpus (`eflomal_directional`). Aligning every shard with them keeps shards consistent with one
    whole-corpus alignment (issue 16; agreement measured in BENCHMARKS.md, "Corpus scale")."""
    import eflomal

    priors = eflomal.calculate_priors(
        [" ".join(s.split()) for s in sources], [" ".join(t.split()) for t in targets],
        [format_pharaoh(links) for links in forward], [format_pharaoh(links) for links in reverse],
    )  # fmt: skip
    text = io.StringIO()
    eflomal.write_priors(text, *priors)
    return text.getvalue()


class PriorsAligner:
    """An `aligner` for `prepare_dataset` (callable(sources, targets) -> symmetrised links per pair): eflomal
    forward + reverse started from a priors file, with the iteration counts of a corpus of `corpus_pairs` pairs
    (`eflomal_iterations`), then `symmetrize`. Picklable (for `Dataset.map` workers) and named for the report."""

    def __init__(self, priors: str | os.PathLike, corpus_pairs: int, symmetrization: str = "grow-diag-final-and",
                 runs: int = 1, **eflomal_options):  # fmt: skip
        self.priors, self.corpus_pairs = str(priors), int(corpus_pairs)
        self.symmetrization, self.runs = symmetrization, runs
        options = dict(eflomal_options)
        if options.get("n_iterations") is None:
            options["n_iterations"] = eflomal_iterations(self.corpus_pairs, options.pop("rel_iterations", 1.0))
        self.eflomal_options = options
        self.name = f"eflomal+priors (corpus of {self.corpus_pairs} pairs, iterations {options['n_iterations']})"

    def __call__(self, sources: Sequence[str], targets: Sequence[str]) -> list[list[int]]:
        return align_with_eflomal(sources, targets, self.symmetrization, self.runs, self.priors, **self.eflomal_options)

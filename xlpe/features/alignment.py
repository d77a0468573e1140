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
                if (
                    point in union
                    and point not in alignment
                    and (point[0] not in aligned_source or point[1] not in aligned_target)
                ):
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


def symmetrize(forward: Sequence, reverse: Sequence, method: str = "grow-diag-final-and") -> list[list[int]]:
    """Symmetrise per-sentence forward and reverse links (flat lists or pairs) with `method`.

    Vectorised over the corpus (`symmetrize_flat`): intersection and union are set operations on integer keys of
    all links at once, and grow-diag(-final(-and)) runs Koehn's sweeps for all sentences together, step by step,
    equal to `grow_diag_final` sentence by sentence (tested).
    """
    if method not in SYMMETRIZATIONS:
        raise ValueError(f"unknown symmetrization {method!r}; choose from {', '.join(SYMMETRIZATIONS)}")
    if len(forward) != len(reverse):
        raise ValueError(f"forward has {len(forward)} sentences, reverse has {len(reverse)}")
    if method in ("forward", "reverse"):
        return [_flat(links) for links in (forward if method == "forward" else reverse)]
    (sent_f, pairs_f), (sent_r, pairs_r) = _link_arrays(forward), _link_arrays(reverse)
    sentence, pairs = symmetrize_flat(sent_f, pairs_f, sent_r, pairs_r, method)
    return _pairs_to_lists(sentence, pairs, len(forward))


def symmetrize_flat(
    sent_f: np.ndarray,
    pairs_f: np.ndarray,
    sent_r: np.ndarray,
    pairs_r: np.ndarray,
    method: str = "grow-diag-final-and",
) -> tuple[np.ndarray, np.ndarray]:
    """`symmetrize` on flat arrays: the sentence of every forward link and its (i, j) pair (an (L, 2) array),
    the same for the reverse links; returns the symmetrised links as (sentences, pairs), sorted by
    (sentence, i, j). Koehn's grow-diag in `_grow_diag_flat`."""
    if method not in SYMMETRIZATIONS:
        raise ValueError(f"unknown symmetrization {method!r}; choose from {', '.join(SYMMETRIZATIONS)}")
    if method in ("forward", "reverse"):  # one direction, as it came
        return (sent_f, pairs_f) if method == "forward" else (sent_r, pairs_r)
    stride = int(max(pairs_f.max(initial=0), pairs_r.max(initial=0))) + 1
    square = stride * stride
    keys_f = _sorted_unique(sent_f * square + pairs_f[:, 0] * stride + pairs_f[:, 1])
    keys_r = _sorted_unique(sent_r * square + pairs_r[:, 0] * stride + pairs_r[:, 1])
    merged = np.sort(np.concatenate([keys_f, keys_r]))  # (np.unique/intersect1d hash: slower here)
    repeated = merged[1:] == merged[:-1]
    both = merged[1:][repeated]
    either = merged[np.r_[True, ~repeated]] if len(merged) else merged
    if method in ("intersection", "union"):
        kept = both if method == "intersection" else either
    else:
        final = {"grow-diag-final-and": "and", "grow-diag-final": "or", "grow-diag": None}[method]
        kept = either[_grow_diag_flat(either, both, keys_f, keys_r, stride, final)]
    sentence, rest = np.divmod(kept, square)
    return sentence, np.stack(np.divmod(rest, stride), axis=1)


def _grow_diag_flat(
    union: np.ndarray, both: np.ndarray, keys_f: np.ndarray, keys_r: np.ndarray, stride: int, final: str | None
) -> np.ndarray:
    """Which links of `union` (sorted keys sentence * stride^2 + i * stride + j) grow-diag(-final(-and)) keeps,
    starting from the intersection `both`: exactly `grow_diag_final`, for all sentences at once.

    In a sweep, Koehn's procedure visits the aligned points in (i, j) order (points added during the sweep
    included when they come later) and each point's 8 neighbours in order; only union points that are not yet
    aligned (candidates) can be added. So a sweep is the ordered list of events (aligned point q, neighbour d,
    candidate c = q + d) over the union points q adjacent to a candidate: event t of every sentence is applied
    at once (step t; one event per sentence per step, so sentences never interfere), and it adds c when q is
    aligned by then, c is not, and c's source or target word is still unaligned. Sweeps repeat for the
    sentences that grew. FINAL(-AND) then walks the forward, then the reverse links not aligned, in (i, j)
    order, step by step in the same way."""
    square = stride * stride
    aligned = np.zeros(len(union), dtype=bool)
    aligned[np.searchsorted(union, both)] = True
    sentence, rest = np.divmod(union, square)
    i, j = np.divmod(rest, stride)
    source_word = np.unique(sentence * stride + i, return_inverse=True)[1].reshape(-1)  # dense (sentence, i) ids
    target_word = np.unique(sentence * stride + j, return_inverse=True)[1].reshape(-1)
    source_links = np.bincount(source_word[aligned], minlength=int(source_word.max(initial=-1)) + 1)
    target_links = np.bincount(target_word[aligned], minlength=int(target_word.max(initial=-1)) + 1)
    candidates = np.flatnonzero(~aligned)
    if len(candidates):  # events: (q, d, c) for every candidate c and neighbour offset d with q = c - d in the union
        events_q, events_d, events_c = [], [], []
        for d, (di, dj) in enumerate(_NEIGHBOURS):
            qi, qj = i[candidates] - di, j[candidates] - dj
            inside = (qi >= 0) & (qi < stride) & (qj >= 0) & (qj < stride)
            q_keys = sentence[candidates[inside]] * square + qi[inside] * stride + qj[inside]
            at = np.minimum(np.searchsorted(union, q_keys), len(union) - 1)
            found = union[at] == q_keys
            events_q.append(at[found]), events_c.append(candidates[inside][found])
            events_d.append(np.full(int(found.sum()), d, dtype=np.int64))
        q, d, c = (np.concatenate(parts) for parts in (events_q, events_d, events_c))
        order = np.lexsort((d, q))  # q's index in the sorted union orders by (sentence, i, j)
        q, c = q[order], c[order]
        event_sentence = sentence[q]
        active = np.ones(int(sentence.max(initial=-1)) + 1, dtype=bool)
        while len(q):
            steps = _steps(event_sentence)
            grew = np.zeros(len(active), dtype=bool)
            for events in steps:
                qe, ce = q[events], c[events]
                fire = (
                    aligned[qe]
                    & ~aligned[ce]
                    & ((source_links[source_word[ce]] == 0) | (target_links[target_word[ce]] == 0))
                )
                added = ce[fire]
                aligned[added] = True
                source_links[source_word[added]] += 1  # one event per sentence in a step: no repeated index
                target_links[target_word[added]] += 1
                grew[sentence[added]] = True
            keep = grew[event_sentence]  # a sentence that did not grow would not grow in the next sweep either
            q, c, event_sentence = q[keep], c[keep], event_sentence[keep]
    if final is not None:
        for keys in (keys_f, keys_r):
            points = np.searchsorted(union, keys)
            points = points[~aligned[points]]  # (sorted: in (sentence, i, j) order)
            for events in _steps(sentence[points]):
                pe = points[events]
                free_source, free_target = source_links[source_word[pe]] == 0, target_links[target_word[pe]] == 0
                added = pe[(free_source & free_target) if final == "and" else (free_source | free_target)]
                aligned[added] = True
                source_links[source_word[added]] += 1
                target_links[target_word[added]] += 1
    return aligned


def _steps(sentence: np.ndarray) -> list[np.ndarray]:
    """Indices of a sentence-sorted event list grouped by rank within their sentence: step t holds the t-th
    event of every sentence that has one (in sentence order)."""
    if not len(sentence):
        return []
    starts = np.flatnonzero(np.r_[True, sentence[1:] != sentence[:-1]])
    rank = np.arange(len(sentence)) - np.repeat(starts, np.diff(np.r_[starts, len(sentence)]))
    order = np.argsort(rank, kind="stable")
    bounds = np.searchsorted(rank[order], np.arange(int(rank.max()) + 2))
    return [order[bounds[t] : bounds[t + 1]] for t in range(len(bounds) - 1)]


def _pairs_to_lists(sentence: np.ndarray, pairs: np.ndarray, num_sentences: int) -> list[list[int]]:
    """Flat link lists per sentence from sentence-sorted (sentence, (i, j)) arrays."""
    flat = pairs.reshape(-1).tolist()
    bounds = (np.searchsorted(sentence, np.arange(num_sentences + 1)) * 2).tolist()
    return [flat[bounds[s] : bounds[s + 1]] for s in range(num_sentences)]


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


# ----------------------------------------------------------------------------------------------------------
# eflomal
# ----------------------------------------------------------------------------------------------------------


def eflomal_directional(
    sources: Sequence[str], targets: Sequence[str], priors: str | os.PathLike | None = None, **eflomal_options
) -> tuple[list[list[int]], list[list[int]]]:
    """Forward and reverse eflomal links (flat lists, 0-based source-target) for whitespace-tokenised
    sentence pairs. Empty sentences get no links (eflomal is not run on them). `priors`: an eflomal priors file
    (`alignment_priors`) the sampler starts from. `eflomal_options` go to `eflomal.Aligner` (model=3,
    n_samplers, n_iterations, rel_iterations, null_prior, ...)."""
    (sent_f, pairs_f), (sent_r, pairs_r) = eflomal_links(sources, targets, priors, **eflomal_options)
    return _pairs_to_lists(sent_f, pairs_f, len(sources)), _pairs_to_lists(sent_r, pairs_r, len(sources))


def eflomal_links(
    sources: Sequence[str], targets: Sequence[str], priors: str | os.PathLike | None = None, **eflomal_options
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """`eflomal_directional` as flat arrays: ((pair of every forward link, its (i, j)), the same for reverse),
    in pair order. eflomal's binary runs the two directions in parallel (one thread each, `n_samplers` threads
    under each); its input files are written and its links read with Arrow (`eflomal_files`: the bytes
    `eflomal.Aligner.align` would write, without its per-sentence Python)."""
    try:
        import eflomal
        import eflomal.cython
    except ImportError as error:  # pragma: no cover - eflomal is a dependency
        raise ImportError("word alignment needs eflomal: pip install eflomal") from error
    from .eflomal_files import IndexedPriors, read_links, write_text

    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} source sentences but {len(targets)} target sentences")
    if isinstance(eflomal_options.get("n_iterations"), list):  # e.g. from JSON on the command line
        eflomal_options["n_iterations"] = tuple(eflomal_options["n_iterations"])
    seed = eflomal_options.pop("seed", None)  # ours, not eflomal's: a reproducible run (eflomal_seed.py)
    if seed is not None:
        from .eflomal_seed import check_seed

        check_seed(seed)
    try:
        aligner = eflomal.Aligner(**eflomal_options)  # its defaults, and a TypeError for an unknown option
    except TypeError as error:
        raise ValueError(f"--eflomal-options {sorted(eflomal_options)}: {error}") from None
    nonempty = np.array(
        [k for k, (s, t) in enumerate(zip(sources, targets)) if s.split() and t.split()], dtype=np.int64
    )
    empty = (np.zeros(0, dtype=np.int64), np.zeros((0, 2), dtype=np.int64))
    if not len(nonempty):
        return empty, empty
    affixes = (
        aligner.source_prefix_len,
        aligner.source_suffix_len,
        aligner.target_prefix_len,
        aligner.target_suffix_len,
    )
    with tempfile.TemporaryDirectory(prefix="xlpe-eflomal-") as workdir:
        paths = {name: os.path.join(workdir, name) for name in ("source", "target", "priors", "forward", "reverse")}
        texts = (
            [" ".join(sources[k].split()) for k in nonempty.tolist()],
            [" ".join(targets[k].split()) for k in nonempty.tolist()],
        )
        with (
            open(paths["source"], "wb") as src,
            open(paths["target"], "wb") as trg,
            open(paths["priors"], "w", encoding="utf-8") as out,
        ):
            if any(affixes):  # word prefixes / suffixes: eflomal's own (per-sentence) writer
                with open(priors, encoding="utf-8") if priors is not None else contextlib.nullcontext() as priors_input:
                    quiet_logger = logging.getLogger("eflomal")  # its INFO lines ("Prepared N sentences ...") are noise
                    level = quiet_logger.level
                    quiet_logger.setLevel(max(level, logging.WARNING))
                    try:
                        aligner.prepare_files(texts[0], src, texts[1], trg, priors_input, out)
                    finally:
                        quiet_logger.setLevel(level)
            else:
                source_vocabulary, target_vocabulary = write_text(texts[0], src), write_text(texts[1], trg)
                if priors is not None:
                    IndexedPriors(priors).write(source_vocabulary, target_vocabulary, out)
        arguments = dict(
            source_filename=paths["source"],
            target_filename=paths["target"],
            links_filename_fwd=paths["forward"],
            links_filename_rev=paths["reverse"],
            priors_filename=paths["priors"] if priors is not None else None,
            model=aligner.model,
            score_model=aligner.score_model,
            n_iterations=aligner.n_iterations,
            n_samplers=aligner.n_samplers,
            quiet=True,
            rel_iterations=aligner.rel_iterations,
            null_prior=aligner.null_prior,
        )  # what eflomal.Aligner.align runs
        if seed is None:
            eflomal.cython.align(**arguments)
        else:
            from .eflomal_seed import align_seeded

            align_seeded(seed, **arguments)
        links = []
        for direction in ("forward", "reverse"):
            line, pairs = read_links(paths[direction], len(nonempty))
            links.append((nonempty[line], pairs))
    return links[0], links[1]


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

    eflomal samples (it seeds itself from /dev/urandom and runs OpenMP threads), so two unseeded runs on the
    same corpus disagree on some links; `seed=N` among the eflomal options makes the run reproducible
    (`eflomal_seed.py`; run k of a vote draws from N + k). `runs=K > 1` aligns K times and keeps, per direction, the
    links a strict majority of the runs agree on before symmetrising: a more stable oracle for K times the
    alignment cost (docs/benchmarks/preparation.md, "Oracle stability"). `priors`: see `eflomal_directional`."""
    sentence, pairs = align_with_eflomal_flat(sources, targets, symmetrization, runs, priors, **eflomal_options)
    return _pairs_to_lists(sentence, pairs, len(sources))


def align_with_eflomal_flat(
    sources: Sequence[str],
    targets: Sequence[str],
    symmetrization: str = "grow-diag-final-and",
    runs: int = 1,
    priors: str | os.PathLike | None = None,
    **eflomal_options,
) -> tuple[np.ndarray, np.ndarray]:
    """`align_with_eflomal` as flat arrays: the pair of every link and the (i, j) pairs, sorted by pair (for
    `links_column`), without a Python list per pair."""
    if not isinstance(runs, int) or runs < 1:
        raise ValueError(f"runs (alignment runs to vote over) must be an integer >= 1, got {runs!r}")
    if symmetrization not in SYMMETRIZATIONS:
        raise ValueError(f"unknown symmetrization {symmetrization!r}; choose from {', '.join(SYMMETRIZATIONS)}")
    if runs == 1:
        (sent_f, pairs_f), (sent_r, pairs_r) = eflomal_links(sources, targets, priors, **eflomal_options)
    else:
        seed = eflomal_options.pop("seed", None)  # run k of a seeded vote draws from seed + k
        directional = [
            eflomal_directional(
                sources, targets, priors, **eflomal_options, **({} if seed is None else {"seed": seed + k})
            )
            for k in range(runs)
        ]
        majority = runs // 2 + 1
        (sent_f, pairs_f), (sent_r, pairs_r) = (
            _link_arrays(vote_links([run[side] for run in directional], majority)) for side in (0, 1)
        )
    return symmetrize_flat(sent_f, pairs_f, sent_r, pairs_r, symmetrization)


def format_pharaoh_flat(sentence: np.ndarray, pairs: np.ndarray, num_sentences: int) -> list[str]:
    """`format_pharaoh` of every pair's links from sentence-sorted flat arrays, built by Arrow kernels."""
    import pyarrow as pa
    import pyarrow.compute as pc

    bounds = np.searchsorted(sentence, np.arange(num_sentences + 1)).astype(np.int32)
    links = pc.binary_join_element_wise(
        pc.cast(pa.array(pairs[:, 0]), pa.string()), pc.cast(pa.array(pairs[:, 1]), pa.string()), "-"
    )
    return pc.binary_join(pa.ListArray.from_arrays(pa.array(bounds), links), " ").to_pylist()


def links_column(sentence: np.ndarray, pairs: np.ndarray, num_sentences: int, start: int = 0):
    """An Arrow list<int32> column of flat links [i0, j0, i1, j1, ...] for sentences start..start+num_sentences-1
    from sentence-sorted flat arrays (`align_with_eflomal_flat`)."""
    import pyarrow as pa

    bounds = np.searchsorted(sentence, np.arange(start, start + num_sentences + 1))
    values = pairs[bounds[0] : bounds[-1]].reshape(-1).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(((bounds - bounds[0]) * 2).astype(np.int32)), pa.array(values))


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
    whole-corpus alignment (agreement measured in docs/benchmarks/corpus_scale.md).

    The same text as `eflomal.calculate_priors` + `eflomal.write_priors` (tested byte for byte), counted with
    numpy over all links at once instead of pair by pair in Python (~40 s for 200k pairs there)."""
    if len(sources) != len(targets) or len(forward) != len(sources) or len(reverse) != len(sources):
        raise ValueError(
            f"alignment_priors: {len(sources)} sources, {len(targets)} targets, {len(forward)} forward "
            f"and {len(reverse)} reverse link lists; expected one of each per pair"
        )
    return alignment_priors_flat(sources, targets, _link_arrays(forward), _link_arrays(reverse))


def alignment_priors_flat(
    sources: Sequence[str],
    targets: Sequence[str],
    forward: tuple[np.ndarray, np.ndarray],
    reverse: tuple[np.ndarray, np.ndarray],
) -> str:
    """`alignment_priors` from flat links as `eflomal_links` gives them: (pair of every link, (i, j) pairs) per
    direction, each direction's links of a pair in eflomal's order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    src_lengths, src_codes, src_vocab = _factorized_words(sources)
    trg_lengths, trg_codes, trg_vocab = _factorized_words(targets)
    src_starts, trg_starts = np.r_[0, np.cumsum(src_lengths)[:-1]], np.r_[0, np.cumsum(trg_lengths)[:-1]]
    (sent_f, pairs_f), (sent_r, pairs_r) = forward, reverse
    for sent in (sent_f, sent_r):
        if len(sent) and (sent.min() < 0 or sent.max() >= len(sources)):
            raise ValueError("alignment_priors: a link of a pair that does not exist")
    for sent, pairs, name in ((sent_f, pairs_f, "forward"), (sent_r, pairs_r, "reverse")):
        if len(pairs) and (
            (pairs < 0).any() or (pairs[:, 0] >= src_lengths[sent]).any() or (pairs[:, 1] >= trg_lengths[sent]).any()
        ):
            raise ValueError(f"alignment_priors: a {name} link is outside its sentence pair")
    i_f, j_f, i_r, j_r = pairs_f[:, 0], pairs_f[:, 1], pairs_r[:, 0], pairs_r[:, 1]
    src_of_f, trg_of_f = src_codes[src_starts[sent_f] + i_f], trg_codes[trg_starts[sent_f] + j_f]
    lex_keys, lex_counts = np.unique(src_of_f * len(trg_vocab) + trg_of_f, return_counts=True)
    hmmf = _jump_counts(sent_f, j_f, i_f, src_lengths)  # forward links by target word: jumps in the source
    hmmr = _jump_counts(sent_r, i_r, j_r, trg_lengths)
    ferf = _fertility_counts(sent_f, i_f, src_codes[src_starts[sent_f] + i_f], src_lengths)
    ferr = _fertility_counts(sent_r, j_r, trg_codes[trg_starts[sent_r] + j_r], trg_lengths)
    src_rank, trg_rank = _string_ranks(src_vocab), _string_ranks(trg_vocab)

    def column(values: np.ndarray) -> pa.Array:
        return pa.array(values).cast(pa.string())

    def counts_text(counts: np.ndarray) -> pa.Array:  # '%g' as write_priors (1234567 -> 1.23457e+06)
        unique, inverse = np.unique(counts, return_inverse=True)
        return pa.array(["%g" % c for c in unique.tolist()], type=pa.string()).take(pa.array(inverse.reshape(-1)))  # noqa: UP031

    parts = []
    lex_src, lex_trg = np.divmod(lex_keys, len(trg_vocab))
    order = np.lexsort((trg_rank[lex_trg], src_rank[lex_src]))
    parts.append(
        pc.binary_join_element_wise(
            pa.scalar("LEX"),
            src_vocab.take(pa.array(lex_src[order])),
            trg_vocab.take(pa.array(lex_trg[order])),
            counts_text(lex_counts[order]),
            "\t",
        )
    )
    for tag, (codes, fertility, counts), vocab, rank in (
        ("FERF", ferf, src_vocab, src_rank),
        ("FERR", ferr, trg_vocab, trg_rank),
    ):
        order = np.lexsort((fertility, rank[codes]))
        parts.append(
            pc.binary_join_element_wise(
                pa.scalar(tag),
                vocab.take(pa.array(codes[order])),
                column(fertility[order]),
                counts_text(counts[order]),
                "\t",
            )
        )
    for tag, (jumps, counts) in (("HMMF", hmmf), ("HMMR", hmmr)):
        parts.append(pc.binary_join_element_wise(pa.scalar(tag), column(jumps), counts_text(counts), "\t"))
    lines = pa.chunked_array([part.cast(pa.string()) for part in parts], type=pa.string())
    return "\n".join(lines.to_pylist()) + "\n" if len(lines) else ""


def _factorized_words(sentences: Sequence[str]):
    """(words per sentence, each word's index in the vocabulary, the vocabulary as an Arrow array) of
    whitespace-separated text."""
    import pyarrow as pa

    words = " ".join(sentences).split()
    lengths = np.fromiter((len(s.split()) for s in sentences), dtype=np.int64, count=len(sentences))
    encoded = pa.array(words, type=pa.string()).dictionary_encode()
    return lengths, encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64), encoded.dictionary


def _string_ranks(vocab) -> np.ndarray:
    """Rank of every vocabulary entry in Python's string order (code points), as `sorted` gives."""
    order = np.argsort(np.array(vocab.to_pylist(), dtype=object), kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank


def _jump_counts(sentence: np.ndarray, by: np.ndarray, position: np.ndarray, lengths: np.ndarray):
    """eflomal's HMM jump counts (`calculate_priors`): per sentence, links stably sorted by `by`; each link whose
    `by` differs from the previous link's counts the jump `position - previous position` (from -1); then the jump
    from the last link's position (-1 without links) to the sentence length. Returns (sorted jumps, counts)."""
    order = np.lexsort((by, sentence))
    sentence, by, position = sentence[order], by[order], position[order]
    first = np.r_[True, sentence[1:] != sentence[:-1]] if len(sentence) else np.zeros(0, dtype=bool)
    previous_by, previous_position = np.r_[-1, by[:-1]], np.r_[-1, position[:-1]]
    previous_by[first], previous_position[first] = -1, -1
    jumps = (position - previous_position)[by != previous_by]
    last_position = np.full(len(lengths), -1, dtype=np.int64)
    last = np.flatnonzero(np.r_[sentence[1:] != sentence[:-1], True]) if len(sentence) else np.zeros(0, dtype=np.int64)
    last_position[sentence[last]] = position[last]  # each sentence's last link (in the sorted order)
    jumps = np.concatenate([jumps, lengths - last_position])
    return np.unique(jumps, return_counts=True)


def _fertility_counts(sentence: np.ndarray, position: np.ndarray, codes: np.ndarray, lengths: np.ndarray):
    """(word codes, fertilities, counts): how often a word has fertility f (links of one position in one
    sentence), over the words with at least one link."""
    stride = int(lengths.max(initial=0)) + 1
    keys, first, fertility = np.unique(sentence * stride + position, return_index=True, return_counts=True)
    word = codes[first]
    pairs, counts = np.unique(word * (int(fertility.max(initial=0)) + 1) + fertility, return_counts=True)
    return pairs // (int(fertility.max(initial=0)) + 1), pairs % (int(fertility.max(initial=0)) + 1), counts


class PriorsAligner:
    """An `aligner` for `prepare_dataset` (callable(sources, targets) -> symmetrised links per pair): eflomal
    forward + reverse started from a priors file, with the iteration counts of a corpus of `corpus_pairs` pairs
    (`eflomal_iterations`), then `symmetrize`. Picklable (for `Dataset.map` workers) and named for the report."""

    def __init__(
        self,
        priors: str | os.PathLike,
        corpus_pairs: int,
        symmetrization: str = "grow-diag-final-and",
        runs: int = 1,
        **eflomal_options,
    ):
        self.priors, self.corpus_pairs = str(priors), int(corpus_pairs)
        self.symmetrization, self.runs = symmetrization, runs
        options = dict(eflomal_options)
        if options.get("n_iterations") is None:
            options["n_iterations"] = eflomal_iterations(self.corpus_pairs, options.pop("rel_iterations", 1.0))
        self.eflomal_options = options
        samplers = f", {options['n_samplers']} samplers" if "n_samplers" in options else ""
        self.name = (
            f"eflomal+priors (corpus of {self.corpus_pairs} pairs, "
            f"iterations {tuple(options['n_iterations'])}{samplers})"
        )

    def __call__(self, sources: Sequence[str], targets: Sequence[str]) -> list[list[int]]:
        return _pairs_to_lists(*self.align_flat(sources, targets), len(sources))

    def align_flat(self, sources: Sequence[str], targets: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The links as `align_with_eflomal_flat` gives them (what `prepare` uses: no list per pair)."""
        return align_with_eflomal_flat(
            sources, targets, self.symmetrization, self.runs, self.priors, **self.eflomal_options
        )

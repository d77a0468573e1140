"""eflomal's files, written and read with Arrow and numpy over whole corpora.

eflomal's Python side (`eflomal.Aligner.prepare_files`) turns the text into its binary's input format sentence by
sentence and the priors file line by line in Python, and its links come back as one text line per pair: for a
100k-pair shard that was ~4 CPU-s before the sampler started and ~1.5 s after it, one core busy and the other
idle. The writers here give the binary byte-identical files (tested against eflomal's own functions), the
reader the same links, with Arrow compute kernels instead of Python loops:

    write_text(sentences, file)        -> vocabulary   eflomal's `to_eflomal_text_file` (lowercased words)
    IndexedPriors(path).write(src_vocabulary, trg_vocabulary, file)   eflomal's `to_eflomal_priors_file`
    read_links(path, expected_lines)   -> (line of every link, (i, j) pairs)

The priors text is parsed once per process and file (a shard job aligns every shard from the same file).
"""

from __future__ import annotations

import os

import numpy as np

MAX_SENTENCE_TOKENS = 0x400  # eflomal's binary format writes longer sentences as empty ("0")


def _pa():
    import pyarrow as pa
    import pyarrow.compute as pc

    return pa, pc


def write_text(sentences, file) -> object:
    """Write `sentences` (words joined by single spaces, as `" ".join(s.split())` gives) in the format of eflomal's
    binary (`eflomal.cython.write_text`: "N V" then per sentence its length and word ids, words lowercased and
    numbered in order of first use, as `eflomal.cython.read_text(..., lowercase=True)`) to the binary file object
    `file`. Returns the vocabulary (an Arrow string array: word id k is entry k; the binary's id is k + 1, 0 being
    NULL)."""
    pa, pc = _pa()
    split = pc.split_pattern(pc.utf8_lower(pa.array(sentences, type=pa.string())), " ")
    empty = pc.equal(pc.utf8_length(pc.list_element(split, 0)), 0).to_numpy(zero_copy_only=False)
    lengths = pc.list_value_length(split).to_numpy(zero_copy_only=False).astype(np.int64)
    lengths[empty] = 0  # "" splits into one empty word
    words = pc.list_flatten(pc.filter(split, pa.array(~empty)))
    if len(words) and pc.any(pc.equal(pc.utf8_length(words), 0)).as_py():
        raise ValueError('write_text: sentences must be words joined by single spaces (" ".join(s.split()))')
    words = words.dictionary_encode()
    ids = pc.cast(words.indices, pa.string())
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int32)
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), ids), " ")
    lines = pc.binary_join_element_wise(pc.cast(pa.array(lengths), pa.string()), joined, " ")
    lines = pc.if_else(pa.array((lengths == 0) | (lengths >= MAX_SENTENCE_TOKENS)), pa.scalar("0"), lines)
    file.write(f"{len(sentences)} {len(words.dictionary)}\n".encode())
    if len(sentences):
        file.write(("\n".join(lines.to_pylist()) + "\n").encode())
    file.flush()
    return words.dictionary


def read_links(path: str | os.PathLike, expected_lines: int) -> tuple[np.ndarray, np.ndarray]:
    """The links of an eflomal (Pharaoh) output file: the 0-based line of every link and the (i, j) pairs as an
    (L, 2) int64 array, in file order. A file of another line count is a RuntimeError."""
    pa, pc = _pa()
    with open(path, encoding="utf-8") as file:
        text = file.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != expected_lines:
        raise RuntimeError(f"eflomal wrote {len(lines)} lines to {path}, expected {expected_lines}")
    tokens = pc.utf8_split_whitespace(pc.replace_substring(pa.array(lines, type=pa.string()), "-", " "))
    flat = pc.list_flatten(tokens)
    present = pc.greater(pc.utf8_length(flat), 0)  # an empty line splits into one empty string
    parents = pc.list_parent_indices(tokens).to_numpy(zero_copy_only=False)[present.to_numpy(zero_copy_only=False)]
    counts = np.bincount(parents, minlength=len(lines)).astype(np.int64)
    values = pc.cast(pc.filter(flat, present), pa.int64()).to_numpy(zero_copy_only=False)
    if np.any(counts % 2):
        raise RuntimeError(f"eflomal wrote a malformed link to {path}")
    return np.repeat(np.arange(len(lines), dtype=np.int64), counts // 2), values.reshape(-1, 2)


def _format_g(values: np.ndarray):
    """'%g' of every value (as `eflomal.write_priors` and `to_eflomal_priors_file` print alphas), one
    formatting per distinct value, as an Arrow string array."""
    pa, _ = _pa()
    unique, inverse = np.unique(values, return_inverse=True)
    return pa.array(["%g" % v for v in unique.tolist()], type=pa.string()).take(pa.array(inverse.reshape(-1)))  # noqa: UP031


class IndexedPriors:
    """An eflomal priors file (`LEX`, `HMMF`, `HMMR`, `FERF`, `FERR` lines, the format `eflomal-makepriors` and
    `alignment.alignment_priors` write), parsed once, written in the binary's indexed form for any vocabulary."""

    _parsed: dict = {}  # (path, size, mtime) -> the parsed file, per process

    def __init__(self, path: str | os.PathLike):
        stat = os.stat(path)
        key = (os.path.abspath(path), stat.st_size, stat.st_mtime_ns)
        if key not in IndexedPriors._parsed:
            IndexedPriors._parsed = {key: self._parse(path)}  # one file at a time
        self.sections = IndexedPriors._parsed[key]

    @staticmethod
    def _parse(path) -> dict:
        """{tag: columns}: LEX (source word, target word, alpha), FERF / FERR (word, fertility, alpha), HMMF / HMMR
        (jump, alpha), words lowercased as eflomal's `TextIndex` looks them up. Errors name file and line."""
        pa, pc = _pa()
        with open(path, encoding="utf-8") as file:
            lines = file.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        fields = pc.split_pattern(pa.array(lines, type=pa.string()), "\t")
        tags = pc.list_element(fields, 0)
        sizes = pc.list_value_length(fields).to_numpy(zero_copy_only=False)
        expected = {"LEX": 4, "FERF": 4, "FERR": 4, "HMMF": 3, "HMMR": 3}
        valid = np.zeros(len(lines), dtype=bool)
        sections = {}
        for tag, size in expected.items():
            mask = (pc.equal(tags, tag).to_numpy(zero_copy_only=False)) & (sizes == size)
            valid |= mask
            rows = pc.filter(fields, pa.array(mask))
            column = lambda k: pc.list_element(rows, k)  # noqa: B023, E731
            try:
                alpha = pc.cast(column(size - 1), pa.float64()).to_numpy(zero_copy_only=False)
                if tag == "LEX":
                    sections[tag] = (column(1), column(2), alpha)
                elif tag in ("FERF", "FERR"):
                    sections[tag] = (column(1), pc.cast(column(2), pa.int64()).to_numpy(zero_copy_only=False), alpha)
                else:
                    sections[tag] = (pc.cast(column(1), pa.int64()).to_numpy(zero_copy_only=False), alpha)
            except pa.ArrowInvalid as error:
                raise ValueError(f"{path}: a {tag} line holds a value that is not a number ({error})") from None
        if not valid.all():
            line = int(np.flatnonzero(~valid)[0])
            raise ValueError(f"{path}:{line + 1}: invalid priors line {lines[line][:80]!r}")
        if (
            len(sections["FERF"][1])
            and sections["FERF"][1].min() < 0
            or len(sections["FERR"][1])
            and sections["FERR"][1].min() < 0
        ):
            raise ValueError(f"{path}: a negative fertility")
        sections["LEX_NULL"] = tuple(
            pc.equal(words, "<NULL>").to_numpy(zero_copy_only=False) for words in sections["LEX"][:2]
        )
        for tag in ("LEX", "FERF", "FERR"):  # eflomal's TextIndex lowercases the words it looks up
            words = sections[tag][:2] if tag == "LEX" else sections[tag][:1]
            lowered = tuple(pc.utf8_lower(w) for w in words)
            sections[tag] = (*lowered, *sections[tag][len(words) :])
        return sections

    def write(self, source_vocabulary, target_vocabulary, file) -> None:
        """The binary's priors file for texts with these vocabularies (`write_text`'s return values), to the text
        file object `file`: the bytes `eflomal.to_eflomal_priors_file` writes (pairs of words outside the
        vocabularies dropped, alphas of pairs that lowercase alike summed, entries sorted by id)."""
        pa, pc = _pa()
        source_words, target_words, lex_alpha = self.sections["LEX"]

        def ids(words, vocabulary, null=None):  # the binary's word ids (vocabulary index + 1), -1 outside it
            found = pc.fill_null(pc.index_in(words, value_set=vocabulary), -1).to_numpy(zero_copy_only=False)
            found = np.where(found >= 0, found.astype(np.int64) + 1, -1)
            if null is not None:  # '<NULL>' is the binary's word 0 in lexical priors
                found[null] = 0
            return found

        source_null, target_null = self.sections["LEX_NULL"]
        e, f = ids(source_words, source_vocabulary, source_null), ids(target_words, target_vocabulary, target_null)
        keep = (e >= 0) & (f >= 0)
        lex_keys, lex_alphas = self._summed(e[keep] * (len(target_vocabulary) + 1) + f[keep], lex_alpha[keep])
        fertility = {}
        for tag, vocabulary in (("FERF", source_vocabulary), ("FERR", target_vocabulary)):
            words, fert, alpha = self.sections[tag]
            word = ids(words, vocabulary)
            keep = word >= 0
            stride = int(fert.max(initial=0)) + 1
            keys, alphas = self._summed(word[keep] * stride + fert[keep], alpha[keep])
            fertility[tag] = (keys // stride, keys % stride, alphas)
        jumps = {}
        for tag in ("HMMF", "HMMR"):  # eflomal keeps the last alpha of a repeated jump
            jump, alpha = self.sections[tag]
            last = len(jump) - 1 - np.unique(jump[::-1], return_index=True)[1]
            jumps[tag] = (jump[last], alpha[last])
        file.write(
            "%d %d %d %d %d %d %d\n"  # noqa: UP031
            % (
                len(source_vocabulary) + 1,
                len(target_vocabulary) + 1,
                len(lex_keys),
                len(jumps["HMMF"][0]),
                len(jumps["HMMR"][0]),
                len(fertility["FERF"][0]),
                len(fertility["FERR"][0]),
            )
        )
        as_text = lambda values: pc.cast(pa.array(values), pa.string())  # noqa: E731
        parts = [
            pc.binary_join_element_wise(
                as_text(lex_keys // (len(target_vocabulary) + 1)),
                as_text(lex_keys % (len(target_vocabulary) + 1)),
                _format_g(lex_alphas),
                " ",
            )
        ]
        parts += [pc.binary_join_element_wise(as_text(jump), _format_g(alpha), " ") for jump, alpha in jumps.values()]
        parts += [
            pc.binary_join_element_wise(as_text(word), as_text(fert), _format_g(alpha), " ")
            for word, fert, alpha in fertility.values()
        ]
        for part in parts:
            if len(part):
                file.write("\n".join(part.to_pylist()) + "\n")
        file.flush()

    @staticmethod
    def _summed(keys: np.ndarray, alphas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Distinct keys (sorted) and the sum of their alphas, added in file order as eflomal adds them."""
        unique, inverse = np.unique(keys, return_inverse=True)
        return unique, np.bincount(inverse.reshape(-1), weights=alphas, minlength=len(unique))

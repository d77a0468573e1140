"""What the model learned about word correspondence and order: attention alignments scored with AER
(XL PE Sec. 4.3, Table 3) and predicted reorderings scored with Kendall's tau / fuzzy reordering score, beside
the monotone (source order) baseline.

Gold alignments (`../shared/data/word_alignment_gold/<pair>/`, see its PROVENANCE.md): `<p>.src-tgt` holds
`SOURCE ||| TARGET` pre-tokenized on ASCII space; `<p>.gold` is talp: 1-based `i-j` sure, `ipj` possible
links, i = source token, j = target token. In memory every link here is 0-based `(i, j)` and P includes S.

Alignment from attention (Tang et al. 2019, with Garg et al. 2019's head averaging, as the XL PE paper says):
the model is teacher-forced on the reference; the cross-attention of the *penultimate* decoder layer is
averaged over all heads; the decoder step that predicts target sub-word t attends over the source sub-words;
t is linked to the source sub-word with the highest weight (one link per target sub-word; end-of-sentence
tokens excluded on both sides), and a target word is linked to a source word if any of their sub-words are
(Garg et al. 2019 / Zenkel et al. 2019). `projection="word_attention"` instead averages a target word's
sub-word rows, sums a source word's sub-word columns and takes one argmax per target word.

AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|), precision = |A∩P| / |A|, recall = |A∩S| / |S| (Och & Ney 2003),
counts summed over the corpus.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..features.reordering import (
    beats_source_order,
    fuzzy_reordering_score,
    kendall_tau,
    oracle_xl_positions,
    project_positions_to_subwords,
)
from ..features.text_files import read_text_lines

Link = tuple[int, int]  # (source word i, target word j), 0-based

# ---------------------------------------------------------------------------------------------------------
# Gold alignments (talp) and test sets
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoldAlignment:
    sure: frozenset[Link]
    possible: frozenset[Link]  # includes every sure link (P ⊇ S)


def parse_talp_line(line: str) -> GoldAlignment:
    """`1-2 3p4 ...` (1-based; `-` sure, `p` possible) -> 0-based sure and possible (⊇ sure) link sets."""
    sure, possible = set(), set()
    for item in line.split():
        kind = "-" if "-" in item else "p"
        i, j = item.split(kind)
        link = (int(i) - 1, int(j) - 1)
        if min(link) < 0:
            raise ValueError(f"talp links are 1-based, got {item!r} in line {line!r}")
        (sure if kind == "-" else possible).add(link)
    return GoldAlignment(frozenset(sure), frozenset(possible | sure))


def read_talp(path: str | Path) -> list[GoldAlignment]:
    """Gold alignments, one talp line per sentence pair (`xlpe.features.text_files` reading rules); a malformed
    line is a ValueError naming file and line."""
    parsed = []
    for number, line in enumerate(read_text_lines(path), start=1):
        try:
            parsed.append(parse_talp_line(line))
        except ValueError as error:
            raise ValueError(f"{path}:{number}: {error}") from None
    return parsed


def format_links(links: Iterable[Link], one_based: bool = False) -> str:
    """One line of Pharaoh links `i-j` (0-based, as fast_align/eflomal write) or talp sure links (1-based)."""
    offset = 1 if one_based else 0
    return " ".join(f"{i + offset}-{j + offset}" for i, j in sorted(links))


def read_links(path: str | Path, one_based: bool = False) -> list[set[Link]]:
    """Predicted alignments, one sentence per line of `i-j` links (Pharaoh, 0-based unless `one_based`)."""
    offset = 1 if one_based else 0
    links = []
    for number, line in enumerate(read_text_lines(path), start=1):
        try:
            links.append({(int(i) - offset, int(j) - offset) for i, j in (item.split("-") for item in line.split())})
        except ValueError:
            raise ValueError(f"{path}:{number}: not a line of i-j links: {line[:60]!r}") from None
    return links


def check_links_inside(
    links: Sequence[Iterable[Link]],
    path: str | Path,
    source_lengths: Sequence[int],
    target_lengths: Sequence[int] | None = None,
    one_based: bool = False,
) -> None:
    """ValueError naming `path:line` and the link when a link of line k does not index inside sentence pair k
    (source word i < source_lengths[k], target word j < target_lengths[k] when given, both >= 0): a links file
    of other sentences, or one shifted by a line, is refused instead of being scored."""
    offset = 1 if one_based else 0
    for number, (line_links, source_length) in enumerate(zip(links, source_lengths), start=1):
        target_length = target_lengths[number - 1] if target_lengths is not None else None
        for i, j in sorted(line_links):
            if i < 0 or j < 0 or i >= source_length or (target_length is not None and j >= target_length):
                words = f"{source_length} source" + (
                    f" and {target_length} target" if target_length is not None else ""
                )
                raise ValueError(
                    f"{path}:{number}: link {i + offset}-{j + offset} lies outside the sentence pair "
                    f"({words} words{', 1-based' if one_based else ', 0-based'})"
                )


def check_permutations(rows: Sequence[Sequence[int]], path: str | Path) -> None:
    """ValueError naming `path:line` unless every row is a permutation of 0..n-1 (n = its length)."""
    for number, row in enumerate(rows, start=1):
        if sorted(row) != list(range(len(row))):
            raise ValueError(
                f"{path}:{number}: not a permutation of 0..{len(row) - 1}: {' '.join(map(str, row[:20]))}"
                f"{' ...' if len(row) > 20 else ''}"
            )


@dataclass
class AlignmentTestSet:
    name: str
    sources: list[list[str]]
    targets: list[list[str]]
    gold: list[GoldAlignment]

    def reversed(self) -> AlignmentTestSet:
        """Swap the sides (the XL PE paper reverses De-En gold to score En-De models)."""
        swap = lambda links: frozenset((j, i) for i, j in links)
        gold = [GoldAlignment(swap(g.sure), swap(g.possible)) for g in self.gold]
        return AlignmentTestSet(f"{self.name} (reversed)", self.targets, self.sources, gold)


def load_alignment_test_set(directory: str | Path) -> AlignmentTestSet:
    """Read `<p>.src-tgt` and `<p>.gold` from a word_alignment_gold folder; tokens are split on ASCII space
    only (the ja-en source has U+3000 tokens). Checks line counts and that every link is inside its sentence."""
    directory = Path(directory)
    pairs, golds = sorted(directory.glob("*.src-tgt")), sorted(directory.glob("*.gold"))
    if len(pairs) != 1 or len(golds) != 1:
        raise ValueError(f"{directory} must hold exactly one *.src-tgt and one *.gold file, found {pairs + golds}")
    sources, targets = [], []
    for number, line in enumerate(read_text_lines(pairs[0]), start=1):
        source, bar, target = line.partition(" ||| ")
        if not bar:
            raise ValueError(f"{pairs[0]}:{number}: expected 'source ||| target'")
        sources.append(source.strip(" ").split(" "))
        targets.append(target.strip(" ").split(" "))
    gold = read_talp(golds[0])
    if len(gold) != len(sources):
        raise ValueError(f"{golds[0]} has {len(gold)} lines but {pairs[0]} has {len(sources)}")
    for index, (src, tgt, g) in enumerate(zip(sources, targets, gold)):
        if any(i >= len(src) or j >= len(tgt) for i, j in g.possible):
            raise ValueError(f"{golds[0]} line {index + 1}: a link lies outside the sentence pair")
    return AlignmentTestSet(directory.name, sources, targets, gold)


# ---------------------------------------------------------------------------------------------------------
# AER, precision, recall
# ---------------------------------------------------------------------------------------------------------


def alignment_error_rate(predicted: Sequence[Iterable[Link]], gold: Sequence[GoldAlignment]) -> dict:
    """Corpus AER / precision / recall (module docstring) with the underlying counts."""
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predicted alignments but {len(gold)} gold ones")
    a = s = a_and_s = a_and_p = 0
    for links, g in zip(predicted, gold):
        links = set(links)
        a, s = a + len(links), s + len(g.sure)
        a_and_s, a_and_p = a_and_s + len(links & g.sure), a_and_p + len(links & g.possible)
    return {
        "aer": 1.0 - (a_and_s + a_and_p) / (a + s) if a + s else 0.0,
        "precision": a_and_p / a if a else 0.0,
        "recall": a_and_s / s if s else 0.0,
        "predicted_links": a,
        "sure_links": s,
        "predicted_and_sure": a_and_s,
        "predicted_and_possible": a_and_p,
    }


def diagonal_alignment(source_length: int, target_length: int) -> set[Link]:
    """Each target word linked to the source word at the same relative position (a trivial baseline)."""
    if source_length == 0:
        return set()
    return {(min(source_length - 1, int((j + 0.5) * source_length / target_length)), j) for j in range(target_length)}


# ---------------------------------------------------------------------------------------------------------
# Words -> sub-word ids with the word of every token
# ---------------------------------------------------------------------------------------------------------


def encode_words(tokenizer, words: Sequence[str], target: bool = False) -> tuple[list[int], list[int | None]]:
    """Token ids of a pre-tokenized sentence (special tokens included) and the word index of each token (None
    for special tokens). Fast tokenizers: `is_split_into_words`; slow ones (MarianTokenizer): word by word."""
    words = list(words)
    if getattr(tokenizer, "is_fast", False):
        if target:
            encoding = tokenizer(text_target=words, is_split_into_words=True)
        else:
            encoding = tokenizer(words, is_split_into_words=True)
        return list(encoding["input_ids"]), list(encoding.word_ids())
    pieces, word_ids = [], []
    for index, word in enumerate(words):
        side = {"text_target": word} if target else {"text": word}
        ids = tokenizer(**side, add_special_tokens=False)["input_ids"]
        pieces += ids
        word_ids += [index] * len(ids)
    full = tokenizer.build_inputs_with_special_tokens(pieces)
    start = next(k for k in range(len(full) - len(pieces) + 1) if full[k : k + len(pieces)] == pieces)
    return full, [None] * start + word_ids + [None] * (len(full) - start - len(pieces))


def _pad(rows: list[list[int]], value: int) -> torch.Tensor:
    width = max(len(row) for row in rows)
    return torch.tensor([row + [value] * (width - len(row)) for row in rows], dtype=torch.long)


def _pipeline_inputs(model, tokenizer, sources: Sequence[Sequence[str]], input_ids: torch.Tensor) -> dict:
    """The extra source inputs a model derives from raw text (mvPE+POS: POS tags), as its pipeline would.
    The joined text must tokenize to exactly the word-by-word ids, else the caller passes `extra_inputs`."""
    prepare = getattr(model, "prepare_pipeline_inputs", None)
    if prepare is None:
        return {}
    texts = [" ".join(words) for words in sources]
    encoded = tokenizer(texts, return_tensors="pt", padding=True)
    if encoded["input_ids"].shape != input_ids.shape or not torch.equal(encoded["input_ids"], input_ids):
        raise ValueError(
            f"{type(model).__name__} needs inputs derived from raw text, and these sentences tokenize "
            "differently as text than word by word: pass extra_inputs="
        )
    return prepare(texts, tokenizer, encoded)


def _check_length(model, ids: list[int], index: int) -> None:
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and len(ids) > limit:
        raise ValueError(f"sentence {index} has {len(ids)} tokens, more than max_position_embeddings={limit}")


# ---------------------------------------------------------------------------------------------------------
# Alignments from the penultimate decoder layer's cross-attention
# ---------------------------------------------------------------------------------------------------------

PROJECTIONS = ("any_subword", "word_attention")


def _word_links(
    attention: np.ndarray, src_words: list[int | None], tgt_words: list[int | None], projection: str
) -> set[Link]:
    """attention: (target tokens, source tokens) for one sentence, rows = decoder steps predicting each label."""
    src_cols = [k for k, w in enumerate(src_words) if w is not None]
    tgt_rows = [t for t, w in enumerate(tgt_words) if w is not None]
    if not src_cols or not tgt_rows:
        return set()
    sub = attention[np.ix_(tgt_rows, src_cols)]
    src_of_col = np.array([src_words[k] for k in src_cols])
    tgt_of_row = np.array([tgt_words[t] for t in tgt_rows])
    if projection == "any_subword":
        best = sub.argmax(axis=1)
        return {(int(src_of_col[b]), int(j)) for b, j in zip(best, tgt_of_row)}
    word_matrix = np.zeros((int(tgt_of_row.max()) + 1, int(src_of_col.max()) + 1))
    np.add.at(word_matrix, (tgt_of_row[:, None], src_of_col[None, :]), sub)  # sum over the sub-word block
    # Row j summed over j's sub-words has the argmax of their mean; one link per target word present.
    return {(int(word_matrix[j].argmax()), int(j)) for j in np.unique(tgt_of_row)}


@torch.no_grad()
def attention_alignments(
    model,
    tokenizer,
    sources: Sequence[Sequence[str]],
    targets: Sequence[Sequence[str]],
    batch_size: int = 16,
    layer: int | None = None,
    projection: str = "any_subword",
    extra_inputs: Callable[[dict], dict] | None = None,
) -> list[set[Link]]:
    """Word alignments (0-based (source word, target word) links) of pre-tokenized sentence pairs from the
    model's cross-attention (module docstring). `layer`: decoder layer index, default the penultimate one
    (the only one for a 1-layer decoder). `extra_inputs(batch)` adds a family's extra forward inputs; without
    it, XL PE predicts its reorderings from the source as at test time and mvPE+POS tags the joined words.
    Attention is computed eagerly (sdpa returns no weights); the model's attention implementation is restored
    afterwards."""
    if projection not in PROJECTIONS:
        raise ValueError(f"projection must be one of {PROJECTIONS}, got {projection!r}")
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    num_layers = model.config.decoder_layers
    layer = max(num_layers - 2, 0) if layer is None else layer
    if not -num_layers <= layer < num_layers:
        raise ValueError(f"layer {layer} does not exist in a decoder of {num_layers} layers")
    implementation, was_training = model.config._attn_implementation, model.training
    model.set_attn_implementation("eager")
    model.eval()
    device = next(model.parameters()).device
    alignments: list[set[Link]] = []
    try:
        for start in range(0, len(sources), batch_size):
            encoded_src = [encode_words(tokenizer, s) for s in sources[start : start + batch_size]]
            encoded_tgt = [encode_words(tokenizer, t, target=True) for t in targets[start : start + batch_size]]
            for offset, ((src_ids, _), (tgt_ids, _)) in enumerate(zip(encoded_src, encoded_tgt)):
                _check_length(model, src_ids, start + offset)
                _check_length(model, tgt_ids, start + offset)
            input_ids = _pad([ids for ids, _ in encoded_src], tokenizer.pad_token_id)
            batch = {
                "input_ids": input_ids,
                "attention_mask": (_pad([[1] * len(ids) for ids, _ in encoded_src], 0)),
                "labels": _pad([ids for ids, _ in encoded_tgt], -100),
            }
            if extra_inputs is not None:
                batch.update(extra_inputs(batch))
            else:
                batch.update(_pipeline_inputs(model, tokenizer, sources[start : start + batch_size], input_ids))
            batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            cross = model(**batch, output_attentions=True).cross_attentions[layer].mean(dim=1).float().cpu().numpy()
            for b, ((_, src_words), (_, tgt_words)) in enumerate(zip(encoded_src, encoded_tgt)):
                attention = cross[b, : len(tgt_words), : len(src_words)]
                alignments.append(_word_links(attention, src_words, tgt_words, projection))
    finally:
        model.set_attn_implementation(implementation)
        model.train(was_training)
    return alignments


# ---------------------------------------------------------------------------------------------------------
# Reordering quality: predicted vs oracle XL positions
# ---------------------------------------------------------------------------------------------------------


def _dense_ranks(values: Sequence[int]) -> np.ndarray:
    ranks = np.empty(len(values), dtype=np.int64)
    ranks[np.argsort(np.asarray(values), kind="stable")] = np.arange(len(values))
    return ranks


def reordering_quality(
    predicted: Sequence[Sequence[int]],
    oracle: Sequence[Sequence[int]],
    min_items: int = 1,
    per_sentence: bool = False,
    monotone_baseline: bool = False,
) -> dict:
    """Mean Kendall's tau (in [-1, 1] and normalised (tau+1)/2 as lader reports), mean fuzzy reordering
    score and the exact-match rate of predicted vs oracle orders (element i = position of item i; any
    integers, compared by rank). Sentences with fewer than `min_items` items are left out (2: the ones whose
    order can be wrong) and counted in "sentences_left_out". `per_sentence`: also the lists behind the means
    ("per_sentence": {"kendall_tau": [...], "fuzzy_reordering_score": [...], "exact_match": [0/1 ...]}), for paired
    significance tests. `monotone_baseline`: also "monotone_baseline", the same scores of the source order (the
    identity order, each item where it is) against the oracle on the same sentences, and "beats_source_order"
    (`xlpe.features.reordering.beats_source_order`: tau at least the baseline's plus its margin; None when no
    sentence was scored): what a predicted order must beat to carry more than the source order itself."""
    if len(predicted) != len(oracle):
        raise ValueError(f"{len(predicted)} predicted reorderings but {len(oracle)} oracle ones")
    taus, scores, matches = [], [], []
    for index, (pred, ref) in enumerate(zip(predicted, oracle)):
        if len(pred) != len(ref):
            raise ValueError(f"sentence {index}: {len(pred)} predicted positions but {len(ref)} oracle ones")
        if len(ref) < min_items:
            continue
        pred, ref = _dense_ranks(pred), _dense_ranks(ref)
        taus.append(kendall_tau(pred, ref))
        scores.append(fuzzy_reordering_score(pred, ref))
        matches.append(int(np.array_equal(pred, ref)))
    n = max(len(taus), 1)
    result = {
        "kendall_tau": sum(taus) / n,
        "kendall_tau_normalized": (sum(taus) / n + 1) / 2,
        "fuzzy_reordering_score": sum(scores) / n,
        "exact_match": sum(matches) / n,
        "sentences": len(taus),
        "sentences_left_out": len(oracle) - len(taus),
    }
    if per_sentence:
        result["per_sentence"] = {"kendall_tau": taus, "fuzzy_reordering_score": scores, "exact_match": matches}
    if monotone_baseline:
        source_order = [list(range(len(ref))) for ref in oracle]
        baseline = reordering_quality(source_order, oracle, min_items=min_items)
        result["monotone_baseline"] = {key: value for key, value in baseline.items() if not key.startswith("sentences")}
        result["beats_source_order"] = (
            beats_source_order(result["kendall_tau"], baseline["kendall_tau"]) if taus else None
        )
    return result


@torch.no_grad()
def predicted_and_oracle_reorderings(
    model, tokenizer, sources: Sequence[Sequence[str]], links: Sequence[Iterable[Link]], batch_size: int = 32
) -> tuple[list[list[int]], list[list[int]]]:
    """Per sentence, the XL positions the model's reorder predictor gives the word tokens (encoder output
    `reorder_positions`) and the oracle BTG positions from `links` (`xlpe.features.reordering`), projected to the same
    sub-words. Both are restricted to word tokens (special tokens never move); compare with
    `reordering_quality`. Token level, because that is what the model predicts."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    predicted, oracle = [], []
    try:
        for start in range(0, len(sources), batch_size):
            encoded = [encode_words(tokenizer, s) for s in sources[start : start + batch_size]]
            input_ids = _pad([ids for ids, _ in encoded], tokenizer.pad_token_id).to(device)
            mask = _pad([[1] * len(ids) for ids, _ in encoded], 0).to(device)
            positions = model.get_encoder()(input_ids=input_ids, attention_mask=mask).reorder_positions
            if positions is None:
                raise ValueError(f"{type(model).__name__} predicts no reorderings (XL PE with xl_strategy 'none'?)")
            for b, (words, (_, word_ids)) in enumerate(zip(sources[start : start + batch_size], encoded)):
                keep = [k for k, w in enumerate(word_ids) if w is not None]
                oracle_words = oracle_xl_positions(sorted(links[start + b]), len(words))
                oracle_tokens = project_positions_to_subwords(oracle_words, word_ids)
                predicted.append(positions[b, keep].tolist())
                oracle.append([oracle_tokens[k] for k in keep])
    finally:
        model.train(was_training)
    return predicted, oracle


__all__ = [
    "AlignmentTestSet",
    "GoldAlignment",
    "alignment_error_rate",
    "attention_alignments",
    "check_links_inside",
    "check_permutations",
    "diagonal_alignment",
    "encode_words",
    "format_links",
    "load_alignment_test_set",
    "parse_talp_line",
    "predicted_and_oracle_reorderings",
    "read_links",
    "read_talp",
    "reordering_quality",
]

"""2PT, the two-pass Transformer of DPE (Zheng et al., Sec. 3.1, Fig. 2, Table 2), and its oracle variant.

Pass 1, a *reordering* seq2seq model, rewrites the source into target word order ("S1 S2 S3 S4" ->
"S1 S4 S3 S2"); pass 2, a *translation* model trained on reordered sources, translates that. Table 2 rows:

  row 1  reorderer alone (source -> reordered source)        `TwoPassTranslator.reorder`
  row 3  translator fed with the reorderer's output           `TwoPassTranslator.__call__`
  row 4  translator fed with the alignment-reordered source   `OracleReorderTranslator.__call__` (needs the
         word alignment of every test sentence, i.e. the reference translation: an upper bound, not a system)

Training data (`two_pass_training_pairs`): every source sentence is reordered with its word alignment by an
oracle; the reorderer learns source -> reordered source, the translator reordered source -> target. Two oracle
rules (`rule`), both at the level of whitespace-separated words (the unit Pharaoh links index):

  "btg"    `xlpe.features.reordering.oracle_xl_positions`, the BTG oracle of the preparation step (lader's rules;
           unaligned words attach to a neighbour), shared with the XL PE family;
  "paper"  the rules of DPE Sec. 3.1, `xlpe.features.reordering.dpe_target_positions(unaligned="keep")`: a word takes
           its first linked target index (one-to-many), words with the same index move together in their
           source order (many-to-one), unaligned words keep their position.

A custom `oracle(links, num_words) -> positions` callable may replace the rule (not saved by `save_pretrained`).
Both models may be plain `MarianMTModel`s or any xlpe family; generation goes through `XLPETranslationPipeline`
(so families that need extra inputs prepare them from the text). Saved layout:
`dir/reorderer/`, `dir/translator/` (model + tokenizer each) and `dir/two_pass.json`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from ..models.hub_support import add_translation_pipeline
from ..models.pipeline_translation import XLPETranslationPipeline

CONFIG_NAME = "two_pass.json"
REORDERING_RULES = ("btg", "paper")
FORMAT_VERSION = 1

Oracle = Callable[[list[tuple[int, int]], int], Sequence[int]]


# ---------------------------------------------------------------------------------------------------------
# Oracle reorderings from word alignments (training data; Table 2 row 4)
# ---------------------------------------------------------------------------------------------------------


def parse_links(alignment) -> list[tuple[int, int]]:
    """(source word, target word) pairs from a Pharaoh line "0-1 2-0", (i, j) pairs or a flat [i0, j0, ...]."""
    if isinstance(alignment, str):
        pairs = []
        for token in alignment.split():
            source, dash, target = token.partition("-")
            if not (dash and source.isdigit() and target.isdigit()):
                raise ValueError(f"malformed alignment link {token!r}; expected 'i-j' (0-based word indices)")
            pairs.append((int(source), int(target)))
        return pairs
    flat = [int(v) for link in alignment for v in (link if isinstance(link, (tuple, list)) else (link,))]
    if len(flat) % 2:
        raise ValueError(f"alignment must hold (source, target) pairs, got an odd number of values: {flat}")
    return list(zip(flat[0::2], flat[1::2]))


def reorder_sentence(words: Sequence[str], xl_positions: Sequence[int]) -> list[str]:
    """Place word i at position xl_positions[i] (XL PE Fig. 1b convention: element i = new index of word i)."""
    if len(words) != len(xl_positions):
        raise ValueError(f"{len(words)} words but {len(xl_positions)} positions")
    if sorted(int(p) for p in xl_positions) != list(range(len(words))):
        raise ValueError(f"positions must be a permutation of 0..{len(words) - 1}, got {list(xl_positions)}")
    reordered = [""] * len(words)
    for word, position in zip(words, xl_positions):
        reordered[int(position)] = word
    return reordered


def oracle_word_positions(links, num_words: int, rule: str = "btg") -> list[int]:
    """New position of every source word under the oracle `rule` ("btg" or "paper", module docstring)."""
    if rule not in REORDERING_RULES:
        raise ValueError(f"rule must be one of {REORDERING_RULES}, got {rule!r}")
    try:
        from ..features import reordering
    except ImportError as error:  # pragma: no cover - the preparation module is part of the package
        raise ImportError(
            "the oracle reorderings need xlpe.features.reordering (pass `oracle=` to use your own)"
        ) from error
    links = parse_links(links)
    for i, j in links:
        if not 0 <= i < num_words or j < 0:
            raise ValueError(f"link {i}-{j} is outside the source sentence of {num_words} words")
    if rule == "btg":
        return list(reordering.oracle_xl_positions(links, num_words))
    return list(reordering.dpe_target_positions(links, num_words, list(range(num_words)), unaligned="keep"))


def reorder_with_alignment(source: str, alignment, rule: str = "btg", oracle: Oracle | None = None) -> str:
    """The source sentence in target word order, read off its word alignment (the oracle of Table 2 row 4)."""
    words = source.split()
    links = parse_links(alignment)
    positions = oracle(links, len(words)) if oracle is not None else oracle_word_positions(links, len(words), rule)
    return " ".join(reorder_sentence(words, positions))


def reordering_pairs(
    sources: Sequence[str], alignments: Sequence, rule: str = "btg", oracle: Oracle | None = None
) -> list[tuple[str, str]]:
    """Training pairs of the reordering model: (source, oracle-reordered source), one per sentence."""
    if len(sources) != len(alignments):
        raise ValueError(f"{len(sources)} sources but {len(alignments)} alignments")
    return [(source, reorder_with_alignment(source, links, rule, oracle)) for source, links in zip(sources, alignments)]


def two_pass_training_pairs(
    sources: Sequence[str],
    targets: Sequence[str],
    alignments: Sequence,
    rule: str = "btg",
    oracle: Oracle | None = None,
) -> dict[str, list[tuple[str, str]]]:
    """Both training sets of 2PT: "reorderer" (source -> reordered source), "translator" (reordered -> target)."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    pairs = reordering_pairs(sources, alignments, rule, oracle)
    return {"reorderer": pairs, "translator": [(reordered, target) for (_, reordered), target in zip(pairs, targets)]}


# ---------------------------------------------------------------------------------------------------------
# Generation helpers and the saved layout
# ---------------------------------------------------------------------------------------------------------


def _as_list(texts) -> tuple[list[str], bool]:
    if isinstance(texts, str):
        return [texts], True
    if not isinstance(texts, (list, tuple)) or not all(isinstance(text, str) for text in texts):
        raise ValueError(f"texts must be a string or a list of strings, got {type(texts).__name__}")
    return list(texts), False


def _run(pipe: XLPETranslationPipeline, texts: list[str], **generate_kwargs) -> list[str]:
    if not texts:
        return []
    generate_kwargs = {key: value for key, value in generate_kwargs.items() if value is not None}
    return [item["translation_text"] for item in pipe(texts, **generate_kwargs)]


def _save_stage(directory: Path, name: str, pipe: XLPETranslationPipeline) -> None:
    pipe.model.save_pretrained(directory / name)
    pipe.tokenizer.save_pretrained(directory / name)
    add_translation_pipeline(directory / name)  # each stage alone: pipeline("translation", ...), stock models too


def _load_stage(directory: Path, name: str, **model_kwargs):
    from .model_loading import load_whole

    model = load_whole(AutoModelForSeq2SeqLM, directory / name, **model_kwargs).eval()
    return model, AutoTokenizer.from_pretrained(directory / name)


def _read_config(directory: Path, kind: str) -> dict:
    path = directory / CONFIG_NAME
    if not path.is_file():
        raise ValueError(f"{directory} is not a saved 2PT directory: {CONFIG_NAME} is missing")
    config = json.loads(path.read_text())
    if config.get("kind") != kind:
        other = "OracleReorderTranslator" if config.get("kind") == "oracle" else "TwoPassTranslator"
        raise ValueError(
            f"{directory} holds a 2PT model of kind {config.get('kind')!r}: load it with {other}.from_pretrained"
        )
    return config


def _write_config(directory: Path, config: dict) -> None:
    (directory / CONFIG_NAME).write_text(json.dumps({"format_version": FORMAT_VERSION, **config}, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------------------
# The two pipelines
# ---------------------------------------------------------------------------------------------------------


class TwoPassTranslator:
    """2PT (Sec. 3.1, Fig. 2): reorder the raw source with a seq2seq model, then translate the reordered text.

    Args:
        reorderer, reorderer_tokenizer: a seq2seq model trained on `reordering_pairs` and its tokenizer.
        translator, translator_tokenizer: a translation model trained on reordered sources and its tokenizer.
        rule: the oracle rule the training data was built with (recorded; used by `oracle_variant`).
    """

    def __init__(self, reorderer, reorderer_tokenizer, translator, translator_tokenizer, rule: str = "btg"):
        if rule not in REORDERING_RULES:
            raise ValueError(f"rule must be one of {REORDERING_RULES}, got {rule!r}")
        self.reorder_pipeline = XLPETranslationPipeline(model=reorderer.eval(), tokenizer=reorderer_tokenizer)
        self.translate_pipeline = XLPETranslationPipeline(model=translator.eval(), tokenizer=translator_tokenizer)
        self.rule = rule

    def reorder(self, texts, num_beams: int | None = None, batch_size: int = 16, **generate_kwargs):
        """Pass 1 (Table 2 row 1): the sources in target word order, as text."""
        texts, single = _as_list(texts)
        out = _run(self.reorder_pipeline, texts, num_beams=num_beams, batch_size=batch_size, **generate_kwargs)
        return out[0] if single else out

    def translate_reordered(self, reordered, num_beams: int | None = None, batch_size: int = 16, **generate_kwargs):
        """Pass 2 alone: translate already reordered sources."""
        texts, single = _as_list(reordered)
        out = _run(self.translate_pipeline, texts, num_beams=num_beams, batch_size=batch_size, **generate_kwargs)
        return out[0] if single else out

    def __call__(self, texts, num_beams: int | None = None, batch_size: int = 16, **generate_kwargs):
        """Raw text in, translations out (Table 2 row 3). `generate_kwargs` apply to both passes."""
        texts, single = _as_list(texts)
        reordered = self.reorder(texts, num_beams=num_beams, batch_size=batch_size, **generate_kwargs)
        out = self.translate_reordered(reordered, num_beams=num_beams, batch_size=batch_size, **generate_kwargs)
        return out[0] if single else out

    def oracle_variant(self) -> OracleReorderTranslator:
        """The same translator fed with alignment-reordered sources (Table 2 row 4)."""
        return OracleReorderTranslator(self.translate_pipeline.model, self.translate_pipeline.tokenizer, rule=self.rule)

    def save_pretrained(self, save_directory) -> None:
        directory = Path(save_directory)
        directory.mkdir(parents=True, exist_ok=True)
        _save_stage(directory, "reorderer", self.reorder_pipeline)
        _save_stage(directory, "translator", self.translate_pipeline)
        _write_config(directory, {"kind": "two_pass", "rule": self.rule})

    @classmethod
    def from_pretrained(cls, directory, **model_kwargs) -> TwoPassTranslator:
        directory = Path(directory)
        config = _read_config(directory, "two_pass")
        reorderer = _load_stage(directory, "reorderer", **model_kwargs)
        translator = _load_stage(directory, "translator", **model_kwargs)
        return cls(*reorderer, *translator, rule=config.get("rule", "btg"))


class OracleReorderTranslator:
    """Table 2 row 4: translate the source reordered by its word alignment (oracle). Needs the alignment of
    every input sentence, hence the reference translation: an upper bound for 2PT, not usable at test time.

    Args:
        translator, translator_tokenizer: the 2PT translation model (trained on reordered sources).
        rule: oracle rule ("btg" or "paper"); `oracle`: a custom `(links, num_words) -> positions` (not saved).
    """

    def __init__(self, translator, translator_tokenizer, rule: str = "btg", oracle: Oracle | None = None):
        if rule not in REORDERING_RULES:
            raise ValueError(f"rule must be one of {REORDERING_RULES}, got {rule!r}")
        self.translate_pipeline = XLPETranslationPipeline(model=translator.eval(), tokenizer=translator_tokenizer)
        self.rule, self.oracle = rule, oracle

    def reorder(self, texts, alignments) -> list[str]:
        """The sources in target word order, read off their alignments (Pharaoh lines or (i, j) pairs)."""
        texts, single = _as_list(texts)
        alignments = [alignments] if single else alignments
        reordered = [pair[1] for pair in reordering_pairs(texts, alignments, self.rule, self.oracle)]
        return reordered[0] if single else reordered

    def __call__(self, texts, alignments, num_beams: int | None = None, batch_size: int = 16, **generate_kwargs):
        texts, single = _as_list(texts)
        reordered = self.reorder(texts, [alignments] if single else alignments)
        out = _run(self.translate_pipeline, reordered, num_beams=num_beams, batch_size=batch_size, **generate_kwargs)
        return out[0] if single else out

    def save_pretrained(self, save_directory) -> None:
        directory = Path(save_directory)
        directory.mkdir(parents=True, exist_ok=True)
        _save_stage(directory, "translator", self.translate_pipeline)
        _write_config(directory, {"kind": "oracle", "rule": self.rule})

    @classmethod
    def from_pretrained(cls, directory, **model_kwargs) -> OracleReorderTranslator:
        directory = Path(directory)
        config = _read_config(directory, "oracle")
        return cls(*_load_stage(directory, "translator", **model_kwargs), rule=config.get("rule", "btg"))


__all__ = [
    "OracleReorderTranslator",
    "TwoPassTranslator",
    "oracle_word_positions",
    "parse_links",
    "reorder_sentence",
    "reorder_with_alignment",
    "reordering_pairs",
    "two_pass_training_pairs",
]

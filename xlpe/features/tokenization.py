"""Joint sub-word tokenizers trained with `tokenizers`, shaped like Marian's.

A Marian checkpoint expects: `<pad>` as padding and decoder start, `</s>` appended to every source and
target sequence, `<unk>` for unknown pieces. `train_joint_tokenizer` trains one shared (source + target)
Unigram or BPE model on raw text and returns a `PreTrainedTokenizerFast` with exactly those conventions,
so that `word_ids()` is available for projecting word-level features (reorderings, POS tags) to sub-words.

Determinism: the `tokenizers` Unigram trainer sums its EM statistics in hash-map order, so two trainings on
the same text give scores that differ in the 13th-15th digit, and pieces of equal score in a different order
(other ids). `train_joint_tokenizer` therefore canonicalises what it learned (scores rounded to
`SCORE_DECIMALS` places, pieces of equal score ordered by text), and `tokenizer_fingerprint` (the key of the
preparation cache) hashes the same canonical form, without the call-time padding/truncation settings.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "</s>", "<unk>"
SPECIAL_TOKENS = [PAD, EOS, UNK]  # ids 0, 1, 2 in every tokenizer trained here
SCORE_DECIMALS = 5  # Unigram log-probabilities kept to 1e-5: far above the trainer's ~1e-12 run-to-run jitter,
#   below what changes a segmentation (SentencePiece itself stores float32 scores, ~7 significant digits)
CHARACTER_SCORE_STEP = 1e-4  # the Unigram trainer's score step between the alphabet characters it appends


def _batched(texts: Iterable[str], size: int = 1000) -> Iterator[list[str]]:
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def train_joint_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 8000,
    model: str = "unigram",
    lowercase: bool = False,
    model_max_length: int = 512,
) -> PreTrainedTokenizerFast:
    """Train a joint sub-word tokenizer on `texts` (source and target sentences mixed).

    Args:
        texts: raw sentences; whitespace separates words (the unit word alignments and tags refer to).
        vocab_size: size of the sub-word vocabulary including the three special tokens.
        model: "unigram" (SentencePiece-style, as Marian) or "bpe".
        lowercase: lowercase before segmentation.
        model_max_length: stored on the tokenizer; longer inputs are truncated when `truncation=True`.
    """
    if model not in ("unigram", "bpe"):
        raise ValueError(f"model must be 'unigram' or 'bpe', got {model!r}")
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise ValueError(f"vocab_size must be > {len(SPECIAL_TOKENS)}, got {vocab_size}")
    if model == "unigram":
        tokenizer = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, unk_token=UNK, show_progress=False
        )
    else:
        tokenizer = Tokenizer(models.BPE(unk_token=UNK))
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    norm = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
    tokenizer.normalizer = normalizers.Sequence(norm)
    # Metaspace keeps word boundaries in the pieces ("▁word"), so decoding restores spaces and
    # word_ids() follows whitespace-separated words.
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.train_from_iterator(_batched(texts), trainer=trainer)
    if model == "unigram":
        _canonicalise_unigram(tokenizer)
    if tokenizer.get_vocab_size() < 0.9 * vocab_size:
        warnings.warn(
            f"the {model} tokenizer learned only {tokenizer.get_vocab_size()} of the {vocab_size} pieces asked for "
            "(a corpus too small for this vocabulary); words may be split into characters. "
            "For tiny corpora model='bpe' keeps whole words.",
            stacklevel=2,
        )
    eos_id = tokenizer.token_to_id(EOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}", pair=f"$A $B {EOS}", special_tokens=[(EOS, eos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        model_max_length=model_max_length,
        padding_side="right",
    )


def _rounded_score(score: float) -> float:
    return round(score, SCORE_DECIMALS) + 0.0  # + 0.0: no "-0.0"


def _canonicalise_unigram(tokenizer: Tokenizer) -> None:
    """Replace a freshly trained Unigram model by its canonical form: special tokens first (ids 0, 1, 2), then
    the pieces by rounded score, highest first, ties by text; the same text and options give the same bytes."""
    state = json.loads(tokenizer.to_str())["model"]
    specials = [(piece, score) for piece, score in state["vocab"] if piece in SPECIAL_TOKENS]
    if [piece for piece, _ in specials] != [piece for piece, _ in state["vocab"][: len(specials)]]:
        raise ValueError(f"expected the special tokens {SPECIAL_TOKENS} first in the trained vocabulary")
    pieces = [(piece, score) for piece, score in state["vocab"][len(specials) :]]
    # The characters the trainer adds to cover the alphabet score lowest + k * 1e-4, k in hash-set order:
    # those grid scores (k = 0, 1, ... without a gap) go to the pieces on them in text order.
    lowest, on_grid = min((score for _, score in pieces), default=0.0), {}
    for index, (_, score) in enumerate(pieces):
        steps = (score - lowest) / CHARACTER_SCORE_STEP
        if abs(steps - round(steps)) < 1e-3:
            on_grid.setdefault(round(steps), []).append(index)
    alphabet = [index for k in itertools.takewhile(on_grid.__contains__, itertools.count()) for index in on_grid[k]]
    scores = sorted((_rounded_score(pieces[index][1]) for index in alphabet), reverse=True)
    for index, piece, score in zip(sorted(alphabet), sorted(pieces[index][0] for index in alphabet), scores):
        pieces[index] = (piece, score)
    pieces = sorted(((piece, _rounded_score(score)) for piece, score in pieces), key=lambda item: (-item[1], item[0]))
    vocab = [(piece, _rounded_score(score)) for piece, score in specials] + pieces
    tokenizer.model = models.Unigram(vocab, unk_id=[piece for piece, _ in vocab].index(UNK),
                                     byte_fallback=bool(state.get("byte_fallback", False)))  # fmt: skip


def tokenizer_fingerprint(tokenizer) -> str:
    """A hash of everything that decides how `tokenizer` segments text (the preparation cache's key): the
    backend state with Unigram scores rounded as `train_joint_tokenizer` rounds them and without padding and
    truncation (settings a call leaves behind); the vocabulary and init arguments of a slow tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = json.loads(backend.to_str())
        state.pop("padding", None), state.pop("truncation", None)
        model = state.get("model") or {}
        if model.get("type") == "Unigram":
            model["vocab"] = [[piece, _rounded_score(score)] for piece, score in model["vocab"]]
        text = json.dumps(state, sort_keys=True, ensure_ascii=False)
    else:
        text = json.dumps(sorted(tokenizer.get_vocab().items())) + repr(getattr(tokenizer, "init_kwargs", {}))
    return hashlib.sha256((type(tokenizer).__name__ + text).encode()).hexdigest()


def vocab_fingerprint(tokenizer) -> str:
    """A hash of the piece <-> id table alone: the same for a tokenizer and its saved copy, whatever its class
    or file paths (what decides whether token ids prepared with one mean the same with the other)."""
    return hashlib.sha256(json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False).encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------------------------------------
# Tokenisation with word ids (the sub-word projection's input)
# ----------------------------------------------------------------------------------------------------------


def _word_ids_from_encoding(encoding, words: list[str], text: str) -> list[int]:
    """Word index of every token (-1 for special tokens) from a `tokenizers.Encoding` of " ".join(words).

    Uses `word_ids` when they enumerate exactly the whitespace words in order; otherwise maps each token's
    start offset to the word containing it (a space belongs to the word after it)."""
    word_ids = encoding.word_ids
    seen = [w for k, w in enumerate(word_ids) if w is not None and (k == 0 or word_ids[k - 1] != w)]
    if seen == list(range(len(words))):
        return [-1 if w is None else w for w in word_ids]
    starts = list(itertools.accumulate((len(w) + 1 for w in words[:-1]), initial=0))
    result, previous = [], 0
    for special, (start, _) in zip(encoding.special_tokens_mask, encoding.offsets):
        if special:
            result.append(-1)
            continue
        while start < len(text) and text[start] == " ":
            start += 1
        previous = max(previous, min(max(bisect.bisect_right(starts, start) - 1, 0), len(words) - 1))
        result.append(previous)  # non-decreasing, so the pieces of a word stay contiguous
    return result


def _tokenize_word_by_word(tokenizer, words_batch, target: bool) -> tuple[list[list[int]], list[list[int]]]:
    """Fallback for tokenizers without `word_ids()`: encode each word alone, then add the special tokens."""
    all_ids, all_word_ids = [], []
    for words in words_batch:
        pieces = tokenizer(text_target=words, add_special_tokens=False) if target else tokenizer(
            words, add_special_tokens=False
        )
        flat = [i for piece in pieces["input_ids"] for i in piece] if words else []
        owner = [w for w, piece in enumerate(pieces["input_ids"]) for _ in piece] if words else []
        ids = tokenizer.build_inputs_with_special_tokens(flat)
        special = tokenizer.get_special_tokens_mask(flat)
        owner_iter = iter(owner)
        all_ids.append(ids)
        all_word_ids.append([-1 if s else next(owner_iter) for s in special])
    return all_ids, all_word_ids


@dataclass
class TokenizedBatch:
    """Token ids and word ids of a batch of texts, flat: text s owns `ids[offsets[s]:offsets[s + 1]]` and the
    same slice of `word_ids` (the whitespace word of each token, -1 for special tokens)."""

    ids: np.ndarray  # int64
    word_ids: np.ndarray  # int64, -1 = special token
    offsets: np.ndarray  # int64 (N + 1,)
    num_words: np.ndarray  # int64 (N,): whitespace words per text (`len(text.split())`)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def to_lists(self) -> tuple[list[list[int]], list[list[int]]]:
        bounds = self.offsets.tolist()
        ids, word_ids = self.ids.tolist(), self.word_ids.tolist()
        return ([ids[a:b] for a, b in itertools.pairwise(bounds)],
                [word_ids[a:b] for a, b in itertools.pairwise(bounds)])  # fmt: skip


def _flat(lists: Sequence[Sequence[int | None]]) -> tuple[np.ndarray, np.ndarray]:
    """Values (None -> -1) and offsets of a list of int lists, as int64 arrays (through Arrow: no Python loop)."""
    array = pa.array(lists, type=pa.list_(pa.int64()))
    values = np.array(array.flatten().fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)  # writable
    return values, array.offsets.to_numpy().astype(np.int64)


def _texts_not_following_words(word_ids: np.ndarray, offsets: np.ndarray, num_words: np.ndarray) -> np.ndarray:
    """The texts whose word ids do not enumerate their whitespace words 0, 1, ... in order (each new id where
    it differs from the previous token's, a special token included), as `_word_ids_from_encoding` checks."""
    token_text = np.repeat(np.arange(len(num_words), dtype=np.int64), np.diff(offsets))
    previous = np.r_[-1, word_ids[:-1]]
    previous[offsets[:-1][np.diff(offsets) > 0]] = -1  # a text's first token has no previous token
    starts = np.flatnonzero((word_ids >= 0) & (word_ids != previous))
    starts_per_text = np.bincount(token_text[starts], minlength=len(num_words))
    first_start = np.r_[0, np.cumsum(starts_per_text)[:-1]]
    rank = np.arange(len(starts)) - first_start[token_text[starts]]  # k-th word start of its text
    wrong = np.zeros(len(num_words), dtype=bool)
    wrong[token_text[starts[word_ids[starts] != rank]]] = True
    return np.flatnonzero(wrong | (starts_per_text != num_words))


def tokenize_batch(tokenizer, texts: Sequence[str], target: bool = False) -> TokenizedBatch:
    """Tokenise texts (single-space-joined words) with word ids, flat (`TokenizedBatch`): one batch call of a
    fast tokenizer; word ids from `word_ids()` where they enumerate the whitespace words, from the character
    offsets otherwise (`_word_ids_from_encoding`); a tokenizer without `word_ids()` goes word by word."""
    texts = list(texts)
    num_words = np.fromiter((len(t.split()) for t in texts), dtype=np.int64, count=len(texts))
    if not texts:
        empty = np.zeros(0, dtype=np.int64)
        return TokenizedBatch(empty, empty.copy(), np.zeros(1, dtype=np.int64), num_words)
    if not getattr(tokenizer, "is_fast", False):
        ids, word_ids = _tokenize_word_by_word(tokenizer, [t.split() for t in texts], target)
        (ids, offsets), (word_ids, _) = _flat(ids), _flat(word_ids)
        return TokenizedBatch(ids, word_ids, offsets, num_words)
    options = {"verbose": False, "return_attention_mask": False, "return_token_type_ids": False}  # callers check lengths
    encoded = tokenizer(text_target=texts, **options) if target else tokenizer(texts, **options)
    encodings = encoded.encodings
    ids, offsets = _flat(encoded["input_ids"])
    word_ids, _ = _flat([e.word_ids for e in encodings])
    for k in _texts_not_following_words(word_ids, offsets, num_words).tolist():
        word_ids[offsets[k] : offsets[k + 1]] = _word_ids_from_encoding(encodings[k], texts[k].split(), texts[k])
    return TokenizedBatch(ids, word_ids, offsets, num_words)


def tokenize_with_word_ids(tokenizer, texts: list[str], target: bool = False):
    """(input ids, word ids with -1 for special tokens) per text; texts are single-space-joined words."""
    return tokenize_batch(tokenizer, texts, target).to_lists()


# ----------------------------------------------------------------------------------------------------------
# Word starts (for the XL PE reorderer's word-level ranking)
# ----------------------------------------------------------------------------------------------------------

WORD_START_MARKERS = {"\u2581": "sentencepiece / Metaspace: a word starts with ▁",
                      "\u0120": "byte-level BPE: a word after a space starts with Ġ"}  # fmt: skip


def word_start_flags(tokenizer) -> list[bool] | None:
    """For every id of `tokenizer`, does its piece begin a whitespace word? Sentencepiece-style vocabularies
    (▁), byte-level BPE (Ġ; the first word of a text has no marker, the model treats the first token as a
    start anyway) and WordPiece (continuations start with ##) are recognised; None for any other scheme (the
    reorderer then ranks single tokens)."""
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    pieces = [piece or "" for piece in pieces]
    if any(piece.startswith("##") for piece in pieces) and not any(piece.startswith("\u2581") for piece in pieces):
        return [not piece.startswith("##") for piece in pieces]
    counts = {marker: sum(piece.startswith(marker) for piece in pieces) for marker in WORD_START_MARKERS}
    marker = max(counts, key=counts.get)
    if counts[marker] == 0:
        return None
    return [piece.startswith(marker) for piece in pieces]

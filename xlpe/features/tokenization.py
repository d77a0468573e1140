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

from .tokenizer_files import TOKENIZER_JSON_FILES, check_tokenizer_files  # noqa: F401  (re-exported)

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
    tokenizer.model = models.Unigram(
        vocab, unk_id=[piece for piece, _ in vocab].index(UNK), byte_fallback=bool(state.get("byte_fallback", False))
    )


def tokenizer_fingerprint(tokenizer) -> str:
    """A hash of everything that decides how `tokenizer` segments text (the preparation cache's key): the
    backend state with Unigram scores rounded as `train_joint_tokenizer` rounds them and without padding and
    truncation (settings a call leaves behind); the vocabulary, the vocabulary files and the init arguments of a
    slow tokenizer (`_slow_tokenizer_state`: the same for a tokenizer and its saved copy)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = json.loads(backend.to_str())
        state.pop("padding", None), state.pop("truncation", None)
        model = state.get("model") or {}
        if model.get("type") == "Unigram":
            model["vocab"] = [[piece, _rounded_score(score)] for piece, score in model["vocab"]]
        text = json.dumps(state, sort_keys=True, ensure_ascii=False)
    else:
        text = json.dumps(sorted(tokenizer.get_vocab().items())) + _slow_tokenizer_state(tokenizer)
    return hashlib.sha256((type(tokenizer).__name__ + text).encode()).hexdigest()


# init arguments of a slow tokenizer that say where it was loaded from or set call-time limits, not how it segments
# (the fast tokenizers' state is taken without its padding and truncation for the same reason)
LOCATION_KWARGS = frozenset(
    {"name_or_path", "is_local", "local_files_only", "tokenizer_file", "_commit_hash", "model_max_length"}
    | {"padding_side", "truncation_side"}
)


def _slow_tokenizer_state(tokenizer) -> str:
    """A slow tokenizer's init arguments (without file locations) and a hash of the vocabulary files it saves
    (`save_vocabulary`: a MarianTokenizer's `source.spm`, `target.spm`, `vocab.json`, `target_vocab.json`), so
    that two SentencePiece models behind one vocabulary differ and a saved copy matches its original."""
    import os
    import tempfile
    from pathlib import Path

    kwargs = {
        key: value
        for key, value in getattr(tokenizer, "init_kwargs", {}).items()
        if key not in LOCATION_KWARGS and not (isinstance(value, str) and os.path.exists(value))
    }
    digest = hashlib.sha256(repr(sorted(kwargs.items(), key=lambda item: item[0])).encode())
    save_vocabulary = getattr(tokenizer, "save_vocabulary", None)
    with tempfile.TemporaryDirectory() as directory:
        try:
            files = (save_vocabulary(directory) or ()) if save_vocabulary is not None else ()
        except (NotImplementedError, OSError, TypeError):
            files = ()
        for path in sorted(Path(file) for file in files if file and Path(file).is_file()):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def vocab_fingerprint(tokenizer) -> str:
    """A hash of the piece <-> id table alone: the same for a tokenizer and its saved copy, whatever its class
    or file paths (what decides whether token ids prepared with one mean the same with the other)."""
    return hashlib.sha256(json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False).encode()).hexdigest()[
        :16
    ]


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
        pieces = (
            tokenizer(text_target=words, add_special_tokens=False)
            if target
            else tokenizer(words, add_special_tokens=False)
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
        return (
            [ids[a:b] for a, b in itertools.pairwise(bounds)],
            [word_ids[a:b] for a, b in itertools.pairwise(bounds)],
        )


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


def tokenize_batch(tokenizer, texts: Sequence[str], target: bool = False, word_cache: bool = True) -> TokenizedBatch:
    """Tokenise texts (single-space-joined words) with word ids, flat (`TokenizedBatch`).

    A tokenizer that segments every whitespace word on its own (`_WordPieceCache.for_tokenizer`: the joint
    tokenizers trained here, Metaspace + Unigram/BPE) is run once per distinct word and the texts are assembled
    from the cached pieces (`word_cache=False`: never); other fast tokenizers get one batch call, with word ids
    from `word_ids()` where they enumerate the whitespace words, from the character offsets otherwise
    (`_word_ids_from_encoding`); a tokenizer without `word_ids()` goes word by word. All ways give the same ids."""
    texts = list(texts)
    num_words = np.fromiter((len(t.split()) for t in texts), dtype=np.int64, count=len(texts))
    if not texts:
        empty = np.zeros(0, dtype=np.int64)
        return TokenizedBatch(empty, empty.copy(), np.zeros(1, dtype=np.int64), num_words)
    if not getattr(tokenizer, "is_fast", False):
        ids, word_ids = _tokenize_word_by_word(tokenizer, [t.split() for t in texts], target)
        (ids, offsets), (word_ids, _) = _flat(ids), _flat(word_ids)
        return TokenizedBatch(ids, word_ids, offsets, num_words)
    cache = _WordPieceCache.for_tokenizer(tokenizer) if word_cache else None
    if cache is not None:
        batch = cache.tokenize(texts, num_words, lambda rows: _tokenize_fast_call(tokenizer, rows, target))
        if batch is not None:
            return batch
    return _tokenize_fast_call(tokenizer, texts, target, num_words)


def _tokenize_fast_call(
    tokenizer, texts: list[str], target: bool, num_words: np.ndarray | None = None
) -> TokenizedBatch:
    """One batch call of a fast tokenizer; word ids from `word_ids()`, or the offsets where those do not follow
    the whitespace words."""
    if num_words is None:
        num_words = np.fromiter((len(t.split()) for t in texts), dtype=np.int64, count=len(texts))
    options = {
        "verbose": False,
        "return_attention_mask": False,
        "return_token_type_ids": False,
    }  # callers check lengths
    encoded = tokenizer(text_target=texts, **options) if target else tokenizer(texts, **options)
    encodings = encoded.encodings
    ids, offsets = _flat(encoded["input_ids"])
    word_ids, _ = _flat([e.word_ids for e in encodings])
    for k in _texts_not_following_words(word_ids, offsets, num_words).tolist():
        word_ids[offsets[k] : offsets[k + 1]] = _word_ids_from_encoding(encodings[k], texts[k].split(), texts[k])
    return TokenizedBatch(ids, word_ids, offsets, num_words)


# ----------------------------------------------------------------------------------------------------------
# Each distinct word tokenised once (the fast path of `tokenize_batch`)
# ----------------------------------------------------------------------------------------------------------

_WORD_LOCAL_NORMALIZERS = ("NFC", "NFD", "NFKC", "NFKD", "Lowercase")  # per character: " ".join commutes with them
WORD_CACHE_LIMIT = 500_000  # distinct words one cache holds (~100 MB) before it starts again


class _WordPieceCache:
    """The pieces of every distinct whitespace word a tokenizer has met, in flat arrays (word k owns
    `pieces[starts[k]:starts[k] + lengths[k]]`), per tokenizer and process.

    Exact for tokenizers whose segmentation of single-space-joined words is the concatenation of each word's own
    segmentation between fixed special tokens: the class `PreTrainedTokenizerFast` itself (no subclass with its
    own encoding or target mode), per-character normalizers (NFKC, NFC, NFD, NFKD, Lowercase), the Metaspace
    pre-tokenizer splitting at every space with the prefix "always" or "first", a Unigram or BPE model without
    dropout, and a post-processor adding the same special tokens around every text. Words holding an added
    token's text (`</s>`, ...) and texts not single-space joined go through the tokenizer call instead. The
    tokenizer's Rust encoder costs ~1.6 us per word; a corpus repeats its words, so most words cost one dict
    lookup here (docs/benchmarks/corpus_scale.md)."""

    _caches: dict[int, tuple] = {}  # id(tokenizer) -> (weak reference, signature, cache or None)

    def __init__(
        self, backend: Tokenizer, prefix: list[int], suffix: list[int], added: list[tuple[str, bool]], replacement: str
    ):
        self.backend, self.prefix, self.suffix = (
            backend,
            np.array(prefix, dtype=np.int64),
            np.array(suffix, dtype=np.int64),
        )
        self.added, self.replacement = added, replacement
        self.clear()

    def clear(self) -> None:
        self.index: dict[str, int] = {}
        self.pieces, self.starts = np.zeros(1024, dtype=np.int64), np.zeros(1024, dtype=np.int64)
        self.lengths, self.unsafe = np.zeros(1024, dtype=np.int64), np.zeros(1024, dtype=bool)
        self.words, self.used = 0, 0  # distinct words held, pieces used

    @classmethod
    def for_tokenizer(cls, tokenizer) -> _WordPieceCache | None:
        """This process's cache for `tokenizer`, or None when it does not segment word by word."""
        import weakref

        backend = getattr(tokenizer, "backend_tokenizer", None)
        signature = (id(backend), len(tokenizer))
        found = cls._caches.get(id(tokenizer))
        if found is not None and found[0]() is tokenizer and found[1] == signature:
            return found[2]
        cache = cls._build(tokenizer, backend)
        cls._caches = {key: value for key, value in cls._caches.items() if value[0]() is not None}
        cls._caches[id(tokenizer)] = (weakref.ref(tokenizer), signature, cache)
        return cache

    @classmethod
    def _build(cls, tokenizer, backend) -> _WordPieceCache | None:
        if type(tokenizer) is not PreTrainedTokenizerFast or backend is None:
            return None
        state = json.loads(backend.to_str())
        normalizer = state.get("normalizer") or {"type": "Sequence", "normalizers": []}
        parts = normalizer.get("normalizers", []) if normalizer.get("type") == "Sequence" else [normalizer]
        pre, model = state.get("pre_tokenizer") or {}, state.get("model") or {}
        if (
            any(part.get("type") not in _WORD_LOCAL_NORMALIZERS for part in parts)
            or pre.get("type") != "Metaspace"
            or not pre.get("split", False)
            or pre.get("prepend_scheme") not in ("always", "first")
            or model.get("type") not in ("Unigram", "BPE")
            or model.get("dropout")
        ):
            return None
        own = Tokenizer.from_str(backend.to_str())  # a copy: no truncation or padding, as the tokenizer call
        own.no_truncation(), own.no_padding()
        full, plain = own.encode("a b"), own.encode("a b", add_special_tokens=False)
        mask = np.array(full.special_tokens_mask, dtype=bool)
        content = np.flatnonzero(~mask)
        if not len(content) or mask[content[0] : content[-1] + 1].any():
            return None
        prefix, suffix = full.ids[: content[0]], full.ids[content[-1] + 1 :]
        if full.ids != prefix + plain.ids + suffix or own.encode("").ids != prefix + suffix:
            return None
        added = [
            (token.content, token.normalized) for token in own.get_added_tokens_decoder().values() if token.content
        ]
        return cls(own, prefix, suffix, added, pre.get("replacement", "\u2581"))

    def _grow(self, words: int, pieces: int) -> None:
        for name, needed in (("starts", words), ("lengths", words), ("unsafe", words), ("pieces", pieces)):
            array = getattr(self, name)
            if needed > len(array):
                grown = np.zeros(max(needed, 2 * len(array)), dtype=array.dtype)
                grown[: len(array)] = array
                setattr(self, name, grown)

    def _add(self, words: list[str]) -> None:
        """Tokenise `words` (new, distinct) and append them."""
        pieces, lengths, unsafe = self._encode(words)
        first = self.words
        self._grow(first + len(words), self.used + len(pieces))
        self.pieces[self.used : self.used + len(pieces)] = pieces
        self.starts[first : first + len(words)] = self.used + np.r_[0, np.cumsum(lengths)[:-1]]
        self.lengths[first : first + len(words)], self.unsafe[first : first + len(words)] = lengths, unsafe
        self.index.update(zip(words, range(first, first + len(words))))
        self.words, self.used = first + len(words), self.used + len(pieces)

    def _encode(self, words: list[str], chunk: int = 256) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(pieces, pieces per word, unsafe per word) of distinct words: `chunk` words joined by spaces make one
        text (one encoding per chunk, not per word) and the word ids split its pieces. A chunk whose word ids do
        not enumerate its words one pre-token each, or that holds an added token's text, is encoded word by
        word (`_encode_one_by_one`)."""
        texts = [" ".join(words[k : k + chunk]) for k in range(0, len(words), chunk)]
        sizes = np.diff(np.r_[np.arange(0, len(words), chunk), len(words)])
        encodings = self.backend.encode_batch(texts, add_special_tokens=False)
        ids, offsets = _flat([e.ids for e in encodings])
        word_ids, _ = _flat([e.word_ids for e in encodings])
        token_chunk = np.repeat(np.arange(len(texts), dtype=np.int64), np.diff(offsets))
        previous = np.r_[-1, word_ids[:-1]]
        previous[offsets[:-1][np.diff(offsets) > 0]] = -1  # a chunk's first token follows nothing
        step = word_ids - previous
        bad = np.zeros(len(texts), dtype=bool)
        bad[token_chunk[(word_ids < 0) | (step < 0) | (step > 1)]] = True  # a skipped or repeated word, a special
        last = np.full(len(texts), -1, dtype=np.int64)
        ends = offsets[1:][np.diff(offsets) > 0] - 1
        last[token_chunk[ends]] = word_ids[ends]
        bad |= last != sizes - 1  # every word of the chunk has its pieces
        if self.added:
            normalize = self.backend.normalizer.normalize_str if self.backend.normalizer is not None else str
            bad |= [
                any(
                    content in text or (normalized and content in normalize(text)) for content, normalized in self.added
                )
                for text in texts
            ]
        word_chunk = np.repeat(np.arange(len(texts), dtype=np.int64), sizes)
        good_tokens = ~bad[token_chunk]
        word = (np.r_[0, np.cumsum(sizes)[:-1]][token_chunk] + word_ids)[good_tokens]
        lengths = np.bincount(word, minlength=len(words)).astype(np.int64)
        # every word is checked, not only those of bad chunks: a chunk's first word whose normalised text starts with
        # the Metaspace mark ("▁" alone) is segmented alike there and alone, but not after a space in a sentence
        pieces, unsafe = ids[good_tokens], self._unsafe(words)
        redo = np.flatnonzero(bad[word_chunk])
        if len(redo):  # splice the words of bad chunks, encoded one by one, in at their places
            redo_pieces, redo_lengths, _ = self._encode_one_by_one([words[k] for k in redo.tolist()])
            lengths[redo] = redo_lengths
            owner = np.r_[
                np.repeat(np.flatnonzero(~bad[word_chunk]), lengths[~bad[word_chunk]]), np.repeat(redo, redo_lengths)
            ]
            pieces = np.concatenate([pieces, redo_pieces])[np.argsort(owner, kind="stable")]
        return pieces, lengths, unsafe | (lengths == 0)

    def _encode_one_by_one(self, words: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(pieces, pieces per word, unsafe per word), one encoding per word; a word is unsafe (not segmented
        alike in a sentence) when its normalised text starts with a space or the Metaspace mark (NFKC
        "\u00b4" -> " \u0301": after the space before it, one more "\u2581" piece) or it holds an added token's
        text (split around it)."""
        encodings = self.backend.encode_batch(words, add_special_tokens=False)
        lengths = np.fromiter(map(len, encodings), dtype=np.int64, count=len(encodings))
        pieces = np.fromiter(
            itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.int64, count=int(lengths.sum())
        )
        return pieces, lengths, self._unsafe(words)

    def _unsafe(self, words: list[str]) -> np.ndarray:
        """Per word: is it segmented otherwise in a sentence than alone? Its normalised text starts with a space or
        the Metaspace mark, or it holds an added token's text (see `_encode_one_by_one`)."""
        normalize = self.backend.normalizer.normalize_str if self.backend.normalizer is not None else str
        starts = (" ", self.replacement)
        unsafe = np.zeros(len(words), dtype=bool)
        for k, word in enumerate(words):
            text = normalize(word)
            if text.startswith(starts) or any(
                content in word or (normalized and content in text) for content, normalized in self.added
            ):
                unsafe[k] = True
        return unsafe

    def codes(self, words: list[str]) -> np.ndarray:
        """The cache index of every word (new words tokenised and added; a full cache starts again)."""
        codes = np.fromiter(map(self.index.get, words, itertools.repeat(-1)), dtype=np.int64, count=len(words))
        missing = codes < 0
        if missing.any():
            new = list(dict.fromkeys(itertools.compress(words, missing)))
            if self.words and self.words + len(new) > WORD_CACHE_LIMIT:  # (a batch alone over the limit: held whole)
                self.clear()
                return self.codes(words)
            self._add(new)
            codes[missing] = np.fromiter(
                map(self.index.__getitem__, itertools.compress(words, missing)),
                dtype=np.int64,
                count=int(missing.sum()),
            )
        return codes

    def tokenize(self, texts: list[str], num_words: np.ndarray, fallback) -> TokenizedBatch | None:
        """`tokenize_batch` of single-space-joined `texts` from the cached pieces; texts with a word that is not
        word-local get `fallback(texts)` (the tokenizer call). None when a text is not single-space joined."""
        words = " ".join(texts).split()
        if " ".join(filter(None, texts)) != " ".join(words):  # a text with other whitespace than single spaces
            return None
        codes = self.codes(words)
        counts = self.lengths[codes]  # pieces per word
        word_text = np.repeat(np.arange(len(texts), dtype=np.int64), num_words)
        content = np.bincount(word_text, weights=counts, minlength=len(texts)).astype(np.int64)
        special = len(self.prefix) + len(self.suffix)
        offsets = np.r_[0, np.cumsum(content + special)]
        ids = np.empty(offsets[-1], dtype=np.int64)
        word_ids = np.full(offsets[-1], -1, dtype=np.int64)
        for k, token in enumerate(self.prefix.tolist()):
            ids[offsets[:-1] + k] = token
        for k, token in enumerate(self.suffix.tolist()):
            ids[offsets[1:] - len(self.suffix) + k] = token
        token_word = np.repeat(np.arange(len(words), dtype=np.int64), counts)
        first_token = np.r_[0, np.cumsum(counts)[:-1]]  # of each word, in the flat content
        piece = self.starts[codes][token_word] + np.arange(len(token_word), dtype=np.int64) - first_token[token_word]
        content_offsets = np.r_[0, np.cumsum(content)]
        position = np.arange(len(token_word), dtype=np.int64) + np.repeat(
            offsets[:-1] + len(self.prefix) - content_offsets[:-1], content
        )
        ids[position] = self.pieces[piece]
        word_offsets = np.r_[0, np.cumsum(num_words)]
        word_ids[position] = token_word - word_offsets[word_text[token_word]]
        batch = TokenizedBatch(ids, word_ids, offsets, num_words)
        unsafe_texts = np.unique(word_text[self.unsafe[codes]])
        if len(unsafe_texts):
            batch = _replace_texts(batch, unsafe_texts, fallback([texts[k] for k in unsafe_texts.tolist()]))
        return batch


def _replace_texts(batch: TokenizedBatch, rows: np.ndarray, other: TokenizedBatch) -> TokenizedBatch:
    """`batch` with the texts `rows` (sorted) replaced by the texts of `other` (in that order)."""
    lengths = batch.lengths.copy()
    lengths[rows] = other.lengths
    offsets = np.r_[0, np.cumsum(lengths)]
    ids, word_ids = np.empty(offsets[-1], dtype=np.int64), np.empty(offsets[-1], dtype=np.int64)
    kept = np.ones(len(batch), dtype=bool)
    kept[rows] = False
    text = np.repeat(np.arange(len(batch), dtype=np.int64), batch.lengths)
    tokens = np.flatnonzero(kept[text])
    position = tokens - batch.offsets[text[tokens]] + offsets[text[tokens]]
    ids[position], word_ids[position] = batch.ids[tokens], batch.word_ids[tokens]
    row = np.repeat(np.arange(len(rows), dtype=np.int64), other.lengths)
    position = np.arange(len(other.ids), dtype=np.int64) - other.offsets[row] + offsets[rows[row]]
    ids[position], word_ids[position] = other.ids, other.word_ids
    return TokenizedBatch(ids, word_ids, offsets, batch.num_words)


def tokenize_with_word_ids(tokenizer, texts: list[str], target: bool = False):
    """(input ids, word ids with -1 for special tokens) per text; texts are single-space-joined words."""
    return tokenize_batch(tokenizer, texts, target).to_lists()


# ----------------------------------------------------------------------------------------------------------
# Word starts (for the XL PE reorderer's word-level ranking)
# ----------------------------------------------------------------------------------------------------------

WORD_START_MARKERS = {
    "\u2581": "sentencepiece / Metaspace: a word starts with ▁",
    "\u0120": "byte-level BPE: a word after a space starts with Ġ",
}


def source_pieces(tokenizer) -> list[str]:
    """The source-side piece of every id below `len(tokenizer)` ("" for an id without one), from `get_vocab()`:
    with separate vocabularies (an `opus-mt-tc-*` MarianTokenizer) `convert_ids_to_tokens` reads the target
    vocabulary, whose pieces differ behind the same ids."""
    pieces = [""] * len(tokenizer)
    for piece, index in tokenizer.get_vocab().items():
        if 0 <= index < len(pieces):
            pieces[index] = piece or ""
    return pieces


def word_start_flags(tokenizer) -> list[bool] | None:
    """For every id of `tokenizer`, does its source-side piece begin a whitespace word? Sentencepiece-style vocabularies
    (▁), byte-level BPE (Ġ; the first word of a text has no marker, the model treats the first token as a
    start anyway) and WordPiece (continuations start with ##) are recognised; None for any other scheme (the
    reorderer then ranks single tokens)."""
    pieces = source_pieces(tokenizer)
    if any(piece.startswith("##") for piece in pieces) and not any(piece.startswith("\u2581") for piece in pieces):
        return [not piece.startswith("##") for piece in pieces]
    counts = {marker: sum(piece.startswith(marker) for piece in pieces) for marker in WORD_START_MARKERS}
    marker = max(counts, key=counts.get)
    if counts[marker] == 0:
        return None
    return [piece.startswith(marker) for piece in pieces]

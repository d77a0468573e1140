"""Joint sub-word tokenizers trained with `tokenizers`, shaped like Marian's.

A Marian checkpoint expects: `<pad>` as padding and decoder start, `</s>` appended to every source and
target sequence, `<unk>` for unknown pieces. `train_joint_tokenizer` trains one shared (source + target)
Unigram or BPE model on raw text and returns a `PreTrainedTokenizerFast` with exactly those conventions,
so that `word_ids()` is available for projecting word-level features (reorderings, POS tags) to sub-words.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "</s>", "<unk>"
SPECIAL_TOKENS = [PAD, EOS, UNK]  # ids 0, 1, 2 in every tokenizer trained here


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

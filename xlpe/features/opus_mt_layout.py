"""A checkpoint directory laid out as a Helsinki-NLP OPUS-MT Marian model, built locally from raw text.

Most users fine-tune one of the `Helsinki-NLP/opus-mt-*` checkpoints. Their layout differs from the joint fast
tokenizers that `xlpe.features.tokenization.train_joint_tokenizer` trains (`<pad>` 0, `</s>` 1, `<unk>` 2):

* a `MarianTokenizer` (slow, SentencePiece): `source.spm` and `target.spm` (two SentencePiece models, so source
  and target pieces of the same word differ), `vocab.json` in Marian's order (`</s>` 0, `<unk>` 1, the pieces,
  `<pad>` the LAST id) and `tokenizer_config.json` (`source_lang`, `target_lang`, `separate_vocabs`);
* a stock `MarianMTModel` with OPUS-MT's config conventions: `pad_token_id` = `decoder_start_token_id` = the last
  id, `eos_token_id` = `forced_eos_token_id` = 0, static sinusoidal positions, `scale_embedding`, no embedding
  layer norm, swish activations, a non-zero `final_logits_bias`, and OPUS-MT's generation config (4 beams,
  `<pad>` as a bad word, renormalised logits);
* the `opus-mt-tc-*` form with separate vocabularies (`separate_vocabs=True`): `vocab.json` for the source,
  `target_vocab.json` for the target, `share_encoder_decoder_embeddings=False` and `decoder_vocab_size`
  (the same size on both sides, as the OPUS-MT converter assumes, but other pieces behind the same id).

`build_opus_mt_checkpoint` writes that layout with tiny dimensions (the Hub is never contacted), so the commands
and the stock upgrade (`xlpe.models.hub_support.HubModelMixin`) can be tested on what users start from; the
tests build it once per session (tests/test_opus_mt_layout.py). The weights are random unless `train_steps`
trains them briefly on the given pairs.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path

EOS, UNK, PAD = "</s>", "<unk>", "<pad>"

# OPUS-MT's config.json fields (Helsinki-NLP/opus-mt-de-en) that are not sizes or token ids
OPUS_MT_CONFIG = {
    "activation_function": "swish",
    "activation_dropout": 0.0,
    "attention_dropout": 0.0,
    "dropout": 0.1,
    "encoder_layerdrop": 0.0,
    "decoder_layerdrop": 0.0,
    "init_std": 0.02,
    "is_encoder_decoder": True,
    "normalize_embedding": False,
    "scale_embedding": True,
    "static_position_embeddings": True,
    "use_cache": True,
}
OPUS_MT_GENERATION = {"num_beams": 4, "renormalize_logits": True}  # + max_length, bad_words_ids [[pad]]


def train_sentencepiece(texts: Sequence[str], vocab_size: int, character_coverage: float = 1.0) -> bytes:
    """A unigram SentencePiece model (the serialized proto) trained on `texts`, with Marian's special ids
    (`</s>` 0, `<unk>` 1, no `<s>` or `<pad>`); `vocab_size` is an upper bound on a small corpus.
    `character_coverage`: the share of characters kept as pieces (OPUS-MT: 0.9995 for Chinese or Japanese, whose
    thousands of characters do not all fit a small vocabulary; the rest become `<unk>`)."""
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=character_coverage,
        eos_id=0,
        unk_id=1,
        bos_id=-1,
        pad_id=-1,
        hard_vocab_limit=False,
        num_threads=1,
        minloglevel=2,
    )
    return model.getvalue()


def _pieces(spm_model: bytes) -> list[str]:
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=spm_model)
    return [
        processor.id_to_piece(i)
        for i in range(processor.get_piece_size())
        if processor.id_to_piece(i) not in (EOS, UNK)
    ]


def opus_mt_vocab(pieces: Sequence[str], size: int | None = None) -> dict[str, int]:
    """Marian's vocab.json: `</s>` 0, `<unk>` 1, `pieces` in order (then filler pieces up to `size - 1` entries
    when `size` is given), `<pad>` last."""
    vocab = {EOS: 0, UNK: 1}
    for piece in pieces:
        vocab.setdefault(piece, len(vocab))
    if size is not None:
        if len(vocab) + 1 > size:
            raise ValueError(f"{len(vocab) + 1} entries do not fit a vocabulary of {size}")
        filler = 0
        while len(vocab) < size - 1:
            vocab.setdefault(f"<unused{filler}>", len(vocab))
            filler += 1
    vocab[PAD] = len(vocab)
    return vocab


def build_opus_mt_checkpoint(
    directory,
    sources: Sequence[str],
    targets: Sequence[str],
    source_lang: str,
    target_lang: str,
    separate_vocabs: bool = False,
    spm_vocab_size: int = 200,
    character_coverage: float = 1.0,
    d_model: int = 16,
    layers: int = 1,
    heads: int = 2,
    ffn_dim: int = 32,
    max_position_embeddings: int = 128,
    train_steps: int = 0,
    init_std: float = 0.02,
    seed: int = 0,
) -> Path:
    """Write an OPUS-MT-style checkpoint (module doc) of a tiny stock `MarianMTModel` to `directory`.

    Args:
        sources, targets: raw sentences the two SentencePiece models are trained on (and the model, with
            `train_steps`); pairs when `train_steps` is given.
        separate_vocabs: the `opus-mt-tc-*` form: `vocab.json` + `target_vocab.json`, unshared embeddings.
        spm_vocab_size: each SentencePiece model's size (an upper bound on a small corpus).
        character_coverage: `train_sentencepiece`'s, for both models (a source or target in Chinese: 0.9995).
        train_steps: Adam steps on the pairs (batches of 16), so the model translates something; 0 = random.
        init_std: the random weights' standard deviation (OPUS-MT's config says 0.02; tests take a larger one,
            so that an untrained model's outputs vary with the input).
    Returns the directory.
    """
    import torch
    from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    source_spm, target_spm = (
        train_sentencepiece(texts, spm_vocab_size, character_coverage) for texts in (sources, targets)
    )
    (directory / "source.spm").write_bytes(source_spm)
    (directory / "target.spm").write_bytes(target_spm)
    source_pieces, target_pieces = _pieces(source_spm), _pieces(target_spm)
    if separate_vocabs:  # the converter's assumption: both sides have the size of the larger one
        size = max(len(source_pieces), len(target_pieces)) + 3
        vocab, target_vocab = opus_mt_vocab(source_pieces, size), opus_mt_vocab(target_pieces, size)
        (directory / "target_vocab.json").write_text(json.dumps(target_vocab, ensure_ascii=False, indent=2))
    else:
        vocab = target_vocab = opus_mt_vocab([*source_pieces, *target_pieces])
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=2))
    tokenizer = MarianTokenizer(
        source_spm=str(directory / "source.spm"),
        target_spm=str(directory / "target.spm"),
        vocab=str(directory / "vocab.json"),
        target_vocab_file=str(directory / "target_vocab.json") if separate_vocabs else None,
        source_lang=source_lang,
        target_lang=target_lang,
        separate_vocabs=separate_vocabs,
        model_max_length=512,
    )
    tokenizer.save_pretrained(directory)

    pad = vocab[PAD]
    if target_vocab[PAD] != pad:
        raise AssertionError("source and target <pad> must have one id")
    config = MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(target_vocab),
        share_encoder_decoder_embeddings=not separate_vocabs,
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn_dim,
        decoder_ffn_dim=ffn_dim,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=pad,
        eos_token_id=0,
        bos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        architectures=["MarianMTModel"],
        **{**OPUS_MT_CONFIG, "init_std": init_std},
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    with torch.no_grad():  # Marian's output bias is trained, so never zero in a real checkpoint
        model.final_logits_bias.normal_(0.0, 0.1)
    if train_steps:
        _train(model, tokenizer, sources, targets, train_steps, seed)
    model.generation_config = GenerationConfig(
        bad_words_ids=[[pad]],
        bos_token_id=0,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        max_length=max_position_embeddings,
        pad_token_id=pad,
        **OPUS_MT_GENERATION,
    )
    model.save_pretrained(directory)
    return directory


def _train(model, tokenizer, sources, targets, steps: int, seed: int) -> None:
    """A few Adam steps of teacher-forced cross-entropy on the pairs (the model stays stock)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        rows = torch.randint(len(sources), (16,), generator=generator).tolist()
        batch = tokenizer(
            [sources[r] for r in rows], text_target=[targets[r] for r in rows], padding=True, return_tensors="pt"
        )
        batch["labels"] = batch["labels"].masked_fill(batch["labels"].eq(model.config.pad_token_id), -100)
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    with torch.no_grad():  # Marian's own vocabulary has no <pad>: the converted checkpoint's <pad> row (the decoder
        # start) is zero, which the tied output projection's gradient moved here
        model.get_input_embeddings().weight[model.config.pad_token_id].zero_()
        if not model.config.share_encoder_decoder_embeddings:
            model.get_decoder().embed_tokens.weight[model.config.pad_token_id].zero_()
    model.eval()

"""Resuming from a checkpoint loads it without the stock trainer's false "missing keys" warning (tied weights
and sinusoid tables are not saved, by design), and still warns about keys that are really missing."""

from __future__ import annotations

import contextlib
import logging

import torch
from safetensors.torch import load_file, save_file
from transformers import Seq2SeqTrainingArguments

from xlpe import XLPEMarianConfig, XLPEMarianMTModel
from xlpe.training.trainer import ExtraInputsSeq2SeqTrainer

TINY = dict(
    vocab_size=40,
    pad_token_id=0,
    eos_token_id=1,
    decoder_start_token_id=0,
    d_model=16,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=16,
    decoder_ffn_dim=16,
    max_position_embeddings=32,
)


@contextlib.contextmanager
def transformers_warnings():
    """The warnings transformers logs (its loggers do not propagate to the root logger that caplog reads)."""
    records: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


def trainer_for(model, tmp_path):
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path / "run"), report_to=[], use_cpu=True)
    return ExtraInputsSeq2SeqTrainer(model=model, args=args)


def test_resume_loads_without_missing_keys_warning(tmp_path):
    torch.manual_seed(0)
    saved = XLPEMarianMTModel(XLPEMarianConfig(**TINY))
    saved.save_pretrained(tmp_path / "checkpoint-1")
    model = XLPEMarianMTModel(XLPEMarianConfig(**TINY))
    trainer = trainer_for(model, tmp_path)
    with transformers_warnings() as warnings:
        trainer._load_from_checkpoint(str(tmp_path / "checkpoint-1"))
    assert not [w for w in warnings if "missing keys" in w], warnings
    assert torch.equal(model.lm_head.weight, saved.model.shared.weight)  # loaded, and the tied head follows
    assert model.lm_head.weight.data_ptr() == model.model.shared.weight.data_ptr()


def test_a_really_missing_key_is_still_reported(tmp_path):
    saved = XLPEMarianMTModel(XLPEMarianConfig(**TINY))
    saved.save_pretrained(tmp_path / "checkpoint-1")
    weights = load_file(tmp_path / "checkpoint-1" / "model.safetensors")
    dropped = next(key for key in weights if "fc1" in key)
    save_file(
        {k: v for k, v in weights.items() if k != dropped},
        tmp_path / "checkpoint-1" / "model.safetensors",
        metadata={"format": "pt"},
    )
    trainer = trainer_for(XLPEMarianMTModel(XLPEMarianConfig(**TINY)), tmp_path)
    with transformers_warnings() as warnings:
        trainer._load_from_checkpoint(str(tmp_path / "checkpoint-1"))
    err = "\n".join(warnings)
    assert "missing keys" in err and dropped in err and "lm_head" not in err

"""Training and running the standalone reorderer (xlpe.models.modeling_reorderer) on prepared features.

Data flow: raw pairs -> `xlpe.features.prepare` (tokenizer ids + oracle `reorder_positions`, the same features an
XL PE model trains on) -> `train_reorderer` (transformers' Trainer: progress bar, checkpoints every epoch,
resumable) -> a directory with the reorderer, its tokenizer and `reorderer_training.json`.

Running a trained reorderer lives in `xlpe.features.predicted_reordering` (it makes features).
`jackknife_positions` gives every training example positions predicted by a reorderer that never saw it
(k folds), the remedy for the train/test mismatch of XL PE (oracle positions in training, predicted at test).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..models.configuration_reorderer import XLPEReordererConfig
from ..models.hub_support import apply_umask_to_weights
from ..features.predicted_reordering import collate, predict_token_positions, tokenizer_fingerprint
from ..features.text_files import write_text_atomic
from ..models.modeling_reorderer import XLPEReordererModel

logger = logging.getLogger(__name__)

COLUMNS = ("input_ids", "attention_mask", "reorder_positions")


DEFAULT_TRAINING_LOSS = "btg_crf"  # structured training (BENCHMARKS.md: +0.05 FRS on en->ja over "pairwise", same tau)


def build_reorderer(tokenizer, **config_fields) -> XLPEReordererModel:
    """A fresh reorderer for `tokenizer`'s ids, with its word starts read from the tokenizer; trained as a CRF over
    BTG permutations unless `training_loss` says otherwise (a rank decoder gets the pairwise loss it needs)."""
    if "training_loss" not in config_fields:
        config_fields["training_loss"] = "pairwise" if config_fields.get("decoder") == "rank" else DEFAULT_TRAINING_LOSS
    from ..features.tokenization import word_start_flags

    config = XLPEReordererConfig(
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        tokenizer_fingerprint=tokenizer_fingerprint(tokenizer), **config_fields,
    )  # fmt: skip
    model = XLPEReordererModel(config)
    flags = word_start_flags(tokenizer)
    if flags is None:
        raise ValueError("the tokenizer marks no word boundaries (▁, Ġ or ##): the reorderer needs whole words")
    model.word_starts.set_from(flags + [True] * (config.vocab_size - len(flags)))
    return model


# ----------------------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------------------


@dataclass
class ReordererTraining:
    """Optimisation settings of `train_reorderer` (defaults sized for 50k pairs on 2 CPU cores: BENCHMARKS.md)."""

    epochs: float = 3.0  # passes over the training pairs (2 and 4 epochs: within 0.01 tau on en-ja)
    batch_size: int = 64  # sentences per step
    learning_rate: float = 1e-3  # AdamW peak learning rate (linear warm-up, then linear decay)
    warmup_ratio: float = 0.05  # fraction of steps of warm-up
    weight_decay: float = 0.01  # AdamW weight decay
    seed: int = 1  # initialisation and data order
    logging_steps: int = 100  # log the loss every this many steps
    extra: dict = field(default_factory=dict)  # more transformers.TrainingArguments fields


def _training_columns(dataset):
    return dataset.remove_columns([c for c in dataset.column_names if c not in COLUMNS])


def train_reorderer(model: XLPEReordererModel, train_dataset, output_dir: str | Path, options: ReordererTraining,
                    tokenizer=None, eval_dataset=None, resume: bool = True) -> XLPEReordererModel:  # fmt: skip
    """Train on a prepared dataset (`input_ids`, `reorder_positions`); save model (+ tokenizer) to output_dir.
    `resume`: continue from the newest checkpoint in output_dir when there is one."""
    from transformers import Trainer, TrainingArguments
    from transformers.trainer_utils import get_last_checkpoint

    missing = [c for c in ("input_ids", "reorder_positions") if c not in train_dataset.column_names]
    if missing:
        raise ValueError(f"train_dataset lacks {missing}: prepare it with features=['reorder_positions']")
    output_dir = Path(output_dir)
    args = TrainingArguments(
        output_dir=str(output_dir), num_train_epochs=options.epochs, per_device_train_batch_size=options.batch_size,
        per_device_eval_batch_size=options.batch_size, learning_rate=options.learning_rate,
        warmup_steps=options.warmup_ratio, weight_decay=options.weight_decay, lr_scheduler_type="linear",
        seed=options.seed, logging_steps=options.logging_steps, save_strategy="epoch", save_total_limit=1,
        eval_strategy="epoch" if eval_dataset is not None else "no", report_to=[], remove_unused_columns=False,
        prediction_loss_only=True, dataloader_num_workers=0, use_cpu=not torch.cuda.is_available(), **options.extra,
    )  # fmt: skip
    pad = model.config.pad_token_id
    trainer = Trainer(
        model=model, args=args, train_dataset=_training_columns(train_dataset),
        eval_dataset=_training_columns(eval_dataset) if eval_dataset is not None else None,
        data_collator=lambda features: collate(features, pad),
    )  # fmt: skip
    checkpoint = get_last_checkpoint(str(output_dir)) if resume and output_dir.is_dir() else None
    if checkpoint:
        logger.info("resuming reorderer training from %s", checkpoint)
    result = trainer.train(resume_from_checkpoint=checkpoint)
    model.save_pretrained(output_dir)
    apply_umask_to_weights(output_dir)  # safetensors leaves its file owner-only (0600)
    if tokenizer is not None:
        tokenizer.save_pretrained(output_dir)
    report = {"train_pairs": len(train_dataset), "train_runtime_s": result.metrics.get("train_runtime"),
              "train_loss": result.metrics.get("train_loss"), "options": asdict(options), "resumed_from": checkpoint}  # fmt: skip
    write_text_atomic(output_dir / "reorderer_training.json", json.dumps(report, indent=2) + "\n")
    return model


# ----------------------------------------------------------------------------------------------------------
# Prediction
# ----------------------------------------------------------------------------------------------------------


def jackknife_positions(dataset, tokenizer, folds: int, options: ReordererTraining, work_dir: str | Path,
                        **config_fields) -> list[list[int]]:  # fmt: skip
    """Predicted `reorder_positions` for every example of `dataset`, each from a reorderer trained on the other
    folds (`folds` >= 2). Costs `folds` reorderer trainings; resumable per fold (work_dir/fold-K)."""
    if folds < 2:
        raise ValueError(f"folds must be >= 2, got {folds}")
    assignment = np.random.default_rng(options.seed).permutation(len(dataset)) % folds
    predicted: list[list[int] | None] = [None] * len(dataset)
    for fold in range(folds):
        held_out = np.flatnonzero(assignment == fold)
        model = build_reorderer(tokenizer, **config_fields)
        train_reorderer(model, dataset.select(np.flatnonzero(assignment != fold)), Path(work_dir) / f"fold-{fold}", options)
        positions = predict_token_positions(model, dataset.select(held_out)["input_ids"])
        for index, row in zip(held_out.tolist(), positions):
            predicted[index] = row
    return predicted


__all__ = ["ReordererTraining", "build_reorderer", "jackknife_positions", "train_reorderer"]

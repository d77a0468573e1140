"""Training and running the standalone reorderer (xlpe.models.modeling_reorderer) on prepared features.

Data flow: raw pairs -> `xlpe.features.prepare` (tokenizer ids + oracle `reorder_positions`, the same features an
XL PE model trains on) -> `train_reorderer` (transformers' Trainer: progress bar, checkpoints every epoch,
resumable) -> a directory with the reorderer, its tokenizer and `reorderer_training.json`.

Running a trained reorderer lives in `xlpe.features.predicted_reordering` (it makes features).
`jackknife_positions` gives every training example positions predicted by a reorderer that never saw it
(k folds), the remedy for the train/test mismatch of XL PE (oracle positions in training, predicted at test);
`mix_positions` keeps the oracle for a share of them (the "mixed" remedy). Both measured against the oracle in
docs/benchmarks/reorderer.md ("Training positions"): within noise, so the oracle stays the default.
`calibrate_order_prior` picks the decoding prior for the source order (config `order_prior`) on held-out pairs;
`source_order_comparison` says there whether the reorderer beats keeping the source order (reorderer_training.json,
copied into a model by `copy_training_report`). `default_epochs` and `training_step_seconds` give `xlpe-reorder
train`'s epochs when none are given: as many as fit a time budget at a measured step time.

Reuse (xlpe.features.artefacts, docs/command_line.md "Reruns, resumes and reused artefacts"): a reorderer directory
written by `xlpe-reorder train` carries an ArtefactRecord of kind "reorderer" (the CLI builds it); every jackknife
fold directory one of kind "jackknife-fold" (its fold, the folds, seed, data and tokenizer digests, options),
verified before a fold is resumed. `check_reorderer_dir` refuses by name anything that is not a finished
reorderer (a translation model, a fold, an unfinished run) before it is loaded.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..features.artefacts import (
    RECORD_NAME,
    ArtefactRecord,
    canonical_json,
    lines_digest,
    read_record,
    verify_artefact,
    write_record,
)
from ..features.predicted_reordering import collate, predict_token_positions, tokenizer_fingerprint
from ..features.reordering import SOURCE_ORDER_MARGIN, beats_source_order, kendall_tau_flat
from ..features.text_files import write_text_atomic
from ..models.configuration_reorderer import XLPEReordererConfig
from ..models.hub_support import apply_umask_to_weights
from ..models.modeling_reorderer import XLPEReordererModel, word_keys
from .plan import ReordererPlan
from .sampling import REORDERER_BATCHING, reorderer_batch_sampler

logger = logging.getLogger(__name__)

COLUMNS = ("input_ids", "attention_mask", "reorder_positions")


DEFAULT_TRAINING_LOSS = "btg_crf"  # structured training (docs/benchmarks/reorderer.md: +0.05 FRS on en->ja, same tau)


def default_training_loss(decoder: str | None) -> str:
    """The loss `build_reorderer` trains with when none is given: a rank decoder needs the pairwise one."""
    return "pairwise" if decoder == "rank" else DEFAULT_TRAINING_LOSS


def build_reorderer(tokenizer, seed: int = 0, **config_fields) -> XLPEReordererModel:
    """A fresh reorderer for `tokenizer`'s ids, with its word starts read from the tokenizer; trained as a CRF over
    BTG permutations unless `training_loss` says otherwise (a rank decoder gets the pairwise loss it needs). `seed`
    draws the initial weights under a forked RNG (the caller's random state is left alone): the same seed gives the
    same reorderer whatever ran before it in the process (k jackknife folds in one process, a driver's history)."""
    if "training_loss" not in config_fields:
        config_fields["training_loss"] = default_training_loss(config_fields.get("decoder"))
    from ..features.tokenization import word_start_flags

    config = XLPEReordererConfig(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tokenizer_fingerprint=tokenizer_fingerprint(tokenizer),
        **config_fields,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
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
    """Optimisation settings of `train_reorderer` (defaults sized for 50k pairs on 2 CPU cores:
    docs/benchmarks/reorderer.md)."""

    epochs: float = 3.0  # passes over the training pairs (2 and 4 epochs: within 0.01 tau on en-ja)
    batch_size: int = 64  # sentences per step (on average with batching="word_pairs")
    learning_rate: float = 1e-3  # AdamW peak learning rate (linear warm-up, then linear decay)
    warmup_ratio: float = 0.05  # fraction of steps of warm-up
    weight_decay: float = 0.01  # AdamW weight decay
    seed: int = 1  # initialisation and data order
    logging_steps: int = 100  # log the loss every this many steps
    batching: str = "word_pairs"  # training batches (sampling.REORDERER_BATCHING): "word_pairs" length-grouped
    #   batches of about batch_size x the median sentence's word pairs, fewer sentences the longer they are (default
    #   since 2026-11-28: docs/benchmarks/reorderer.md); "sentences" length-grouped, batch_size each; "random" (before)
    extra: dict = field(default_factory=dict)  # more transformers.TrainingArguments fields


def _training_columns(dataset):
    return dataset.remove_columns([c for c in dataset.column_names if c not in COLUMNS])


def train_reorderer(
    model: XLPEReordererModel,
    train_dataset,
    output_dir: str | Path,
    options: ReordererTraining,
    tokenizer=None,
    eval_dataset=None,
    resume: bool = True,
    calibration_dataset=None,
    report_extra: dict | None = None,
    plan_echo=print,
    callbacks: Sequence | None = None,
) -> XLPEReordererModel:
    """Train on a prepared dataset (`input_ids`, `reorder_positions`); save model (+ tokenizer) to output_dir.
    `resume`: continue from the newest checkpoint in output_dir when there is one. `calibration_dataset`: held-out
    pairs (never trained on) on which the decoding prior `order_prior` is chosen (`calibrate_order_prior`) before
    the model is saved; the choice and every prior's tau go into reorderer_training.json (with `report_extra`),
    written last: its presence marks a finished run. The held-out Kendall tau of the reorderer (at the chosen prior)
    and of the source order go into that report too (`source_order_comparison`). The run's plan and time estimates
    (`ReordererPlan`) go to `plan_echo` (print: stdout). `callbacks`: more `TrainerCallback`s (the CLI's interrupt
    watch, tests)."""
    from transformers import TrainingArguments

    from .checkpoint_averaging import newest_whole_checkpoint

    missing = [c for c in ("input_ids", "reorder_positions") if c not in train_dataset.column_names]
    if missing:
        raise ValueError(f"train_dataset lacks {missing}: prepare it with features=['reorder_positions']")
    if options.batching not in REORDERER_BATCHING:
        raise ValueError(f"batching must be one of {REORDERER_BATCHING}, got {options.batching!r}")
    output_dir = Path(output_dir)
    args = TrainingArguments(
        output_dir=str(output_dir),
        num_train_epochs=options.epochs,
        per_device_train_batch_size=options.batch_size,
        per_device_eval_batch_size=options.batch_size,
        learning_rate=options.learning_rate,
        warmup_steps=options.warmup_ratio,
        weight_decay=options.weight_decay,
        lr_scheduler_type="linear",
        seed=options.seed,
        logging_steps=options.logging_steps,
        save_strategy="epoch",
        save_total_limit=1,
        eval_strategy="epoch" if eval_dataset is not None else "no",
        report_to=[],
        remove_unused_columns=False,
        prediction_loss_only=True,
        dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(),
        **options.extra,
    )
    pad = model.config.pad_token_id
    trainer = reorderer_trainer(
        model,
        args,
        train_dataset=_training_columns(train_dataset),
        eval_dataset=_training_columns(eval_dataset) if eval_dataset is not None else None,
        data_collator=lambda features: collate(features, pad),
        callbacks=list(callbacks or []),
        batching=options.batching,
    )
    newest = newest_whole_checkpoint(output_dir, "reorderer resume") if resume else None
    checkpoint = str(newest) if newest is not None else None
    if checkpoint:
        logger.info("resuming reorderer training from %s", checkpoint)
    calibrating = calibration_dataset is not None and len(calibration_dataset) > 0
    calibration_estimate = calibration_seconds(model, calibration_dataset, options.batch_size) if calibrating else None
    trainer.add_callback(
        ReordererPlan(
            len(train_dataset),
            options.batch_size,
            len(calibration_dataset) if calibrating else 0,
            calibration_estimate,
            echo=plan_echo,
        )
    )
    result = trainer.train(resume_from_checkpoint=checkpoint)
    calibration = None
    if calibrating:
        started = time.perf_counter()
        calibration = calibrate_order_prior(model, calibration_dataset, batch_size=options.batch_size)
        plan_echo(
            f"xlpe-reorder train: the order-prior calibration took {time.perf_counter() - started:.0f} s "
            f"(estimated {calibration_estimate:.0f} s)",
            flush=True,
        )
        logger.info(
            "order prior %s chosen on %d held-out pairs (tau %.3f; best %s at tau %.3f)",
            calibration["chosen"],
            calibration["held_out_pairs"],
            calibration["by_prior"][str(calibration["chosen"])]["kendall_tau"],
            calibration["best"],
            calibration["by_prior"][str(calibration["best"])]["kendall_tau"],
        )
    model.save_pretrained(output_dir)
    apply_umask_to_weights(output_dir)  # safetensors leaves its file owner-only (0600)
    if tokenizer is not None:
        tokenizer.save_pretrained(output_dir)
    report = {
        "train_pairs": len(train_dataset),
        "train_runtime_s": result.metrics.get("train_runtime"),
        "train_loss": result.metrics.get("train_loss"),
        "options": asdict(options),
        "resumed_from": checkpoint,
    }
    if calibration is not None:
        report["order_prior_calibration"] = calibration
    report.update(source_order_comparison(calibration))
    report.update(report_extra or {})
    write_text_atomic(output_dir / REPORT_NAME, json.dumps(report, indent=2) + "\n")
    return model


def calibration_seconds(model: XLPEReordererModel, dataset, batch_size: int, sample: int = 64) -> float:
    """The calibration's estimated wall time: `sentence_taus` timed on (at most) `sample` of the held-out pairs,
    scaled to all of them (its cost is the encoder and the BTG chart of each sentence, whatever the weights)."""
    rows = dataset.select(range(min(sample, len(dataset))))
    started = time.perf_counter()
    sentence_taus(model, rows, batch_size=batch_size)
    return (time.perf_counter() - started) * len(dataset) / max(len(rows), 1)


# ----------------------------------------------------------------------------------------------------------
# Training batches: length-grouped, by a word-pair budget (sampling.reorderer_batch_sampler)
# ----------------------------------------------------------------------------------------------------------


def sentence_word_counts(model: XLPEReordererModel, dataset, chunk: int = 1024) -> np.ndarray:
    """Words of every example of a prepared dataset as `model` counts them (its word starts; EOS, pad and fixed
    tokens are no words): the size of each sentence's pair scores and BTG chart."""
    rows = dataset.select_columns(["input_ids"])
    counts = []
    with torch.no_grad():
        for start in range(0, len(rows), chunk):
            ids = rows[start : start + chunk]["input_ids"]
            batch = collate([{"input_ids": row} for row in ids], model.config.pad_token_id)
            device = model.word_starts.flags.device
            counts.append(model.words(batch["input_ids"].to(device), batch["attention_mask"].to(device))[2].cpu())
    return torch.cat(counts).numpy() if counts else np.zeros(0, dtype=np.int64)


def reorderer_trainer(model: XLPEReordererModel, args, train_dataset, batching: str = "word_pairs", **kwargs):
    """The transformers Trainer of `train_reorderer`, drawing its training batches from
    `sampling.reorderer_batch_sampler` over the sentences' word counts (seeded by `args.data_seed` or `args.seed`;
    the epoch set by the Trainer's loop, so a run resumed at an epoch's checkpoint draws the same batches): the
    hooks `xlpe-train`'s trainer uses (`_get_train_sampler` for an index sampler, `get_train_dataloader` with
    `sampling.batch_sampler_dataloader` for a batch sampler, `callbacks.TokenBatchEpoch`). Why: the BTG chart of a
    batch grows with the cube of its longest sentence, so one long sentence in a random batch set the memory and
    time of the whole step (docs/benchmarks/reorderer.md, "Length-grouped training batches")."""
    from transformers import Trainer

    from .callbacks import TokenBatchEpoch
    from .sampling import TokenBatchSampler, batch_sampler_dataloader

    seed = args.data_seed if args.data_seed is not None else args.seed
    batch = args.per_device_train_batch_size * args.gradient_accumulation_steps
    counts = sentence_word_counts(model, train_dataset) if batching != "random" else None
    sampler = reorderer_batch_sampler(counts, batch, seed, batching) if counts is not None else None

    class ReordererTrainer(Trainer):
        def _get_train_sampler(self, train_dataset=None):
            if sampler is None or isinstance(sampler, TokenBatchSampler):
                return super()._get_train_sampler(train_dataset)
            return sampler  # "sentences": consecutive runs of `batch` indices are one length-grouped batch

        def get_train_dataloader(self):
            if not isinstance(sampler, TokenBatchSampler):
                return super().get_train_dataloader()
            return batch_sampler_dataloader(self, self.train_dataset, self.data_collator, sampler)

    trainer = ReordererTrainer(model=model, args=args, train_dataset=train_dataset, **kwargs)
    trainer.token_sampler = sampler if isinstance(sampler, TokenBatchSampler) else None  # TokenBatchEpoch reads it
    trainer.add_callback(TokenBatchEpoch(trainer))
    return trainer


# ----------------------------------------------------------------------------------------------------------
# Calibration: the decoding prior for the source order, chosen on held-out pairs
# ----------------------------------------------------------------------------------------------------------

ORDER_PRIORS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)  # candidate log-odds in favour of keeping a word pair in source order
CALIBRATION_RULES = ("one_se", "best")  # one_se: the largest prior within one standard error of the best tau


def calibration_split(dataset, wanted: int, seed: int):
    """(training pairs, held-out calibration pairs or None): `wanted` pairs drawn at random (seeded, so a resumed
    run holds out the same ones), at most a tenth of the dataset; None when that is 0."""
    if wanted < 0:
        raise ValueError(f"calibration pairs must be >= 0, got {wanted}")
    held = min(wanted, len(dataset) // 10)
    if held == 0:
        return dataset, None
    order = np.random.default_rng(seed).permutation(len(dataset))
    return dataset.select(np.sort(order[held:])), dataset.select(np.sort(order[:held]))


@torch.no_grad()
def sentence_taus(model: XLPEReordererModel, dataset, priors=ORDER_PRIORS, batch_size: int = 64) -> tuple[dict, int]:
    """({prior: [per-sentence word-level Kendall tau against the oracle]}, sentences) for the sentences of 2+ words
    of a prepared dataset (`input_ids`, `reorder_positions`); the pair scores are computed once per batch and
    decoded with every prior. The key "monotone" holds the source order's own taus (a reference)."""
    model.eval()
    device = next(model.parameters()).device
    taus = {prior: [] for prior in (*priors, "monotone")}
    rows = _training_columns(dataset)
    for start in range(0, len(rows), batch_size):
        batch = collate([rows[i] for i in range(start, min(start + batch_size, len(rows)))], model.config.pad_token_id)
        ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
        out = model(ids, mask)
        movable, word, counts = model.words(ids, mask)
        width = out.pair_logits.shape[1]
        oracle = word_keys(batch["reorder_positions"].to(device), torch.where(movable, word, width), width)
        in_oracle_order = torch.argsort(oracle, dim=1, stable=True)  # slots past the word count (largest keys) last
        valid = torch.arange(width, device=device)[None, :] < counts[:, None]
        lengths = counts.cpu().numpy()
        offsets, keep = np.concatenate([[0], np.cumsum(lengths)]), lengths >= 2
        orders = {prior: model.decode(out.pair_logits, counts, order_prior=prior) for prior in priors}
        orders["monotone"] = torch.arange(width, device=device).expand(len(ids), width)
        for (
            prior,
            predicted,
        ) in orders.items():  # tau of the predicted positions read in oracle order = tau vs the oracle
            read = predicted.gather(1, in_oracle_order)[valid].cpu().numpy()
            taus[prior].extend(kendall_tau_flat(read, offsets)[keep].tolist())
    return taus, len(taus[priors[0]])


def calibrate_order_prior(
    model: XLPEReordererModel, dataset, priors=ORDER_PRIORS, batch_size: int = 64, rule: str = "one_se"
) -> dict:
    """Choose `order_prior` on held-out pairs and set it in `model.config`. Every prior is scored by mean word-level
    Kendall tau against the oracle; "best" takes the highest, "one_se" (default) the largest prior whose tau is
    within one standard error (of the paired per-sentence difference) of the best: when the data cannot tell
    them apart, the decoding closer to the source order, whose mistakes cost a translation model least."""
    if rule not in CALIBRATION_RULES:
        raise ValueError(f"rule must be one of {CALIBRATION_RULES}, got {rule!r}")
    if not priors or any(not np.isfinite(p) or p < 0 for p in priors):
        raise ValueError(f"priors must be finite numbers >= 0, got {priors}")
    taus, sentences = sentence_taus(model, dataset, tuple(priors), batch_size)
    if sentences == 0:
        raise ValueError("the calibration dataset has no sentence of 2 or more words")
    mean = {p: float(np.mean(taus[p])) for p in priors}
    best = max(priors, key=lambda p: (mean[p], -p))  # ties: the smaller prior
    by_prior, within = {}, []
    for prior in priors:
        diff = np.asarray(taus[best]) - np.asarray(taus[prior])
        se = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0
        by_prior[str(prior)] = {"kendall_tau": mean[prior], "tau_standard_error_vs_best": se}
        if mean[best] - mean[prior] <= se:
            within.append(prior)
    chosen = max(within) if rule == "one_se" else best
    model.config.order_prior = float(chosen)
    return {
        "chosen": float(chosen),
        "best": float(best),
        "rule": rule,
        "held_out_pairs": len(dataset),
        "sentences_scored": sentences,
        "by_prior": by_prior,
        "monotone_kendall_tau": float(np.mean(taus["monotone"])),
    }


BEATS_MARGIN = (
    SOURCE_ORDER_MARGIN  # the reorderer "beats" the source order by this much (reordering.beats_source_order)
)


def source_order_comparison(calibration: dict | None) -> dict:
    """The reorderer against keeping the source order on the held-out calibration pairs (`calibrate_order_prior`'s
    result; None: no pair was held out, every value None): `mean_kendall_tau` (the reorderer's, decoded with the
    chosen prior), `monotone_mean_kendall_tau` (the source order's), `held_out_sentences` (sentences of 2+ words
    scored), `beats_margin` and `beats_source_order` (the reorderer's tau exceeds the source order's by at least
    `BEATS_MARGIN`): the keys of reorderer_training.json that say whether predicted positions can help."""
    if calibration is None:
        return {
            "mean_kendall_tau": None,
            "monotone_mean_kendall_tau": None,
            "held_out_sentences": None,
            "beats_margin": BEATS_MARGIN,
            "beats_source_order": None,
        }
    tau = calibration["by_prior"][str(calibration["chosen"])]["kendall_tau"]
    monotone = calibration["monotone_kendall_tau"]
    return {
        "mean_kendall_tau": tau,
        "monotone_mean_kendall_tau": monotone,
        "held_out_sentences": calibration["sentences_scored"],
        "beats_margin": BEATS_MARGIN,
        "beats_source_order": beats_source_order(tau, monotone),
    }


def does_not_beat_line(
    tau: float, monotone: float, pairs: int, what: str = "the reorderer", scored: str = "held-out pairs"
) -> str | None:
    """The plain line said when `what`'s mean Kendall tau does not beat keeping the source order by `BEATS_MARGIN`
    on `pairs` `scored` (held-out pairs at the end of training; the pairs `xlpe-reorder evaluate` scored); None
    when it does."""
    if beats_source_order(tau, monotone):
        return None
    return (
        f"{what} (tau {tau:.3f}) does not beat keeping the source order (tau {monotone:.3f}) on {pairs:,} {scored}: "
        "XL PE's predicted positions will add little for this pair"
    )


# ----------------------------------------------------------------------------------------------------------
# Default epochs: as many as fit a time budget, from timed training steps
# ----------------------------------------------------------------------------------------------------------

EPOCH_BUDGET_SECONDS = 600.0  # the training time the default epochs aim to stay within (10 minutes)
MAX_DEFAULT_EPOCHS = 3  # never more by default (docs/benchmarks/reorderer.md: 2 and 4 epochs within 0.01 tau)


def training_step_seconds(
    model: XLPEReordererModel, dataset, batch_size: int, seed: int, steps: int = 3, batching: str = "word_pairs"
) -> float:
    """Seconds one training step (forward, loss, backward) takes on this machine: the first `steps` + 1 batches of
    the first epoch as training draws them (`batching`, `seed`; "random": `batch_size` pairs drawn at random) from a
    prepared dataset, timed after one warm-up batch, on a copy of `model` under a forked RNG (the run's weights and
    random state are left alone). The optimizer update is not timed (small next to a batch's BTG chart)."""
    import copy

    rows = _training_columns(dataset)
    sampler = reorderer_batch_sampler(sentence_word_counts(model, rows), batch_size, seed, batching)
    draw = np.random.default_rng(seed).permutation(len(rows))
    if sampler is None:
        batches = [draw[k * batch_size : (k + 1) * batch_size] for k in range(steps + 1)]
    else:  # both length-grouped samplers list an epoch's batches in serving order
        batches = sampler.batches()[: steps + 1]
    batches = [batch for batch in batches if len(batch)]
    if len(batches) < 2:  # fewer pairs than two batches: the one batch again, timed warm
        batches = [draw[:batch_size]] * 2
    probe = copy.deepcopy(model).train()
    device = next(probe.parameters()).device
    with torch.random.fork_rng(devices=[]):
        for index, batch in enumerate(batches):
            if index == 1:
                started = time.perf_counter()
            features = collate([rows[int(i)] for i in batch], model.config.pad_token_id)
            probe(**{key: value.to(device) for key, value in features.items()}).loss.backward()
            probe.zero_grad(set_to_none=True)
    return (time.perf_counter() - started) / (len(batches) - 1)


def default_epochs(
    seconds_per_epoch: float, budget: float = EPOCH_BUDGET_SECONDS, most: int = MAX_DEFAULT_EPOCHS
) -> int:
    """The whole epochs that fit in `budget` seconds of training at `seconds_per_epoch`: at least 1, at most `most`."""
    if seconds_per_epoch <= 0:
        return most
    return int(min(most, max(1, budget // seconds_per_epoch)))


def saved_entries(directory: str | Path) -> list[Path]:
    """What a `xlpe-reorder train` run saved in `directory` that training made (and a restart would lose): its
    checkpoints (any non-empty checkpoint-* directory), the trained model (config.json, weights) and the training
    report. The record, the tokenizer and logs are not among them (a restart makes them again)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [path for path in directory.glob("checkpoint-*") if path.is_dir() and any(path.iterdir())]
    for pattern in ("config.json", "model*.safetensors*", REPORT_NAME):
        found += directory.glob(pattern)
    return sorted(set(found))


# ----------------------------------------------------------------------------------------------------------
# Prediction
# ----------------------------------------------------------------------------------------------------------


def jackknife_positions(
    dataset,
    tokenizer,
    folds: int,
    options: ReordererTraining,
    work_dir: str | Path,
    override: str = "--overwrite_output",
    **config_fields,
) -> list[list[int]]:
    """Predicted `reorder_positions` for every example of `dataset`, each from a reorderer trained on the other
    folds (`folds` >= 2); fold K's reorderer starts from seed `options.seed + K`, so a rerun gives the same positions.
    Costs `folds` reorderer trainings; resumable per fold (work_dir/fold-K). Each fold directory records what made
    it (`fold_record`); one made otherwise (other folds, seed, data, tokenizer or options: its checkpoints were
    trained on examples now held out) is an ArtefactMismatch naming `override`, before any training."""
    if folds < 2:
        raise ValueError(f"folds must be >= 2, got {folds}")
    config_fields.setdefault("training_loss", default_training_loss(config_fields.get("decoder")))
    records = fold_records(dataset, tokenizer, folds, options, config_fields)
    for fold, record in enumerate(records):  # all checked before the first one trains
        fold_dir = Path(work_dir) / f"fold-{fold}"
        if fold_dir.is_dir() and any(fold_dir.iterdir()):
            verify_artefact(fold_dir, record, override=override, what=f"jackknife fold {fold} ({fold_dir})")
    assignment = np.random.default_rng(options.seed).permutation(len(dataset)) % folds
    predicted: list[list[int] | None] = [None] * len(dataset)
    for fold in range(folds):
        held_out = np.flatnonzero(assignment == fold)
        model = build_reorderer(tokenizer, seed=options.seed + fold, **config_fields)
        write_record(Path(work_dir) / f"fold-{fold}", records[fold])
        train_reorderer(
            model, dataset.select(np.flatnonzero(assignment != fold)), Path(work_dir) / f"fold-{fold}", options
        )
        positions = predict_token_positions(model, dataset.select(held_out)["input_ids"])
        for index, row in zip(held_out.tolist(), positions):
            predicted[index] = row
    return predicted


def fold_records(
    dataset, tokenizer, folds: int, options: ReordererTraining, config_fields: dict
) -> list[ArtefactRecord]:
    """The record of each jackknife fold directory: the training data and tokenizer (digests), the fold, the
    number of folds and every option that shapes the fold's reorderer (seed included: it draws the folds)."""
    from ..features.tokenization import tokenizer_fingerprint as segmentation_fingerprint

    inputs = {"train": dataset_digest(dataset), "tokenizer": segmentation_fingerprint(tokenizer)}
    training = {name: value for name, value in asdict(options).items() if name != "logging_steps"}  # (shapes nothing)
    shared = {**training, **config_fields, "folds": folds}  # (no config field is named as a training one)
    return [ArtefactRecord(FOLD_KIND, inputs=inputs, options={**shared, "fold": fold}) for fold in range(folds)]


def mix_positions(
    predicted: Sequence[Sequence[int]], oracle: Sequence[Sequence[int]], oracle_share: float, seed: int
) -> list[list[int]]:
    """Per example, the oracle positions with probability `oracle_share` (examples drawn with `seed`), else the
    predicted ones: the "mixed" remedy for the train/test mismatch (0: all predicted, 1: all oracle)."""
    if not 0.0 <= oracle_share <= 1.0:
        raise ValueError(f"oracle_share must be in [0, 1], got {oracle_share}")
    if len(predicted) != len(oracle):
        raise ValueError(f"{len(predicted)} predicted position lists but {len(oracle)} oracle ones")
    use_predicted = np.random.default_rng(seed).random(len(oracle)) < 1.0 - oracle_share
    return [list(p) if use else list(o) for p, o, use in zip(predicted, oracle, use_predicted.tolist())]


def with_predicted_positions(split, predicted: Sequence[Sequence[int]]):
    """`split` (a prepared Dataset) training on `predicted` positions: they become `reorder_positions` and the oracle
    ones stay beside them as `oracle_reorder_positions` (what `xlpe-reorder jackknife` writes)."""
    return split.rename_column("reorder_positions", "oracle_reorder_positions").add_column(
        "reorder_positions", list(predicted)
    )


# ----------------------------------------------------------------------------------------------------------
# Records and checks of reorderer directories (xlpe.features.artefacts)
# ----------------------------------------------------------------------------------------------------------

REORDERER_KIND, JACKKNIFE_KIND, FOLD_KIND = "reorderer", "jackknife", "jackknife-fold"
REPORT_NAME = "reorderer_training.json"  # written last by train_reorderer: a finished run
# what `xlpe-reorder train` writes into its --output_dir: all that --overwrite_output / --no-resume remove there
OWNED_PATTERNS = (
    RECORD_NAME,
    REPORT_NAME,
    "checkpoint-*",
    "config.json",
    "generation_config.json",
    "model*.safetensors*",
    "tokenizer*",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "vocab.*",
    "merges.txt",
    "spiece.model",
    "training_args.bin",
)


ATTACHED_REPORT = Path("reorderer") / REPORT_NAME  # in a model directory: the attached reorderer's training report


def copy_training_report(reorderer_dir: str | Path, model_dir: str | Path) -> Path | None:
    """Copy the training report of the reorderer in `reorderer_dir` into `model_dir`/reorderer/ (ATTACHED_REPORT,
    written atomically, replacing an earlier one): the model directory that carries the reorderer's weights also
    says how it was trained and whether it beats the source order (`source_order_comparison`'s keys). Returns the
    path written, or None when the reorderer has no report (one of an older version)."""
    source = Path(reorderer_dir) / REPORT_NAME
    if not source.is_file():
        return None
    target = Path(model_dir) / ATTACHED_REPORT
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(target, source.read_text(encoding="utf-8"))
    return target


def dataset_digest(dataset, columns: Sequence[str] = ("input_ids", "reorder_positions")) -> str:
    """Digest of a prepared dataset's rows (the given columns, in order): one canonical JSON line per row."""
    rows = dataset.select_columns(list(columns))
    return lines_digest(
        canonical_json([row[c] for c in columns])
        for batch in rows.iter(batch_size=1024)
        for row in (dict(zip(batch, values)) for values in zip(*batch.values()))
    )


def model_type_of(directory: str | Path) -> str | None:
    """`model_type` of `directory`/config.json; None without one; ValueError naming the file when unreadable."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not a readable model config ({error})") from None
    return str(config.get("model_type")) if isinstance(config, dict) else None


def owned_entries(directory: str | Path) -> list[Path]:
    """The entries of `directory` that `xlpe-reorder train` writes (OWNED_PATTERNS); nothing else."""
    directory = Path(directory)
    return sorted({path for pattern in OWNED_PATTERNS for path in directory.glob(pattern)})


def clear_owned(directory: str | Path) -> None:
    """Remove what `xlpe-reorder train` wrote in `directory`, the record first (a run killed meanwhile leaves a
    directory that is refused, not one that passes for finished); other files stay."""
    import shutil

    directory = Path(directory)
    (directory / RECORD_NAME).unlink(missing_ok=True)
    for path in owned_entries(directory):
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink(missing_ok=True)


def check_reorderer_dir(path: str | Path, flag: str = "--reorderer") -> None:
    """Refuse (ValueError or FileNotFoundError, one line naming `flag`) anything but a finished reorderer written
    by `xlpe-reorder train`: a missing directory, a translation model or other model_type, a jackknife fold or
    other artefact (by its record's kind), an unfinished run, a config without the tokenizer fingerprint that
    ties the reorderer to its token ids. A reorderer of an older version (no record) passes on its config."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{flag} {path}: no such directory")
    record = read_record(path)
    if record is not None and record.kind != REORDERER_KIND:
        raise ValueError(f"{flag} {path}: holds a {record.kind}, not a reorderer written by `xlpe-reorder train`")
    model_type = model_type_of(path)
    if record is not None and (model_type is None or not (path / REPORT_NAME).is_file()):
        raise ValueError(f"{flag} {path}: an unfinished `xlpe-reorder train` run; rerun it to finish it")
    if model_type is None:
        raise FileNotFoundError(f"{flag} {path}: no reorderer there (config.json missing)")
    if model_type != XLPEReordererConfig.model_type:
        raise ValueError(
            f"{flag} {path}: holds a {model_type} model, not a reorderer written by `xlpe-reorder "
            f"train` (model_type {XLPEReordererConfig.model_type})"
        )
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    if not config.get("tokenizer_fingerprint"):
        raise ValueError(
            f"{flag} {path}: its config.json records no tokenizer_fingerprint, so its token ids "
            "cannot be checked; retrain it with `xlpe-reorder train`"
        )


__all__ = [
    "ATTACHED_REPORT",
    "CALIBRATION_RULES",
    "FOLD_KIND",
    "JACKKNIFE_KIND",
    "BEATS_MARGIN",
    "EPOCH_BUDGET_SECONDS",
    "MAX_DEFAULT_EPOCHS",
    "ORDER_PRIORS",
    "OWNED_PATTERNS",
    "REORDERER_KIND",
    "REPORT_NAME",
    "ReordererTraining",
    "build_reorderer",
    "calibrate_order_prior",
    "calibration_split",
    "check_reorderer_dir",
    "clear_owned",
    "copy_training_report",
    "dataset_digest",
    "default_epochs",
    "default_training_loss",
    "does_not_beat_line",
    "fold_records",
    "jackknife_positions",
    "mix_positions",
    "model_type_of",
    "owned_entries",
    "reorderer_trainer",
    "saved_entries",
    "sentence_word_counts",
    "sentence_taus",
    "source_order_comparison",
    "train_reorderer",
    "training_step_seconds",
    "with_predicted_positions",
]

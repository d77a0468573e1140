"""The `xlpe-train` run, top to bottom: arguments -> data -> tokenizer -> model -> features -> Trainer ->
train / evaluate / predict -> model card. Same argument names as transformers'
`examples/pytorch/translation/run_translation.py`, plus:

* `--model_type vanilla|xlpe|dpe|mvpe_pos|...` (any registered family) and the family's fields;
* data from a Hub dataset, a local `datasets` directory, jsonlines `{"translation": {...}}` files, plain
  parallel text files (`--train_source_file/--train_target_file`), an `xlpe-prepare` output directory, or the
  built-in synthetic SVO -> SOV corpus (no data arguments at all); features come from `xlpe.features`
  (alignments with eflomal unless Pharaoh files / gold alignments are given);
* a joint sub-word tokenizer trained on the training text when none is given;
* separate logging of the auxiliary losses, BLEU/chrF (sacrebleu) with predicted and oracle reorderings,
  checkpoint averaging, and a model card;
* recipes (`--recipe small|base|big`, `recipes.py`): for a model trained from scratch without one, the recipe
  that fits the training-set size and the device is chosen once the data is read (logged, `recipe.json`);
* on CUDA, fast switches unless given (`recipes.cuda_fast_defaults`: bf16, fused AdamW, torch.compile, token
  batches; printed, `cuda_defaults.json`), and the throughput (target tokens/s, MFU) in the logs;
* token-based batches (`--max_tokens`), early stopping (`--early_stopping_patience`), and the padding the
  training batches carried (`padding_waste` in the logs, `train_padding_waste` in train_results.json).

Where each step lives: arguments `arguments.py`, raw splits and features `data.py`, tokenizer and model
`model_setup.py`, the Trainer `trainer.py`, the console script `xlpe.cli.train`. See docs/training.md.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from pathlib import Path

import datasets
import transformers
from transformers import AutoConfig, set_seed

from ..features.artefacts import record_path
from ..features.text_files import write_text_atomic
from ..models.hub_support import apply_umask_to_weights
from .arguments import parse_arguments
from .callbacks import RunClock, RunOutcome, ValidationEarlyStopping
from .checkpoint_averaging import (
    last_checkpoints,
    list_checkpoints,
    newest_whole_checkpoint,
    save_averaged_model,
)
from .collator import ExtraInputsDataCollator
from .data import check_splits, load_raw_splits, prepare_features, resolve_taggers
from .errors import UsageError
from .host_memory import keep_freed_host_memory
from .learning_check import LEARNING_CHECK_FILE, LearningCheck
from .model_setup import (
    apply_generation_options,
    attach_reorderer,
    build_model,
    check_init_options,
    check_stock_start,
    check_vocabulary,
    load_or_train_tokenizer,
    model_features,
    parse_config_overrides,
    set_word_starts,
    target_config,
)
from .plan import RunPlan
from .recipes import NO_RECIPE, SMALL_SENTENCE_PASSES, choose_recipe, describe_fast_defaults, small_epochs
from .reuse import (
    ApplyResumedFrequencies,
    check_checkpoint,
    check_config_file,
    held_results,
    locked_output_dir,
    run_record,
    verify_resume,
    write_run_record,
)
from .run_card import describe_optimizer, write_test_translations
from .trainer import ExtraInputsSeq2SeqTrainer, decode_ids, make_compute_metrics

logger = logging.getLogger("xlpe.train")


# ---------------------------------------------------------------------------------------------------------
# Output directory and checkpoints
# ---------------------------------------------------------------------------------------------------------


def resolve_checkpoint(training_args) -> str | None:
    """The checkpoint to resume from (`--resume_from_checkpoint DIR|last`), checked whole (`reuse.check_checkpoint`),
    or None (`last`: the newest checkpoint with a whole trainer state, naming the newer ones it skips). Refuses to
    mix a new training run into an output_dir that holds another run's results (checkpoints, a model, train
    results) unless --overwrite_output_dir (which deletes the checkpoints and the old record)."""
    output_dir = Path(training_args.output_dir)
    existing = list_checkpoints(output_dir) if output_dir.is_dir() else []
    resume = training_args.resume_from_checkpoint
    if resume in ("last", "latest", "true", "True"):
        newest = newest_whole_checkpoint(output_dir, f"--resume_from_checkpoint {resume}")
        if newest is None:
            if existing and (existing[-1] / "trainer_state.json").is_file():
                check_checkpoint(str(existing[-1]), training_args)  # names the damaged state (file and line)
            raise UsageError(f"--resume_from_checkpoint {resume}: {output_dir} has no complete checkpoint-* directory")
        check_checkpoint(str(newest), training_args)
        return str(newest)
    if resume:
        if not (Path(resume) / "trainer_state.json").is_file():
            raise UsageError(f"--resume_from_checkpoint {resume} is not a checkpoint directory (no trainer_state.json)")
        check_checkpoint(resume, training_args)
        return resume
    held = held_results(output_dir) if training_args.do_train else []
    if held and not training_args.overwrite_output_dir:
        if existing:
            raise UsageError(
                f"--output_dir {output_dir} already holds checkpoints {[p.name for p in existing]}: pass "
                "--resume_from_checkpoint last to continue that run, or --overwrite_output_dir to start over"
            )
        raise UsageError(
            f"--output_dir {output_dir} already holds a finished run ({', '.join(held)}): pass "
            "--overwrite_output_dir to replace it, or choose another --output_dir"
        )
    if held and training_args.process_index == 0:
        for path in existing:
            shutil.rmtree(path)
        record_path(output_dir).unlink(missing_ok=True)
    return None


# ---------------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------------


def setup_logging(training_args) -> None:
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    level = training_args.get_process_log_level()
    logger.setLevel(level)
    logging.getLogger("xlpe").setLevel(level)
    datasets.utils.logging.set_verbosity(level)
    transformers.utils.logging.set_verbosity(level)


def position_limit_source(model_args, checkpoint) -> str:
    """Where the model's `max_position_embeddings` came from, for a message."""
    if "max_position_embeddings" in parse_config_overrides(model_args.config_overrides):
        return "--config_overrides"
    source = checkpoint or model_args.config_name or model_args.model_name_or_path
    return f"{Path(source) / 'config.json' if Path(source).is_dir() else source}" if source else "built here"


def check_length_flags_fit(model, model_args, data_args, checkpoint) -> None:
    """UsageError, before any data is prepared, when an explicit --max_source_length or --max_target_length exceeds
    the model's position limit: the first longer batch would fail after training started (a traceback in the
    model's input check). A default above the limit is lowered to it (pairs longer than the model can take are
    skipped and counted, as any pair over those lengths). A --prepared_dataset is not cut to those flags: its
    longest rows are checked (`check_prepared_fit`)."""
    limit = getattr(model.config, "max_position_embeddings", None)
    if not limit or data_args.prepared_dataset:
        return
    explicit = getattr(data_args, "explicit_lengths", {"max_source_length", "max_target_length"})
    for name in ("max_source_length", "max_target_length"):
        if name not in explicit and getattr(data_args, name) > limit:
            logger.info("--%s %d (default) lowered to the model's limit %d", name, getattr(data_args, name), limit)
            setattr(data_args, name, limit)
    over = [
        f"--{name} {getattr(data_args, name)}"
        for name in ("max_source_length", "max_target_length")
        if getattr(data_args, name) > limit
    ]
    if over:
        raise UsageError(
            f"{' and '.join(over)} exceed{'s' if len(over) == 1 else ''} the model's max_position_embeddings {limit} "
            f"({position_limit_source(model_args, checkpoint)}): lower {'them' if len(over) > 1 else 'it'} to at "
            f"most {limit} or raise max_position_embeddings"
        )


def check_prepared_fit(prepared: dict, model, model_args, checkpoint) -> None:
    """UsageError, before training, when a prepared split's longest source or target exceeds the model's position
    limit (read off the Arrow column lengths: no Python pass over the rows; a split seen through an index mapping,
    e.g. --max_train_samples, is skipped rather than copied)."""
    import pyarrow.compute as pc

    limit = getattr(model.config, "max_position_embeddings", None)
    if not limit:
        return
    for split, dataset in prepared.items():
        if getattr(dataset, "_indices", None) is not None or not len(dataset):
            continue
        for column, flag in (("input_ids", "--max_source_length"), ("labels", "--max_target_length")):
            if column not in dataset.column_names:
                continue
            longest = pc.max(pc.list_value_length(dataset.data.column(column))).as_py() or 0
            if longest > limit:
                raise UsageError(
                    f"the {split} split's longest {'source' if column == 'input_ids' else 'target'} has {longest} "
                    f"tokens, over the model's max_position_embeddings {limit} "
                    f"({position_limit_source(model_args, checkpoint)}): prepare it with a lower {flag} or raise "
                    "max_position_embeddings"
                )


def load_tokenizer_or_usage_error(model_args, data_args, training_args, splits, checkpoint):
    """`load_or_train_tokenizer`, with a model folder that has no (readable) tokenizer files as a UsageError (a
    damaged JSON file of it named with its line)."""
    from ..features.tokenization import check_tokenizer_files

    source = checkpoint or model_args.tokenizer_name or model_args.model_name_or_path
    if source:
        flag = (
            "--resume_from_checkpoint"
            if checkpoint
            else "--tokenizer_name"
            if model_args.tokenizer_name
            else "--model_name_or_path"
        )
        try:
            check_tokenizer_files(source, f"{flag} {source}")
        except ValueError as error:
            raise UsageError(str(error)) from None
    try:
        return load_or_train_tokenizer(model_args, data_args, training_args, splits, checkpoint)
    except (OSError, TypeError, ValueError) as error:
        source = checkpoint or model_args.tokenizer_name or model_args.model_name_or_path
        if not source:
            raise
        raise UsageError(
            f"no tokenizer could be loaded from {source} "
            f"({type(error).__name__}: {str(error).strip().splitlines()[0]}); "
            "save the model's tokenizer there or give --tokenizer_name"
        ) from error


def main(argv: list[str] | None = None, callbacks: list | None = None) -> dict:
    """Run `xlpe-train`; returns all metrics. `callbacks`: extra `TrainerCallback`s (tests, notebooks)."""
    started = time.time()
    model_args, data_args, training_args = parse_arguments(argv)
    setup_logging(training_args)
    with locked_output_dir(training_args, f"xlpe-train --output_dir {training_args.output_dir}"):  # the whole run
        return _main(argv, callbacks, started, model_args, data_args, training_args)


def _main(argv, callbacks, started, model_args, data_args, training_args) -> dict:
    logger.info("model: %s | data: %s", model_args, data_args)
    set_seed(training_args.seed)
    checkpoint = resolve_checkpoint(training_args)
    check_init_options(model_args, checkpoint)
    for flag in ("model_name_or_path", "config_name"):  # a hand-edited config.json: file and line, not a traceback
        if getattr(model_args, flag) and Path(getattr(model_args, flag)).is_dir():
            check_config_file(getattr(model_args, flag), f"--{flag} {getattr(model_args, flag)}")
    Path(training_args.output_dir).mkdir(parents=True, exist_ok=True)

    splits = load_raw_splits(data_args, model_args)
    model_args, data_args, training_args = apply_recipe(
        argv, (model_args, data_args, training_args), splits, checkpoint
    )
    if training_args.do_train:  # what made this run, kept beside it; a resume must match it (reuse.py)
        record = (
            verify_resume(model_args, data_args, training_args, checkpoint)
            if checkpoint
            else run_record(model_args, data_args, training_args)
        )
        write_run_record(training_args, record)
        if not checkpoint and training_args.process_index == 0:  # a run started over: no earlier run's verdict
            (Path(training_args.output_dir) / LEARNING_CHECK_FILE).unlink(missing_ok=True)
    report_cuda_defaults(training_args)
    if training_args.device.type == "cpu":  # no page faults on the step's large tensors (host_memory.py)
        logger.info(keep_freed_host_memory())
    if training_args.torch_compile:
        # nn.TransformerEncoderLayer's inference fast path (the XL PE reorder predictor, in the evaluation loss)
        # ignores autocast under torch.compile and fails on mixed dtypes (torch bug): use the regular path
        import torch

        torch.backends.mha.set_fastpath_enabled(False)
    check_splits(
        splits, data_args, training_args, bool(model_args.tokenizer_name or model_args.model_name_or_path or checkpoint)
    )
    tokenizer = load_tokenizer_or_usage_error(model_args, data_args, training_args, splits, checkpoint)
    check_stock_start(model_args, checkpoint)  # e.g. mvPE+POS from a Marian checkpoint, before the taggers load
    try:  # an unknown tagger name, a tagger whose data is missing: one line, not a traceback
        taggers = resolve_taggers(
            data_args, target_config(model_args, checkpoint), parse_config_overrides(model_args.config_overrides)
        )
    except ValueError as error:
        raise UsageError(f"POS tagger: {(str(error).strip().splitlines() or [type(error).__name__])[0]}") from error
    try:
        model = build_model(model_args, data_args, tokenizer, checkpoint, taggers)
    except UsageError:
        raise
    except (ValueError, TypeError, OSError) as error:  # a config field out of range (config_checks.py), of a wrong
        source = checkpoint or model_args.model_name_or_path or model_args.config_name  # type, another family
        where = f" ({Path(source) / 'config.json'})" if source and Path(source).is_dir() else ""
        raise UsageError(f"model{where}: {(str(error).strip().splitlines() or [type(error).__name__])[0]}") from error
    check_vocabulary(
        tokenizer, model, checkpoint or model_args.tokenizer_name or model_args.model_name_or_path or "trained here"
    )
    from ..evaluation.model_loading import record_tokenizer_fingerprint  # (config.json: xlpe-translate checks it)

    record_tokenizer_fingerprint(model.config, tokenizer)
    set_word_starts(model, tokenizer)
    if model_args.reorderer:
        attach_reorderer(model, model_args.reorderer, tokenizer)
    apply_generation_options(model, tokenizer, model_args, data_args)
    check_length_flags_fit(model, model_args, data_args, checkpoint)  # before preparing: not after training started
    if data_args.num_beams is not None:
        model.generation_config.num_beams = data_args.num_beams
    features = model_features(model)
    stages = {"train": training_args.do_train, "validation": training_args.do_eval, "test": training_args.do_predict}
    splits = {name: split for name, split in splits.items() if stages[name]}  # prepare only what is used
    prepared, reports = prepare_features(
        splits, tokenizer, features, taggers, data_args, model_args, training_args, model
    )
    check_prepared_fit(prepared, model, model_args, checkpoint)
    if training_args.process_index == 0:
        write_text_atomic(
            Path(training_args.output_dir) / "preparation_report.json", json.dumps(reports, indent=2, default=str)
        )

    trainer_ref: list = []
    clock = RunClock(checkpoint)
    stopper = (
        ValidationEarlyStopping(training_args.early_stopping_patience)
        if training_args.early_stopping_patience and training_args.do_train
        else None
    )
    plan = run_plan(prepared, model, data_args, training_args) if training_args.do_train else None
    trainer = ExtraInputsSeq2SeqTrainer(
        model=model,
        args=training_args,
        processing_class=tokenizer,
        train_dataset=prepared.get("train") if training_args.do_train else None,
        eval_dataset=periodic_eval_dataset(prepared, training_args) if training_args.do_eval else None,
        data_collator=make_collator(tokenizer, model, data_args, training_args),
        compute_metrics=make_compute_metrics(tokenizer, trainer_ref, data_args.target_lang, data_args.bleu_tokenize)
        if training_args.predict_with_generate
        else None,
        eval_with_oracle_positions=training_args.eval_with_oracle_positions,
        callbacks=[
            *(callbacks or []),
            *([ApplyResumedFrequencies()] if checkpoint else []),
            *([stopper] if stopper else []),
            RunOutcome(stopper),
            clock,
            *([plan] if plan is not None else []),
            *(
                [LearningCheck(len(prepared["train"]), from_scratch=model_args.model_name_or_path is None)]
                if training_args.do_train and training_args.do_eval
                else []
            ),
        ],
    )
    trainer_ref.append(trainer)
    if plan is not None and training_args.predict_with_generate:  # its first estimate times one greedy decode
        probe_set = trainer.eval_dataset if trainer.eval_dataset is not None else prepared.get("test")
        plan.decode_probe = lambda: trainer.time_greedy_decoding(probe_set)
    for callback in trainer.callback_handler.callbacks:  # tensorboard: output_dir/runs also for evaluation-only runs
        if type(callback).__name__ == "TensorBoardCallback" and getattr(callback, "logging_dir", None) is None:
            from transformers.integrations.integration_utils import default_logdir

            callback.logging_dir = str(Path(training_args.output_dir) / default_logdir())
    all_metrics: dict = {}
    facts: dict = {"device": describe_device_for_card(training_args)}  # what the run did, for the model card
    if training_args.do_train:
        result = trainer.train(resume_from_checkpoint=checkpoint)
        seconds, segments = clock.total()
        facts.update(
            optimizer=describe_optimizer(trainer.optimizer),
            global_step=trainer.state.global_step,
            epoch=trainer.state.epoch,
            training_seconds=None if clock.unknown_before else seconds,
            segments=segments,
        )
        trainer.save_model()
        apply_umask_to_weights(training_args.output_dir)  # stock (vanilla) models too: safetensors writes 0600
        if model_args.reorderer and trainer.is_world_process_zero():  # how the reorderer was trained, for the card
            from .reorderer import copy_training_report

            copy_training_report(model_args.reorderer, training_args.output_dir)
        metrics = {
            **result.metrics,
            **trainer.padding_metrics(result.metrics.get("train_runtime")),
            "train_samples": len(prepared["train"]),
        }
        logger.info(
            "padding: %.1f%% of the trained tokens (%s batches)",
            100 * metrics["train_padding_waste"],
            f"--max_tokens {training_args.max_tokens}" if training_args.max_tokens else "sentence",
        )
        trainer.log_metrics("train", metrics), trainer.save_metrics("train", metrics), trainer.save_state()
        all_metrics.update(metrics)
        if training_args.average_last_checkpoints:
            average_into(trainer, training_args)
    generation = dict(
        max_length=training_args.generation_max_length,  # None: the length rule (trainer.py)
        num_beams=data_args.num_beams,
    )
    pending = [stage for stage in ("validation", "test") if stages[stage] and stage in prepared]  # card before each
    card = (training_args.output_dir, model_args, data_args, training_args, all_metrics, facts)
    if trainer.is_world_process_zero():
        write_card(*card, pending=pending)
    if training_args.do_eval and "validation" in prepared:
        metrics = {
            **trainer.evaluate(prepared["validation"], metric_key_prefix="eval", **generation),
            "eval_samples": len(prepared["validation"]),
        }  # (the whole split, not the periodic subset)
        trainer.log_metrics("eval", metrics), trainer.save_metrics("eval", metrics)
        all_metrics.update(metrics)
        pending.remove("validation")
        if pending and trainer.is_world_process_zero():
            write_card(*card, pending=pending)
    if training_args.do_predict and "test" in prepared:
        all_metrics.update(predict_and_report(trainer, prepared["test"], tokenizer, data_args, generation))
    if trainer.is_world_process_zero():
        write_card(training_args.output_dir, model_args, data_args, training_args, all_metrics, facts)
        print(f"xlpe-train: done in {time.time() - started:.0f} s; model and tokenizer in {training_args.output_dir}")
    return all_metrics


def periodic_eval_dataset(prepared: dict, training_args):
    """The validation sentences the periodic evaluations score: the first `--eval_subset` of the split (all
    without it); the final evaluation scores the whole split."""
    validation, subset = prepared.get("validation"), getattr(training_args, "eval_subset", None)
    if validation is None or not subset or subset >= len(validation):
        return validation
    return validation.select(range(subset))


def run_plan(prepared: dict, model, data_args, training_args) -> RunPlan:
    """The `RunPlan` callback with this run's sizes: periodic and final validation sentences, test sentences (twice
    for an XL PE model whose test split has oracle positions: predicted and oracle), batching and beams."""
    validation, test = prepared.get("validation"), prepared.get("test")
    periodic = periodic_eval_dataset(prepared, training_args) if training_args.do_eval else None
    tests, passes = 0, 1
    if training_args.do_predict and test is not None:
        tests = min(len(test), data_args.max_predict_samples or len(test))
        if "reorder_positions" in test.column_names and getattr(model.config, "uses_xl", False):
            passes = 2
    accumulation = training_args.gradient_accumulation_steps
    batching = (
        f"token batches of {training_args.max_tokens:,} tokens"
        if training_args.max_tokens
        else f"{training_args.per_device_train_batch_size} pairs a batch"
    ) + (f" x {accumulation} accumulated" if accumulation > 1 else "")
    beams = data_args.num_beams or getattr(model.generation_config, "num_beams", 1) or 1
    return RunPlan(
        eval_sentences=len(periodic) if periodic is not None and training_args.eval_strategy == "steps" else 0,
        validation_total=len(validation) if validation is not None else 0,
        final_sentences=len(validation) if training_args.do_eval and validation is not None else 0,
        test_sentences=tests,
        test_passes=passes,
        batching=batching,
        final_beams=beams,
    )


def make_collator(tokenizer, model, data_args, training_args) -> ExtraInputsDataCollator:
    """Batches padded to the longest example (default) or to a fixed length (`--pad_to_max_length`); label
    padding is -100 (left out of the loss) unless `--ignore_pad_token_for_loss false`."""
    fixed = data_args.pad_to_max_length
    return ExtraInputsDataCollator(
        tokenizer,
        model=model,
        padding="max_length" if fixed else True,
        max_length=max(data_args.max_source_length, data_args.max_target_length) if fixed else None,
        label_pad_token_id=-100 if data_args.ignore_pad_token_for_loss else tokenizer.pad_token_id,
        pad_to_multiple_of=8 if (training_args.fp16 or training_args.bf16) and not fixed else None,
    )


def average_into(trainer, training_args) -> None:
    """Replace the trained weights by the average of the last N checkpoints (saved to output_dir too); fewer
    when early stopping ended the run before N were saved."""
    count, saved = training_args.average_last_checkpoints, len(list_checkpoints(training_args.output_dir))
    if 0 < saved < count and training_args.early_stopping_patience:
        logger.warning(
            "averaging the last %d checkpoints, not %d: training stopped early after %d", saved, count, saved
        )
        count = saved
    checkpoints = last_checkpoints(training_args.output_dir, count)
    if trainer.is_world_process_zero():
        save_averaged_model(checkpoints, training_args.output_dir)
    trainer.accelerator.wait_for_everyone()
    from .checkpoint_averaging import average_checkpoints

    _, unexpected = trainer.model.load_state_dict(average_checkpoints(checkpoints), strict=False)  # tied: missing
    if unexpected:
        raise ValueError(f"averaged checkpoints have tensors the model lacks: {unexpected[:5]}")
    logger.info("averaged %s into the final model", [c.name for c in checkpoints])


def apply_recipe(argv, parsed: tuple, splits: dict, checkpoint: str | None) -> tuple:
    """The arguments with the recipe in force: `--recipe`, or for a model trained from scratch (not on the
    built-in corpus) the one `choose_recipe` picks for the training-set size and the device, or, when
    resuming, the one the run started with (`recipe.json`). A recipe without a validation split drops its
    periodic evaluation and early stopping. Logs the choice and why; writes `recipe.json`."""
    model_args, data_args, training_args = parsed
    name, reason = training_args.recipe, "--recipe"
    recorded = Path(training_args.output_dir) / "recipe.json"
    from_scratch = model_args.model_name_or_path is None and model_args.config_name is None
    pairs = None  # training pairs, read when a choice or the recipe's size needs them
    if name is None and from_scratch and training_args.do_train and not data_args.uses_builtin_corpus():
        if checkpoint and recorded.is_file():
            name, reason = json.loads(recorded.read_text())["recipe"], f"the recipe of the run resumed ({recorded})"
        else:
            pairs = _training_pairs(splits, data_args)
            name, reason = choose_recipe(pairs, training_args.device.type == "cuda")
    if name is None or name == NO_RECIPE:
        return parsed
    if pairs is None and name == "small" and training_args.do_train:
        pairs = _training_pairs(splits, data_args)
    with_validation = "validation" in splits or bool(data_args.prepared_dataset)
    if name != training_args.recipe or not with_validation or (name == "small" and pairs is not None):
        model_args, data_args, training_args = parse_arguments(
            argv, recipe=name, with_validation=with_validation, train_pairs=pairs
        )  # (again: the recipe chosen here, or its size depends on the data)
    if training_args.process_index == 0:  # shown whatever the log level
        print(
            f"xlpe-train: recipe {name} ({reason})"
            + ("" if with_validation else ", without periodic evaluation and early stopping (no validation split)")
            + sized_recipe_note(name, pairs)
            + "; explicit arguments override it",
            flush=True,
        )
    if training_args.process_index == 0 and training_args.do_train:
        Path(training_args.output_dir).mkdir(parents=True, exist_ok=True)
        write_text_atomic(
            recorded, json.dumps({"recipe": name, "reason": reason, "with_validation": with_validation}, indent=2)
        )
    return model_args, data_args, training_args


def sized_recipe_note(name: str, pairs: int | None) -> str:
    """What the training-set size changed in recipe `name` (recipes.small_epochs), as a clause."""
    if name != "small" or pairs is None:
        return ""
    return (
        f"; {small_epochs(pairs):g} epochs for {pairs:,} training pairs (about {SMALL_SENTENCE_PASSES:,} "
        "sentences seen, the fewer the pairs the more passes)"
    )


def report_cuda_defaults(training_args) -> None:
    """Print, once, which fast switches the run got on CUDA (`recipes.cuda_fast_defaults`) and the peak its MFU
    divides by, and keep the decision in `output_dir/cuda_defaults.json` (as `recipe.json` keeps the recipe)."""
    from .callbacks import device_peak, math_mode

    decision = getattr(training_args, "cuda_defaults", None)
    device = (decision or {}).get("device")
    if not device or training_args.process_index != 0:
        return
    mode = math_mode(bool(training_args.bf16), bool(training_args.fp16), training_args.tf32)
    peak, source = device_peak(device.get("name"), mode, device.get("multi_processor_count"))
    print(
        describe_fast_defaults(decision, device)
        + (f" MFU against {peak:g} TFLOP/s ({source})." if peak else f" MFU not reported: {source}."),
        flush=True,
    )
    if training_args.do_train:
        Path(training_args.output_dir).mkdir(parents=True, exist_ok=True)
        write_text_atomic(
            Path(training_args.output_dir) / "cuda_defaults.json",
            json.dumps({**decision, "peak_tflops": peak, "peak": source}, indent=2),
        )


def describe_device_for_card(training_args) -> str:
    """`cpu (2 threads)` or the GPU's name, times the processes."""
    import torch

    device = training_args.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    return name + (f" x {training_args.world_size} processes" if training_args.world_size > 1 else "")


def _training_pairs(splits: dict, data_args) -> int | None:
    """Training pairs read (None when unknown: a prepared dataset that cannot be opened here)."""
    if "train" in splits:
        return len(splits["train"].sources)
    if data_args.prepared_dataset:
        try:
            import datasets

            loaded = datasets.load_from_disk(data_args.prepared_dataset)
            return len(loaded["train"] if isinstance(loaded, datasets.DatasetDict) else loaded)
        except (OSError, KeyError, ValueError, FileNotFoundError):
            return None
    return None


def predict_and_report(trainer, test_dataset, tokenizer, data_args, generation) -> dict:
    """Translate the test split with beam search and score it: with predicted reorderings (what raw text gets)
    into generated_predictions.txt, and, for a model that takes XL positions when the split has the oracle
    ones, once more with the oracle positions (generated_predictions_oracle.txt, `predict_oracle_*` metrics:
    the upper bound a better reorderer could reach). Scores use the raw reference text when the split kept it."""
    if data_args.max_predict_samples is not None:
        test_dataset = test_dataset.select(range(min(len(test_dataset), data_args.max_predict_samples)))
    passes = [("predict", False)]
    if "reorder_positions" in test_dataset.column_names and getattr(trainer.model.config, "uses_xl", False):
        passes.append(("predict_oracle", True))
    metrics, all_scores, output_dir = {"predict_samples": len(test_dataset)}, {}, Path(trainer.args.output_dir)
    has_text = "target_text" in test_dataset.column_names  # score against the text, not the decoded label ids
    sources, references = (test_dataset["source_text"], test_dataset["target_text"]) if has_text else (None, None)
    for prefix, oracle in passes:
        trainer.eval_with_oracle_positions, saved = oracle, trainer.eval_with_oracle_positions
        try:
            results = trainer.predict(test_dataset, metric_key_prefix=prefix, **generation)
        finally:
            trainer.eval_with_oracle_positions = saved
        metrics.update(results.metrics)
        if not trainer.is_world_process_zero():
            continue
        hypotheses = decode_ids(tokenizer, results.predictions)
        name = "generated_predictions" + ("_oracle" if oracle else "")
        write_text_atomic(output_dir / f"{name}.txt", "\n".join(hypotheses) + "\n")
        if has_text:
            from ..evaluation.metrics import corpus_bleu_chrf

            scores = corpus_bleu_chrf(
                hypotheses, references, target_language=data_args.target_lang, tokenize=data_args.bleu_tokenize
            )
            metrics.update(
                {
                    f"{prefix}_bleu": round(scores["bleu"]["score"], 2),
                    f"{prefix}_chrf": round(scores["chrf"]["score"], 2),
                }
            )
            all_scores[prefix] = scores
            if not oracle:
                write_test_translations(output_dir, sources, references, hypotheses)  # beside the card
                for k in range(min(data_args.num_translation_examples, len(hypotheses))):
                    print(f"\nsource:     {sources[k]}\nreference:  {references[k]}\ntranslation: {hypotheses[k]}")
            label = "test" + (" (oracle positions)" if oracle else "")
            print(f"\n{label} BLEU {scores['bleu']['score']:.2f}  ({scores['bleu']['signature']})")
            print(f"{label} chrF {scores['chrf']['score']:.2f}  ({scores['chrf']['signature']})\n")
    if "predict" in all_scores:  # test_scores.json: the predicted-position scores, the oracle's beside them
        scores = dict(all_scores["predict"])
        if "predict_oracle" in all_scores:
            scores["oracle_positions"] = all_scores["predict_oracle"]
        write_text_atomic(output_dir / "test_scores.json", json.dumps(scores, indent=2))
    trainer.log_metrics("predict", metrics), trainer.save_metrics("predict", metrics)
    return metrics


def write_card(output_dir, model_args, data_args, training_args, metrics, facts=None, pending=()) -> None:
    """README.md model card (`model_card.write_training_card`: data, arguments, sizes, time, reorderer, and the
    validation and test scores with signatures, or `pending`: the stages whose scores are not in yet); skipped for
    stock (vanilla) models and when `output_dir` holds no model (an evaluation-only run of a model elsewhere)."""
    try:
        from .model_card import family_of, write_training_card

        family_of(AutoConfig.from_pretrained(output_dir))
    except (ImportError, ValueError, OSError) as error:
        logger.info("no model card written: %s", error)
        return
    write_training_card(output_dir, model_args, data_args, training_args, metrics, facts, pending=pending)

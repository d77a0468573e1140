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

`run_training` below is the run, step by step. Where each part lives: the flags parsed once and the argument
groups built from them `run_config.py` (the dataclasses `arguments.py`, the recipes `recipes.json`), raw
splits and features `data.py`, tokenizer and model `model_setup.py`, the Trainer `trainer.py`, the final evaluation,
test and card `run_evaluation.py`, the console script `xlpe.cli.train`. See docs/training.md.
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
from transformers import set_seed

from ..features.artefacts import record_path
from ..features.text_files import write_text_atomic
from ..models.hub_support import add_translation_pipeline, apply_umask_to_weights
from .callbacks import RunClock, RunOutcome, ValidationEarlyStopping
from .checkpoint_averaging import (
    last_checkpoints,
    list_checkpoints,
    newest_whole_checkpoint,
    save_averaged_model,
)
from .collator import ExtraInputsDataCollator
from .command_line import GivenFlags
from .data import check_splits, load_raw_splits, prepare_features, prepared_split_names, resolve_taggers
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
    set_word_starts,
    target_config,
)
from .plan import RunPlan
from .recipes import NO_RECIPE, SIZED_RECIPES, choose_recipe, describe_fast_defaults, sized_epochs
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
from .run_card import describe_optimizer
from .run_config import RunConfig, parse_arguments, parse_run_config  # noqa: F401 (parse_arguments: re-exported)
from .run_evaluation import describe_device_for_card, periodic_eval_dataset, predict_and_report, write_card
from .trainer import ExtraInputsSeq2SeqTrainer, make_compute_metrics

logger = logging.getLogger("xlpe.train")


# ---------------------------------------------------------------------------------------------------------
# The run, step by step
# ---------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None, callbacks: list | None = None, *, given: GivenFlags | None = None) -> dict:
    """Run `xlpe-train`; returns all metrics. `callbacks`: extra `TrainerCallback`s (tests, notebooks); `given`: the
    flags already parsed (the console script parses its command line once, before torch), instead of `argv`."""
    started = time.time()
    run = parse_run_config(argv, given=given)
    setup_logging(run.training)
    with locked_output_dir(run.training, f"xlpe-train --output_dir {run.training.output_dir}"):  # the whole run
        return run_training(run, callbacks or [], started)


def run_training(run: RunConfig, callbacks: list, started: float) -> dict:
    """The run, step by step (each step below, in this order)."""
    logger.info("model: %s | data: %s", run.model, run.data)
    set_seed(run.training.seed)
    checkpoint = check_start(run)
    splits = load_raw_splits(run.data, run.model)
    run = apply_recipe(run, splits, checkpoint)
    record_run(run, checkpoint)
    prepare_device(run)
    check_splits(splits, run, bool(run.model.tokenizer_name or run.model.model_name_or_path or checkpoint))
    tokenizer, model, taggers = build_tokenizer_and_model(run, splits, checkpoint)
    prepared = prepare_splits(run, splits, tokenizer, taggers, model, checkpoint)
    trainer, clock = make_trainer(run, model, tokenizer, prepared, checkpoint, callbacks)
    metrics, facts = train_and_save(run, trainer, clock, prepared, checkpoint)
    metrics = evaluate_and_describe(run, trainer, prepared, tokenizer, metrics, facts)
    if trainer.is_world_process_zero():
        print(f"xlpe-train: done in {time.time() - started:.0f} s; model and tokenizer in {run.training.output_dir}")
    return metrics


def check_start(run: RunConfig) -> str | None:
    """The checkpoint to resume from (None: a new run), with what the run starts from checked: init options, a
    hand-edited config.json (file and line, not a traceback); the output directory made."""
    checkpoint = resolve_checkpoint(run.training)
    check_init_options(run.model, checkpoint)
    for flag in ("model_name_or_path", "config_name"):
        value = getattr(run.model, flag)
        if value and Path(value).is_dir():
            check_config_file(value, f"--{flag} {value}")
    Path(run.training.output_dir).mkdir(parents=True, exist_ok=True)
    return checkpoint


def record_run(run: RunConfig, checkpoint: str | None) -> None:
    """What made this run, kept beside it (`reuse.run_record`); a resume must match it (`reuse.verify_resume`). A run
    started over drops an earlier run's learning-check verdict."""
    if not run.training.do_train:
        return
    record = verify_resume(run, checkpoint) if checkpoint else run_record(run)
    write_run_record(run.training, record)
    if not checkpoint and run.training.process_index == 0:
        (Path(run.training.output_dir) / LEARNING_CHECK_FILE).unlink(missing_ok=True)


def prepare_device(run: RunConfig) -> None:
    """The CUDA fast switches said once; on CPU no page faults on the step's large tensors (`host_memory.py`); under
    torch.compile the regular attention path (nn.TransformerEncoderLayer's fast path, used by the XL PE reorder
    predictor in the evaluation loss, ignores autocast under torch.compile and fails on mixed dtypes: a torch bug)."""
    report_cuda_defaults(run)
    if run.training.device.type == "cpu":
        logger.info(keep_freed_host_memory())
    if run.training.torch_compile:
        import torch

        torch.backends.mha.set_fastpath_enabled(False)


def build_tokenizer_and_model(run: RunConfig, splits: dict, checkpoint: str | None) -> tuple:
    """(tokenizer, model, taggers): the tokenizer loaded or trained, the taggers the family needs, the model built
    or loaded with its reorderer and generation options, checked against the tokenizer and the length flags."""
    model_args, data_args = run.model, run.data
    tokenizer = load_tokenizer_or_usage_error(run, splits, checkpoint)
    check_stock_start(model_args, checkpoint)  # e.g. mvPE+POS from a Marian checkpoint, before the taggers load
    try:  # an unknown tagger name, a tagger whose data is missing: one line, not a traceback
        target = target_config(model_args, checkpoint)  # (loaded once: the model is built from it)
        taggers = resolve_taggers(data_args, target, dict(run.config_overrides))
    except ValueError as error:
        raise UsageError(f"POS tagger: {(str(error).strip().splitlines() or [type(error).__name__])[0]}") from error
    try:
        model = build_model(model_args, data_args, tokenizer, checkpoint, taggers, target, dict(run.config_overrides))
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
    check_length_flags_fit(model, run, checkpoint)  # before preparing: not after training started
    if data_args.num_beams is not None:
        model.generation_config.num_beams = data_args.num_beams
    return tokenizer, model, taggers


def prepare_splits(run: RunConfig, splits: dict, tokenizer, taggers: dict, model, checkpoint: str | None) -> dict:
    """The features of the splits this run uses (`data.prepare_features`), checked against the model's position
    limit; the preparation report written beside the run."""
    training_args = run.training
    stages = {"train": training_args.do_train, "validation": training_args.do_eval, "test": training_args.do_predict}
    splits = {name: split for name, split in splits.items() if stages[name]}  # prepare only what is used
    prepared, reports = prepare_features(splits, tokenizer, model_features(model), taggers, run, model)
    check_prepared_fit(prepared, model, run, checkpoint)
    if training_args.process_index == 0:
        write_text_atomic(
            Path(training_args.output_dir) / "preparation_report.json", json.dumps(reports, indent=2, default=str)
        )
    return prepared


def make_trainer(run: RunConfig, model, tokenizer, prepared: dict, checkpoint: str | None, callbacks: list) -> tuple:
    """(trainer, clock): the Trainer with this run's callbacks (resumed frequencies, early stopping, the outcome
    line, the wall clock over resumed segments, the plan and its estimates, the learning check)."""
    model_args, data_args, training_args = run.groups()
    trainer_ref: list = []
    clock = RunClock(checkpoint)
    stopper = (
        ValidationEarlyStopping(training_args.early_stopping_patience)
        if training_args.early_stopping_patience and training_args.do_train
        else None
    )
    plan = run_plan(prepared, model, data_args, training_args) if training_args.do_train else None
    learning_check = (
        [
            LearningCheck(
                len(prepared["train"]),
                from_scratch=model_args.model_name_or_path is None,
                recipe=run.recipe,
            )
        ]
        if training_args.do_train and training_args.do_eval
        else []
    )
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
            *callbacks,
            *([ApplyResumedFrequencies()] if checkpoint else []),
            *([stopper] if stopper else []),
            RunOutcome(stopper),
            clock,
            *([plan] if plan is not None else []),
            *learning_check,
        ],
    )
    trainer_ref.append(trainer)
    if plan is not None and training_args.predict_with_generate:  # its first estimate times one greedy decode
        probe_set = trainer.eval_dataset if trainer.eval_dataset is not None else prepared.get("test")
        plan.decode_probe = lambda: trainer.time_greedy_decoding(probe_set)
    from transformers.integrations import TensorBoardCallback
    from transformers.integrations.integration_utils import default_logdir

    tensorboard = next((c for c in trainer.callback_handler.callbacks if isinstance(c, TensorBoardCallback)), None)
    if tensorboard is not None and tensorboard.logging_dir is None:  # the stock dir is set at on_train_begin only:
        tensorboard.logging_dir = str(Path(training_args.output_dir) / default_logdir())  # eval-only runs: not ./runs
    return trainer, clock


def train_and_save(run: RunConfig, trainer, clock: RunClock, prepared: dict, checkpoint: str | None) -> tuple:
    """(metrics, facts): train (resuming from `checkpoint`), save the model (averaged over the last checkpoints when
    asked), and what the run did for the card (device, optimizer, steps, epochs, wall time over segments)."""
    model_args, training_args = run.model, run.training
    facts: dict = {"device": describe_device_for_card(training_args)}
    if not training_args.do_train:
        return {}, facts
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
        **trainer.report.train_metrics(result.metrics.get("train_runtime"), trainer.token_sampler),
        "train_samples": len(prepared["train"]),
    }
    logger.info(
        "padding: %.1f%% of the trained tokens (%s batches)",
        100 * metrics["train_padding_waste"],
        f"--max_tokens {training_args.max_tokens}" if training_args.max_tokens else "sentence",
    )
    trainer.log_metrics("train", metrics), trainer.save_metrics("train", metrics), trainer.save_state()
    if training_args.average_last_checkpoints:
        average_into(trainer, training_args)
    if trainer.is_world_process_zero():  # a stock model too: pipeline("translation", model=dir, trust_remote_code=True)
        try:
            add_translation_pipeline(training_args.output_dir)
        except ValueError as error:  # e.g. a checkpoint with its own translation pipeline: kept, said
            logger.warning("the saved model does not get xlpe's translation pipeline: %s", error)
    return metrics, facts


def evaluate_and_describe(run: RunConfig, trainer, prepared: dict, tokenizer, metrics: dict, facts: dict) -> dict:
    """The final evaluation (the whole validation split) and the test translations with their scores; the model
    card written before each stage (an interrupted evaluation still leaves one) and after the last."""
    data_args, training_args = run.data, run.training
    metrics = dict(metrics)
    generation = dict(
        max_length=training_args.generation_max_length,  # None: the length rule (trainer.py)
        num_beams=data_args.num_beams,
    )
    stages = {"validation": training_args.do_eval, "test": training_args.do_predict}
    pending = [stage for stage in ("validation", "test") if stages[stage] and stage in prepared]  # card before each
    if trainer.is_world_process_zero():
        write_card(run, metrics, facts, pending=pending)
    if training_args.do_eval and "validation" in prepared:
        evaluated = {
            **trainer.evaluate(prepared["validation"], metric_key_prefix="eval", **generation),
            "eval_samples": len(prepared["validation"]),
        }  # (the whole split, not the periodic subset)
        trainer.log_metrics("eval", evaluated), trainer.save_metrics("eval", evaluated)
        metrics.update(evaluated)
        pending.remove("validation")
        if pending and trainer.is_world_process_zero():
            write_card(run, metrics, facts, pending=pending)
    if training_args.do_predict and "test" in prepared:
        metrics.update(predict_and_report(trainer, prepared["test"], tokenizer, data_args, generation))
    if trainer.is_world_process_zero():
        write_card(run, metrics, facts)
    return metrics


# ---------------------------------------------------------------------------------------------------------
# Output directory, checkpoints, logging
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


# ---------------------------------------------------------------------------------------------------------
# Checks before the work: the model's position limit, the tokenizer
# ---------------------------------------------------------------------------------------------------------


def position_limit_source(run: RunConfig, checkpoint) -> str:
    """Where the model's `max_position_embeddings` came from, for a message."""
    model_args = run.model
    if "max_position_embeddings" in run.config_overrides:
        return "--config_overrides"
    source = checkpoint or model_args.config_name or model_args.model_name_or_path
    return f"{Path(source) / 'config.json' if Path(source).is_dir() else source}" if source else "built here"


def check_length_flags_fit(model, run: RunConfig, checkpoint: str | None) -> None:
    """UsageError, before any data is prepared, when an explicit --max_source_length or --max_target_length exceeds
    the model's position limit: the first longer batch would fail after training started (a traceback in the
    model's input check). A default above the limit is lowered to it (pairs longer than the model can take are
    skipped and counted, as any pair over those lengths). A --prepared_dataset is not cut to those flags: its
    longest rows are checked (`check_prepared_fit`)."""
    data_args = run.data
    limit = getattr(model.config, "max_position_embeddings", None)
    if not limit or data_args.prepared_dataset:
        return
    explicit = run.explicit
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
            f"({position_limit_source(run, checkpoint)}): lower {'them' if len(over) > 1 else 'it'} to at "
            f"most {limit} or raise max_position_embeddings"
        )


def check_prepared_fit(prepared: dict, model, run: RunConfig, checkpoint) -> None:
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
                    f"({position_limit_source(run, checkpoint)}): prepare it with a lower {flag} or raise "
                    "max_position_embeddings"
                )


def load_tokenizer_or_usage_error(run: RunConfig, splits: dict, checkpoint: str | None):
    """`load_or_train_tokenizer`, with a model folder that has no (readable) tokenizer files as a UsageError (a
    damaged JSON file of it named with its line)."""
    from ..features.tokenization import check_tokenizer_files

    model_args, data_args, training_args = run.groups()
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
        return load_or_train_tokenizer(run, splits, checkpoint)
    except (OSError, TypeError, ValueError) as error:
        source = checkpoint or model_args.tokenizer_name or model_args.model_name_or_path
        if not source:
            raise
        raise UsageError(
            f"no tokenizer could be loaded from {source} "
            f"({type(error).__name__}: {str(error).strip().splitlines()[0]}); "
            "save the model's tokenizer there or give --tokenizer_name"
        ) from error


# ---------------------------------------------------------------------------------------------------------
# The recipe and the device
# ---------------------------------------------------------------------------------------------------------


def apply_recipe(run: RunConfig, splits: dict, checkpoint: str | None) -> RunConfig:
    """`run` with the recipe in force: `--recipe`, or for a model trained from scratch (not on the built-in
    corpus) the one `choose_recipe` picks for the training-set size and the device, or, when resuming, the one the
    run started with (`recipe.json`). A recipe without a validation split drops its periodic evaluation and early
    stopping. The groups are built again from the flags given (`RunConfig.with_recipe`); logs the choice and why;
    writes `recipe.json`."""
    model_args, data_args, training_args = run.groups()
    name, reason = training_args.recipe, "--recipe"
    recorded = Path(training_args.output_dir) / "recipe.json"
    pairs = None  # training pairs, read when a choice or the recipe's size needs them
    if run.recipe_pending:
        if checkpoint and recorded.is_file():
            name, reason = json.loads(recorded.read_text())["recipe"], f"the recipe of the run resumed ({recorded})"
        else:
            pairs = _training_pairs(splits, data_args, training_args.process_index == 0)
            name, reason = choose_recipe(pairs, training_args.device.type == "cuda")
    if name is None or name == NO_RECIPE:
        return run
    if pairs is None and name in SIZED_RECIPES and training_args.do_train:
        pairs = _training_pairs(splits, data_args, training_args.process_index == 0)
    with_validation = "validation" in (
        prepared_split_names(data_args.prepared_dataset) if data_args.prepared_dataset else splits
    )
    if name != training_args.recipe or not with_validation or (name in SIZED_RECIPES and pairs is not None):
        run = run.with_recipe(name, with_validation=with_validation, train_pairs=pairs)
        training_args = run.training  # (the recipe chosen here, or its size depends on the data)
    if training_args.process_index == 0:  # shown whatever the log level
        print(
            f"xlpe-train: recipe {name} ({reason})"
            + ("" if with_validation else ", without periodic evaluation and early stopping (no validation split)")
            + sized_recipe_note(name, pairs, training_args)
            + "; explicit arguments override it",
            flush=True,
        )
    if training_args.process_index == 0 and training_args.do_train:
        Path(training_args.output_dir).mkdir(parents=True, exist_ok=True)
        write_text_atomic(
            recorded, json.dumps({"recipe": name, "reason": reason, "with_validation": with_validation}, indent=2)
        )
    return run


def sized_recipe_note(name: str, pairs: int | None, training_args=None) -> str:
    """What the training-set size changed in recipe `name` (recipes.sized_epochs), as a clause, with the epochs
    that will run (`training_args`, the arguments in force): a given --num_train_epochs or --max_steps over the
    recipe's sizing is said as such."""
    if name not in SIZED_RECIPES or pairs is None:
        return ""
    sized = sized_epochs(name, pairs)
    max_steps = getattr(training_args, "max_steps", -1) or -1
    epochs = getattr(training_args, "num_train_epochs", sized)
    if max_steps > 0:
        return f"; --max_steps {max_steps} bounds the run (the recipe's sizing, {sized:g} epochs, does not apply)"
    if epochs is not None and float(epochs) != sized:
        return f"; {float(epochs):g} epochs as given (the recipe sizes {sized:g} for {pairs:,} training pairs)"
    return (
        f"; {sized:g} epochs for {pairs:,} training pairs (about {SIZED_RECIPES[name][0]:,} "
        "sentences seen, the fewer the pairs the more passes)"
    )


def _training_pairs(splits: dict, data_args, announce: bool = True) -> int | None:
    """Training pairs the run trains on, as the recipe choice and sizing count them: the pairs read less those the
    feature preparation drops before tokenising (`features.corpus.filter_pairs`, with the run's
    --max_source_length/--max_target_length: an empty side, more words than tokens allowed); the dropped ones are
    printed, by reason, when `announce` (None when unknown: a prepared dataset that cannot be opened here)."""
    if "train" in splits:
        from ..features.corpus import filter_pairs

        train = splits["train"]
        keep, skipped = filter_pairs(train, data_args.max_source_length, data_args.max_target_length)
        pairs, dropped = len(keep), {reason: count for reason, count in skipped.items() if count}
        if dropped and announce:
            reasons = ", ".join(f"{count:,} {reason.replace('_', ' ')}" for reason, count in dropped.items())
            print(
                f"xlpe-train: {pairs:,} training pairs of {len(train.sources):,} read ({reasons}: dropped before "
                "training)",
                flush=True,
            )
        return pairs
    if data_args.prepared_dataset:
        try:
            import datasets

            loaded = datasets.load_from_disk(data_args.prepared_dataset)
            return len(loaded["train"] if isinstance(loaded, datasets.DatasetDict) else loaded)
        except (OSError, KeyError, ValueError, FileNotFoundError):
            return None
    return None


def report_cuda_defaults(run: RunConfig) -> None:
    """Print, once, which fast switches the run got on CUDA (`recipes.cuda_fast_defaults`) and the peak its MFU
    divides by, and keep the decision in `output_dir/cuda_defaults.json` (as `recipe.json` keeps the recipe)."""
    from .throughput import device_peak, math_mode

    training_args, decision = run.training, dict(run.cuda_defaults)
    device = decision.get("device")
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


# ---------------------------------------------------------------------------------------------------------
# Parts of the Trainer
# ---------------------------------------------------------------------------------------------------------


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

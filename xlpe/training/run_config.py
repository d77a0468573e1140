"""`RunConfig`: one `xlpe-train` run's arguments, parsed once.

The command line is parsed once by `HfArgumentParser` over the argument dataclasses, every default a sentinel
(`read_given`; or the JSON file of `xlpe-train args.json`), into `given`: the flags the user gave, typed by the
fields' own types. Everything after that builds the three argument groups (run_translation's `ModelArguments`,
`DataTrainingArguments` and the training arguments) with `parse_dict` from `given` over the defaults in force —
the built-in corpus' recipe, a recipe (`recipes.json`), the CUDA fast switches — with `given` always winning. A
recipe chosen once the data is read (`with_recipe`) rebuilds the groups from the same `given`; the command line is
not read again.

The run record is every argument value of the three groups (`reuse.run_record`); a resume may change only the
fields `reuse.RESUME_MAY_CHANGE` names.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

import torch
from transformers import HfArgumentParser

from ..evaluation.metrics import check_bleu_tokenizer
from ..features.language_codes import check_language_code
from ..models.registry import help_signature
from .arguments import (
    BUILTIN_DATASET,
    DataTrainingArguments,
    XLPETrainingArguments,
    argument_classes,
    check_argument_types,
    check_batching,
    check_data_sources,
    check_flags_against_config_overrides,
    check_numbers,
    describe_device,
    fit_recipe_to_explicit,
)
from .command_line import CommandLineError, GivenFlags, arguments_file, read_arguments_file, store_help
from .errors import UsageError, unknown_flags_message
from .model_setup import parse_config_overrides
from .recipes import NO_RECIPE, builtin_recipe, cuda_fast_defaults, recipe_settings

logger = logging.getLogger("xlpe.train")
STAGES = ("do_train", "do_eval", "do_predict")


# ---------------------------------------------------------------------------------------------------------
# The parser: HfArgumentParser over the argument dataclasses
# ---------------------------------------------------------------------------------------------------------


class _Parser(HfArgumentParser):
    def error(self, message):  # one line, raised (argparse would print the usage and exit)
        raise CommandLineError(message)


def _expand_registry_help(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The registries' names in place of `{families}` / `{taggers}` in the help texts."""
    from ..models.registry import MODEL_FAMILIES
    from ..models.taggers import tagger_help

    names = {"{families}": ", ".join(MODEL_FAMILIES), "{taggers}": tagger_help()}
    for action in parser._actions:
        for placeholder, text in names.items():
            if action.help and placeholder in action.help:
                action.help = action.help.replace(placeholder, text)
    return parser


_PARSERS: dict[tuple[str, bool], HfArgumentParser] = {}
DESCRIPTION = (
    "Train a translation model (docs/training.md). --recipe fills the arguments not given (values: "
    "xlpe/training/recipes.json); explicit flags always win. The run records every argument; a resume "
    "(--resume_from_checkpoint) may change only output and reporting, --max_steps/--num_train_epochs, the save "
    "and evaluation cadence, evaluation settings and speed switches (xlpe.training.reuse.RESUME_MAY_CHANGE)."
)
NOT_GIVEN = object()  # the default of every flag in the parser of `read_given` (not text: argparse never converts it)


def flag_parser(given_only: bool = False) -> HfArgumentParser:
    """The parser of `xlpe-train` for the registries as they are now (built once per registry state). With
    `given_only`, every default is `NOT_GIVEN`: a parse tells the flags given from the others (`read_given`)."""
    key = (help_signature(), given_only)
    if key not in _PARSERS:
        parser = _expand_registry_help(_Parser(argument_classes(), prog="xlpe-train", description=DESCRIPTION))
        if given_only:
            parser.set_defaults(**dict.fromkeys((f.name for c in argument_classes() for f in fields(c)), NOT_GIVEN))
        _PARSERS[key] = parser
    return _PARSERS[key]


def option_strings() -> list[str]:
    return [option for action in flag_parser()._actions for option in action.option_strings]


def help_text() -> str:
    """`xlpe-train --help`: the parser's own text, cached with the option spellings (`command_line.store_help`)."""
    text = flag_parser().format_help()
    store_help(text, option_strings())
    return text


def read_given(argv: Sequence[str]) -> GivenFlags:
    """The one parse of `argv`: {flag: value} of the flags given, typed by the fields' types (an unknown flag, a
    missing value or a value that does not convert is a CommandLineError of one line, with "did you mean"), or the
    values of the JSON arguments file it names (`command_line.read_arguments_file`)."""
    path = arguments_file(argv)
    if path is not None:
        return read_arguments_file(path)
    namespace, unknown = flag_parser(given_only=True).parse_known_args(list(argv))
    if unknown:
        raise CommandLineError(unknown_flags_message(unknown, option_strings()))
    return GivenFlags({name: value for name, value in vars(namespace).items() if value is not NOT_GIVEN})


def _as_field_number(kind, value):
    """A default's number as its field's type makes it (a recipe's `warmup_steps=400` is 400.0 in a float field, as
    a command line's `--warmup_steps 400` is)."""
    if kind is float and type(value) is int:
        return float(value)
    return value


# ---------------------------------------------------------------------------------------------------------
# RunConfig
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunConfig:
    """One run's arguments: the three groups in force and what they were made from."""

    model: Any  # ModelArguments: which model, tokenizer and family (with the families' fields)
    data: DataTrainingArguments  # what data to train and evaluate on, lengths, beams, taggers
    training: XLPETrainingArguments  # transformers' Seq2SeqTrainingArguments plus this package's
    given: Mapping[str, Any] = field(default_factory=dict)  # the flags given (command line or JSON file), typed
    recipe: str | None = None  # the recipe whose defaults are in force (None: none)
    cuda_defaults: Mapping[str, Any] = field(default_factory=dict)  # the device and the fast switches applied
    recipe_pending: bool = False  # no recipe yet: one is chosen once the data is read (checks it needs wait for it)
    config_overrides: Mapping[str, Any] = field(default_factory=dict)  # --config_overrides, parsed (JSON values)

    @property
    def explicit(self) -> frozenset[str]:
        """The flags given explicitly."""
        return frozenset(self.given)

    @property
    def explicit_stages(self) -> frozenset[str]:
        """Which of --do_train/--do_eval/--do_predict were given explicitly."""
        return frozenset(self.explicit & set(STAGES))

    def groups(self) -> tuple:
        """(model, data, training): the three groups, in run_translation's order."""
        return self.model, self.data, self.training

    def with_recipe(self, recipe: str, with_validation: bool = True, train_pairs: int | None = None) -> RunConfig:
        """The same `given` with recipe `recipe` in force (sized to `train_pairs`; without periodic evaluation when
        `with_validation` is False): the groups built again, the command line not read again."""
        return build_run_config(self.given, recipe=recipe, with_validation=with_validation, train_pairs=train_pairs)


def typed_given(given: GivenFlags) -> dict:
    """The flags given, typed: a command line's as parsed, a file's JSON values checked against the fields' types."""
    if given.file is not None:
        return check_argument_types(dict(given.values), given.file, given.text or "")
    return dict(given.values)


def parse_run_config(
    argv: Sequence[str] | None = None,
    *,
    given: GivenFlags | None = None,
    recipe: str | None = None,
    with_validation: bool = True,
    train_pairs: int | None = None,
) -> RunConfig:
    """The RunConfig of `argv` (default: sys.argv; or of `given`, the flags the console script already read), with
    the built-in corpus' recipe and the named recipe (`--recipe`, or `recipe` chosen by the caller) filling what was
    not given; `with_validation=False` leaves out a recipe's periodic evaluation and early stopping; `train_pairs`
    sizes the `small` recipe to the data. Every inconsistency is a `UsageError`."""
    if given is None:  # (read_given and typed_given raise UsageError; build_run_config turns ValueError into one)
        given = read_given(list(sys.argv[1:] if argv is None else argv))  # the one parse
    return build_run_config(typed_given(given), recipe=recipe, with_validation=with_validation, train_pairs=train_pairs)


def parse_arguments(argv=None, recipe=None, with_validation=True, train_pairs=None) -> tuple:
    """(model, data, training) argument groups of `argv` (`parse_run_config(...).groups()`; notebooks, tests)."""
    return parse_run_config(argv, recipe=recipe, with_validation=with_validation, train_pairs=train_pairs).groups()


def build_run_config(
    given: Mapping[str, Any], *, recipe: str | None = None, with_validation: bool = True, train_pairs: int | None = None
) -> RunConfig:
    try:
        return _build(dict(given), recipe, with_validation, train_pairs)
    except UsageError:
        raise
    except ValueError as error:
        raise UsageError(str(error)) from error


def _build(given: dict, recipe: str | None, with_validation: bool, train_pairs: int | None) -> RunConfig:
    parser, explicit = flag_parser(), set(given)
    kinds = {action.dest: action.type for action in parser._actions if action.option_strings}

    def groups(defaults: dict) -> tuple:
        defaults = {key: _as_field_number(kinds.get(key), value) for key, value in defaults.items()}
        return parser.parse_dict({**defaults, **given})

    model_args, data_args, training_args = groups({})
    overrides = parse_config_overrides(model_args.config_overrides)  # (parsed once: the run reads `config_overrides`)
    check_flags_against_config_overrides(model_args, explicit, overrides)
    check_data_sources(data_args)
    for name in ("source_lang", "target_lang"):  # `french` or `ffr` would pick tokenizers by a wrong code
        check_language_code(getattr(data_args, name), f"--{name}")
    defaults = (
        {"dataset_name": BUILTIN_DATASET, **builtin_recipe(_from_scratch(model_args))}
        if data_args.uses_builtin_corpus()
        else {}
    )
    recipe = recipe or training_args.recipe
    device = describe_device(training_args)
    if recipe and recipe != NO_RECIPE:
        from_scratch = model_args.model_name_or_path is None and model_args.config_name is None
        defaults.update(
            recipe_settings(
                recipe,
                from_scratch,
                with_validation,
                training_args.predict_with_generate,
                device=device,
                train_pairs=train_pairs,
            ),
            recipe=recipe,
        )
        if "max_tokens" not in explicit and explicit & {"per_device_train_batch_size", "train_sampling_strategy"}:
            defaults.pop("max_tokens")  # an explicit sentence batching replaces the recipe's token batches
    defaults = {key: value for key, value in defaults.items() if key not in explicit or key == "dataset_name"}
    # on CUDA: bf16, fused AdamW, torch.compile, token batches unless given (recipes.cuda_fast_defaults)
    sharded = bool(training_args.fsdp or training_args.deepspeed or os.environ.get("ACCELERATE_USE_FSDP") == "true")
    fast = cuda_fast_defaults(device, explicit | set(defaults), sharded=sharded)
    defaults.update(fast["applied"])
    if defaults:
        model_args, data_args, training_args = groups(defaults)
    check_batching(training_args, explicit)
    if data_args.prepared_dataset:  # raw data flags refused; its saved tokenizer and languages filled in
        from .data import use_prepared_dataset
        from .reuse import check_prepared_dataset

        check_prepared_dataset(data_args.prepared_dataset)  # whole: JSON files parse, Arrow files read to the end
        use_prepared_dataset(data_args, model_args)
    _choose_stages(training_args, explicit)
    check_numbers(data_args, training_args)
    from_scratch = model_args.model_name_or_path is None and model_args.config_name is None
    # no recipe named, and one is chosen once the training data is read (`run.apply_recipe`)
    pending = recipe is None and from_scratch and training_args.do_train and not data_args.uses_builtin_corpus()
    _check_across_groups(data_args, training_args, explicit, recipe_pending=pending)
    return RunConfig(
        model=model_args,
        data=data_args,
        training=training_args,
        given=MappingProxyType(dict(given)),
        recipe=recipe if recipe and recipe != NO_RECIPE else None,
        cuda_defaults=MappingProxyType({"device": device, **fast}),
        recipe_pending=pending,
        config_overrides=MappingProxyType(overrides),
    )


def _from_scratch(model_args) -> bool:
    return model_args.model_name_or_path is None and model_args.config_name is None


def _choose_stages(training_args, explicit: set[str]) -> None:
    """None of --do_train/--do_eval/--do_predict asked for, some switched off: the others run (`--do_eval false`:
    train + test; an eval_strategy alone turns do_eval on, which is not a choice of stages)."""
    chosen = {stage for stage in STAGES if stage in explicit}
    if not any(getattr(training_args, stage) for stage in chosen):
        for stage in set(STAGES) - chosen:
            setattr(training_args, stage, True)
        if not any(getattr(training_args, stage) for stage in STAGES):
            raise UsageError("--do_train, --do_eval and --do_predict are all false: nothing to do")


def _check_across_groups(data_args, training_args, explicit: set[str], recipe_pending: bool = False) -> None:
    """Generation settings of the evaluations during training, the recipe's early stopping and averaging fitted to
    the explicit flags, and what cannot work found now rather than after hours of training. While a recipe is
    `recipe_pending` (chosen once the data is read), what the recipe will set (periodic evaluation, saving) is
    not judged yet: `--early_stopping_patience 6` alone is fine, the recipe evaluates every N steps."""
    # an explicit --val_max_target_length / --generation_max_length caps every sentence; without one, the length
    # rule gives each sentence its own budget (xlpe/models/length_rule.py; trainer.py)
    if training_args.generation_max_length is None:
        training_args.generation_max_length = data_args.val_max_target_length
    if training_args.generation_num_beams is None:
        training_args.generation_num_beams = data_args.num_beams
    if not recipe_pending:
        fit_recipe_to_explicit(training_args, explicit)
    if training_args.average_last_checkpoints and training_args.do_train and not recipe_pending:
        keep, count, steps = (
            training_args.save_total_limit,
            training_args.average_last_checkpoints,
            training_args.max_steps,
        )
        saved = steps // training_args.save_steps if steps > 0 and training_args.save_strategy == "steps" else None
        if (
            training_args.save_strategy == "no"
            or (keep is not None and keep < count)
            or (saved is not None and saved < count)
        ):
            raise ValueError(
                f"--average_last_checkpoints {count} needs at least {count} saved checkpoints: "
                f"--save_strategy is {getattr(training_args.save_strategy, 'value', training_args.save_strategy)}, "
                f"--save_total_limit is {keep}, "
                f"--max_steps {steps} / --save_steps {training_args.save_steps} saves {saved}"
            )
    if training_args.early_stopping_patience:
        if training_args.metric_for_best_model is None:  # (greater_is_better follows the metric's name)
            training_args.metric_for_best_model = "bleu" if training_args.predict_with_generate else "loss"
            training_args.greater_is_better = training_args.predict_with_generate
        if training_args.eval_strategy == "no" and training_args.do_train and not recipe_pending:
            raise ValueError(
                f"--early_stopping_patience {training_args.early_stopping_patience} needs periodic "
                "evaluation: --eval_strategy steps --eval_steps N (got --eval_strategy no)"
            )
    if training_args.predict_with_generate and (training_args.do_eval or training_args.do_predict):
        # the tokenizer BLEU will need, resolved and tried now, not after hours of training (ja-mecab needs mecab)
        data_args.bleu_tokenize = check_bleu_tokenizer(data_args.target_lang, data_args.bleu_tokenize)
    import importlib.util

    if "tensorboard" in (training_args.report_to or []) and importlib.util.find_spec("tensorboard") is None:
        raise ValueError(
            "--report_to tensorboard needs the tensorboard package: pip install tensorboard (or xlpe[eval])"
        )
    if "dataloader_persistent_workers" not in explicit and training_args.dataloader_num_workers > 0:
        training_args.dataloader_persistent_workers = True  # workers kept across epochs, not forked again each one
    if "dataloader_pin_memory" not in explicit and not torch.cuda.is_available():
        training_args.dataloader_pin_memory = False  # pinning is meaningless on CPU (and warns every epoch)
    if os.environ.get("ACCELERATE_USE_CPU") == "True" and training_args.world_size == 1:
        logger.warning(
            "`accelerate launch --cpu` starts ONE process (unless an MPI hostfile is given); for N CPU "
            "processes use `accelerate launch --multi_gpu --num_processes N ... --use_cpu` or torchrun"
        )

"""The arguments of `xlpe-train`: run_translation's names (`ModelArguments`, `DataTrainingArguments`,
`Seq2SeqTrainingArguments`) plus the model family, its fields and this package's data sources.

The built-in synthetic corpus has its own defaults (a small model, a BPE tokenizer, a few CPU minutes),
`--recipe tiny|small|base|big` those of a recipe (both in `recipes.json`); any argument
given explicitly on the command line (or in the JSON file) wins over both (`run_config.RunConfig.given`).
A training flag is one field here (its type, default and help); the run record keeps every field's value and
a resume may change only the fields `reuse.RESUME_MAY_CHANGE` names.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import types
from dataclasses import dataclass, field, make_dataclass
from pathlib import Path

import torch
from transformers import Seq2SeqTrainingArguments

from ..models.registry import family_fields, family_flags, help_signature
from .errors import UsageError, key_line
from .recipes import RECIPE_NAMES, builtin_recipe  # noqa: F401 (builtin_recipe: re-exported)

logger = logging.getLogger("xlpe.train")

BUILTIN_DATASET = "builtin:synthetic"
# the size flags of a model trained from scratch -> the config fields each one sets
SIZE_FIELDS = {
    "d_model": ("d_model",),
    "encoder_layers": ("encoder_layers",),
    "decoder_layers": ("decoder_layers",),
    "attention_heads": ("encoder_attention_heads", "decoder_attention_heads"),
    "ffn_dim": ("encoder_ffn_dim", "decoder_ffn_dim"),
    "dropout": ("dropout",),
}


# ---------------------------------------------------------------------------------------------------------
# The three argument groups (run_translation's names)
# ---------------------------------------------------------------------------------------------------------


def _help(text: str, **kwargs):
    """A flag: its help text (HfArgumentParser's `help` metadata) and its default."""
    return field(metadata={"help": text}, **kwargs)


@dataclass
class ModelArguments:
    """Which model, tokenizer and family to train (run_translation's names first). The registered families' own
    fields (`ModelFamily.fields`: a family added in a plugin adds flags) are added after these by
    `model_arguments_class`; `{families}` and `{taggers}` in a help text are the registries' names
    (`run_config.flag_parser` fills them in)."""

    model_name_or_path: str | None = _help(
        "checkpoint to start from (Hub id or directory); none = from scratch", default=None
    )
    model_type: str | None = _help(
        "vanilla (stock MarianMT) or a registered family: {families}. Default: xlpe from scratch, "
        "the checkpoint's own type with --model_name_or_path. A stock Marian checkpoint with --model_type xlpe "
        "is upgraded function-preservingly",
        default=None,
    )
    config_name: str | None = _help("config (directory or Hub id) to build a from-scratch model from", default=None)
    tokenizer_name: str | None = _help(
        "tokenizer (directory or Hub id); none = the checkpoint's, or a new "
        "joint tokenizer trained on the training text",
        default=None,
    )
    cache_dir: str | None = _help("where downloads and prepared features are cached", default=None)
    model_revision: str = _help("model version: branch, tag or commit", default="main")
    token: str | None = _help("Hub token (default: the saved login)", default=None)
    trust_remote_code: bool = _help("allow Hub custom code for checkpoints of other packages", default=False)
    config_overrides: str | None = _help(
        "more config fields: 'key=value,key=value' (JSON values), e.g. "
        "'relative_attention_max_distance=16,directional_attention=true'",
        default=None,
    )
    reorderer: str | None = _help(
        "XL PE: a standalone reorderer (`xlpe-reorder train`, same tokenizer) that supplies "
        "the predicted positions; saved inside the checkpoint",
        default=None,
    )
    # --- size of a model trained from scratch (None: Transformer-base) ---
    d_model: int | None = _help("hidden size", default=None)
    encoder_layers: int | None = _help("encoder layers", default=None)
    decoder_layers: int | None = _help("decoder layers", default=None)
    attention_heads: int | None = _help("attention heads (encoder and decoder)", default=None)
    ffn_dim: int | None = _help("feed-forward width (encoder and decoder)", default=None)
    dropout: float | None = _help("dropout", default=None)
    # --- initialisation of a model built here (from scratch or --config_name) ---
    init_std: float | None = _help(
        "std of the weights HF initialises (every linear layer, and the embeddings unless "
        "--embedding_init_std); default d_model^-1/2 from scratch, the config's with "
        "--config_name",
        default=None,
    )
    embedding_init_std: float | None = _help(
        "std of the token embeddings alone (scaled by sqrt(d_model) in use); "
        "default --init_std. See docs/training.md, 'Initialisation'",
        default=None,
    )
    # --- a tokenizer trained here ---
    tokenizer_vocab_size: int = _help("sub-word vocabulary of a tokenizer trained here", default=8000)
    tokenizer_model: str = _help("unigram | bpe, for a tokenizer trained here", default="unigram")
    use_fast_tokenizer: bool = _help(
        "run_translation's flag: transformers 5 always loads the fast tokenizer (false is accepted and warned about)",
        default=True,
    )


def _family_flag_fields() -> list[tuple]:
    """(name, type, field) of every registered family's `xlpe-train` fields; a field with choices (the strategy
    field, or one whose choices a registry holds) lists them."""
    made = []
    for name, kind, help_text, choices in family_flags():
        metadata = {"help": help_text}
        if choices:  # the strategies, or a registry's names (argparse's choices; HfArgumentParser passes metadata on)
            metadata["choices"] = choices
        made.append((name, kind | None, field(default=None, metadata=metadata)))
    return made


_MODEL_ARGUMENTS: dict[str, type] = {}


def model_arguments_class() -> type:
    """`ModelArguments` with the fields of the families registered now after its own (each family's flags and
    their choices; None: the family's default; each checked against the family's config), built once per registry
    state."""
    key = help_signature()
    if key not in _MODEL_ARGUMENTS:
        cls = make_dataclass("ModelArguments", _family_flag_fields(), bases=(ModelArguments,))
        cls.__module__, cls.__doc__ = __name__, ModelArguments.__doc__
        _MODEL_ARGUMENTS[key] = cls
    return _MODEL_ARGUMENTS[key]


def argument_classes() -> tuple[type, type, type]:
    """The three argument groups for the families registered now (model, data, training)."""
    return model_arguments_class(), DataTrainingArguments, XLPETrainingArguments


@dataclass
class DataTrainingArguments:
    """What data to train and evaluate on (run_translation's names, plus plain text / alignment files)."""

    source_lang: str | None = _help("source language key (e.g. en)", default=None)
    target_lang: str | None = _help("target language key (e.g. de)", default=None)
    dataset_name: str | None = _help(f"Hub dataset id, local datasets directory, or {BUILTIN_DATASET}", default=None)
    dataset_config_name: str | None = _help("dataset configuration (e.g. de-en)", default=None)
    dataset_label: str | None = _help(
        "what the training data is called in the model card (e.g. 'Multi30k fr-en, "
        "10k pairs'); default: the name xlpe-prepare recorded (--name), the "
        "--dataset_name, or the training files' names",
        default=None,
    )
    license: str | None = _help(
        "the model's license on its card (an SPDX id such as apache-2.0; mind the training data's terms); "
        "default: none stated",
        default=None,
    )
    train_file: str | None = _help(
        'jsonlines {"translation": {src: ..., tgt: ...}} (optional "alignment")', default=None
    )
    validation_file: str | None = _help("jsonlines validation file", default=None)
    test_file: str | None = _help("jsonlines test file", default=None)
    train_source_file: str | None = _help("plain text, one source sentence per line (.gz ok)", default=None)
    train_target_file: str | None = _help("plain text, parallel to --train_source_file", default=None)
    train_alignment_file: str | None = _help(
        "Pharaoh i-j links parallel to the training pairs (default: eflomal)", default=None
    )
    validation_source_file: str | None = _help("plain text validation sources", default=None)
    validation_target_file: str | None = _help("plain text validation targets", default=None)
    validation_alignment_file: str | None = _help("Pharaoh links for the validation pairs", default=None)
    test_source_file: str | None = _help("plain text test sources", default=None)
    test_target_file: str | None = _help("plain text test targets", default=None)
    test_alignment_file: str | None = _help("Pharaoh links for the test pairs", default=None)
    prepared_dataset: str | None = _help(
        "a directory written by xlpe-prepare: its splits, and its tokenizer "
        "unless --tokenizer_name is given; no other data flags",
        default=None,
    )
    source_prefix: str | None = _help(
        "text put before every source sentence, in training and evaluation (T5-style "
        "task prefix; recorded in the model card: add it when translating)",
        default=None,
    )
    overwrite_cache: bool = _help(
        "recompute the prepared features even when the cache holds them (and replace them)",
        default=False,
    )
    pad_to_max_length: bool = _help(
        "pad every batch to max(--max_source_length, --max_target_length) (static "
        "shapes); default: to the longest example of the batch",
        default=False,
    )
    ignore_pad_token_for_loss: bool = _help(
        "padded label positions are left out of the loss (-100); false trains "
        "them to predict the pad token, as run_translation's flag does",
        default=True,
    )
    forced_bos_token: str | None = _help(
        "token forced as the first generated one (e.g. a target-language tag); must be in the vocabulary", default=None
    )
    max_source_length: int = _help("longest source in tokens; longer pairs are skipped (counted)", default=128)
    max_target_length: int = _help("longest target in tokens; longer pairs are skipped (counted)", default=128)
    val_max_target_length: int | None = _help(
        "generation length cap at evaluation for every sentence (default: the length rule, each sentence "
        "1.5 x its source tokens + 10, at most max_position_embeddings - 1)",
        default=None,
    )
    max_train_samples: int | None = _help("use the first N training pairs", default=None)
    max_eval_samples: int | None = _help("use the first N validation pairs", default=None)
    max_predict_samples: int | None = _help("use the first N test pairs", default=None)
    num_beams: int | None = _help(
        "beams at evaluation/prediction (also saved as the model's default)",
        default=None,
    )
    preprocessing_num_workers: int | None = _help("processes for the feature preparation", default=None)
    source_tagger: str | None = _help(
        "POS tagger of the source (families with tags): {taggers} (xlpe-tagger train)",
        default=None,
    )
    target_tagger: str | None = _help("POS tagger of the target (families with tags)", default=None)
    nltk_data: str | None = _help("extra nltk_data directory for the nltk-en tagger", default=None)
    num_translation_examples: int = _help("test translations printed at the end", default=5)
    bleu_tokenize: str | None = _help(
        "sacrebleu's BLEU tokenizer: 13a, intl, zh, ja-mecab, ko-mecab, char, none, ... "
        "Default: sacrebleu's choice for --target_lang (zh -> zh, ja -> ja-mecab, "
        "ko -> ko-mecab, else 13a); checked before training",
        default=None,
    )

    def uses_builtin_corpus(self) -> bool:
        files = [v for k, v in vars(self).items() if k.endswith("_file") and v]
        return self.dataset_name == BUILTIN_DATASET or not (self.dataset_name or self.prepared_dataset or files)


@dataclass
class XLPETrainingArguments(Seq2SeqTrainingArguments):
    """Seq2SeqTrainingArguments (generation on by default) plus resume/averaging/evaluation options."""

    predict_with_generate: bool = _help("evaluate with generate() (BLEU, chrF)", default=True)
    overwrite_output_dir: bool = _help(
        "start over in an output_dir that holds checkpoints (they are deleted)", default=False
    )
    average_last_checkpoints: int = _help(
        "average the last N checkpoints into the final model (papers: 5)",
        default=0,
    )
    recipe: str | None = _help(
        f"argument defaults: {' | '.join(RECIPE_NAMES)} (architecture, inverse-sqrt schedule, "
        "label smoothing, token batches, BLEU evaluation, early stopping, averaging; explicit "
        "flags win), or none (transformers' defaults). Default from scratch: chosen for the data size and device "
        "(logged)",
        default=None,
    )
    max_tokens: int | None = _help(
        "token-based batches: length-bucketed, at most N padded tokens (longest side x "
        "sentences) per batch and process, instead of --per_device_train_batch_size",
        default=None,
    )
    early_stopping_patience: int | None = _help(
        "stop after N evaluations without a better --metric_for_best_model (default bleu); needs --eval_strategy steps",
        default=None,
    )
    eval_subset: int | None = _help(
        "periodic evaluations during training score only the first N validation "
        "sentences (bounded cost; early stopping reads them); the final evaluation "
        "scores the whole split. Recipe small: 200",
        default=None,
    )
    eval_with_oracle_positions: bool = _help(
        "validation: give generate() the gold reorderings (an upper bound; default: "
        "predicted). The test split of an XL PE model is scored both ways anyway",
        default=False,
    )


# ---------------------------------------------------------------------------------------------------------
# Checks across the groups, recipes, device
# ---------------------------------------------------------------------------------------------------------


def check_batching(training_args, explicit: set[str]) -> None:
    """`--max_tokens` replaces sentence batches: it must be positive and not given with a sentence batching."""
    if training_args.max_tokens is None:
        return
    if training_args.max_tokens < 1:
        raise ValueError(f"--max_tokens must be a positive number of tokens, got {training_args.max_tokens}")
    conflicting = sorted(explicit & {"per_device_train_batch_size", "train_sampling_strategy", "auto_find_batch_size"})
    if "max_tokens" in explicit and conflicting:
        raise ValueError(
            f"--max_tokens makes token-based, length-bucketed batches; it conflicts with --{conflicting[0]} "
            "(sentence batches): give one or the other"
        )


def check_data_sources(data_args) -> None:
    """A dataset name beside data files: one of them would be ignored (the built-in corpus or a Hub / local dataset
    wins over the files), so the two are refused together, naming both. Alignment files may go with a dataset
    (Pharaoh links for its splits)."""
    files = [
        f"--{name}"
        for name, value in vars(data_args).items()
        if name.endswith("_file") and not name.endswith("_alignment_file") and value
    ]
    if data_args.dataset_name and files:
        raise UsageError(
            f"--dataset_name {data_args.dataset_name} and {', '.join(files)} both name training data, and "
            f"only one can be used: give the dataset or the files"
        )


def check_numbers(data_args, training_args) -> None:
    """Numbers that cannot work, before any work: lengths and counts below 1, and a training length that would
    train nothing (`--max_steps 0`, a negative one other than -1, which is transformers' "train for
    --num_train_epochs", or -1 with `--num_train_epochs` <= 0)."""
    for name in (
        "max_source_length",
        "max_target_length",
        "val_max_target_length",
        "max_train_samples",
        "max_eval_samples",
        "max_predict_samples",
        "num_beams",
        "preprocessing_num_workers",
    ):
        value = getattr(data_args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name} must be >= 1, got {value}")
    if not training_args.do_train:
        return
    steps, epochs = training_args.max_steps, training_args.num_train_epochs
    if steps == 0 or steps < -1:
        raise UsageError(
            f"--max_steps must be a positive number of optimizer steps, or -1 to train for "
            f"--num_train_epochs ({epochs}); got {steps}"
        )
    if steps == -1 and epochs <= 0:
        raise UsageError(f"--num_train_epochs must be > 0 when --max_steps is -1 (training by epochs); got {epochs}")


def fit_recipe_to_explicit(training_args, explicit: set[str]) -> None:
    """A recipe's early stopping and checkpoint averaging (not given explicitly) give way to explicit arguments
    that leave no room for them: no periodic evaluation, fewer saved checkpoints than the recipe averages."""
    if "early_stopping_patience" not in explicit and training_args.eval_strategy == "no":
        training_args.early_stopping_patience = None
    if "average_last_checkpoints" not in explicit and training_args.average_last_checkpoints:
        steps, every, keep = training_args.max_steps, training_args.save_steps, training_args.save_total_limit
        saved = (steps // every if steps > 0 else None) if training_args.save_strategy == "steps" else 0
        fitting = min(c for c in (training_args.average_last_checkpoints, saved, keep) if c is not None)
        if fitting < training_args.average_last_checkpoints:
            logger.info(
                "averaging the last %d checkpoints, not the recipe's %d (--save_strategy/--save_steps/--max_steps "
                "save fewer)",
                fitting,
                training_args.average_last_checkpoints,
            )
            training_args.average_last_checkpoints = fitting


def describe_device(training_args) -> dict | None:
    """{"type": "cuda", "name", "capability", "compile", "cpus"} of the device the run trains on (None: not CUDA),
    the input of `recipes.cuda_fast_defaults`."""
    device = training_args.device
    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    properties = torch.cuda.get_device_properties(index)  # SMs (a MIG slice has fewer) and memory: recipes fit to them
    return {
        "type": "cuda",
        "name": torch.cuda.get_device_name(index),
        "capability": list(torch.cuda.get_device_capability(index)),
        "compile": importlib.util.find_spec("triton") is not None,
        "cpus": os.cpu_count() or 1,
        "multi_processor_count": properties.multi_processor_count,
        "memory": properties.total_memory,
    }


def check_flags_against_config_overrides(model_args, explicit: set[str], overrides: dict) -> None:
    """UsageError when an explicit flag and a `--config_overrides` key set one config field to different values
    (`--xl_strategy head --config_overrides xl_strategy=combination`: the override would win without a word); the
    same value twice is fine. The flags: the families' fields, the size flags and --init_std. `overrides`: the
    parsed --config_overrides."""
    if not overrides:
        return
    targets = {name: ((name,), field.convert) for name, (field, _) in family_fields().items()}
    targets.update({name: (config_fields, None) for name, config_fields in SIZE_FIELDS.items()})
    targets["init_std"] = (("init_std",), None)
    for flag, (config_fields, convert) in targets.items():
        value = getattr(model_args, flag, None)
        if flag not in explicit or value is None:
            continue
        for key in config_fields:
            if key in overrides and not _same_setting(value, overrides[key], convert):
                raise UsageError(
                    f"--{flag} {value} and --config_overrides {key}={overrides[key]} set the config's {key} to "
                    f"different values: give it once"
                )


def _same_setting(flag_value, override_value, convert) -> bool:
    if flag_value == override_value or str(flag_value) == str(override_value):
        return True
    if convert is None:
        return False
    try:
        return convert(flag_value) == convert(override_value)
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------------------------------------------------
# The JSON arguments file (`xlpe-train args.json`)
# ---------------------------------------------------------------------------------------------------------


def _json_kinds(hint) -> set | None:
    """The JSON value types a field of type `hint` takes (None: not checked here, e.g. a config object)."""
    import enum
    import typing

    kinds = set()
    for option in typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,):
        origin = typing.get_origin(option) or option
        if origin is typing.Literal:
            kinds.update(type(value) for value in typing.get_args(option))
        elif isinstance(origin, type) and issubclass(origin, enum.Enum):
            kinds.add(str)
        elif origin in (bool, int, float, str, list, dict, type(None)):
            kinds.add(origin)
        else:
            return None
    return kinds


def check_argument_types(given: dict, path: Path, text: str) -> dict:
    """The values of `xlpe-train args.json` (`command_line.read_arguments_file`) checked against the arguments'
    types: an unknown name or a value of another type is a UsageError naming the file and line."""
    import typing

    hints = {}
    for cls in (model_arguments_class(), DataTrainingArguments, XLPETrainingArguments):
        hints.update(typing.get_type_hints(cls))
    names = {
        "bool": "true or false",
        "int": "an integer",
        "float": "a number",
        "str": "text",
        "list": "a list",
        "dict": "an object",
        "NoneType": "null",
    }
    for key, value in given.items():
        if key not in hints:
            raise UsageError(f"{path}:{key_line(text, key)}: unknown argument {key!r} (see xlpe-train --help)")
        kinds = _json_kinds(hints[key])
        if kinds is None:
            continue
        fits = type(value) in kinds or (type(value) is int and float in kinds)
        if not fits:
            wanted = " or ".join(
                names.get(kind.__name__, kind.__name__) for kind in sorted(kinds, key=lambda k: k.__name__)
            )
            raise UsageError(f"{path}:{key_line(text, key)}: {key!r} must be {wanted}, got {json.dumps(value)}")
    return given

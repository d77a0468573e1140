"""The arguments of `xlpe-train`: run_translation's names (`ModelArguments`, `DataTrainingArguments`,
`Seq2SeqTrainingArguments`) plus the model family, its fields and this package's data sources.

`builtin_recipe` holds the defaults used when training on the built-in synthetic corpus (a small model, a
BPE tokenizer, a few CPU minutes), `--recipe small|base|big` those of a recipe (`recipes.py`); any argument
given explicitly on the command line (or in the JSON file) wins over both (`explicit_keys`).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import os
import sys
import types
from dataclasses import MISSING, dataclass, field, fields, make_dataclass
from pathlib import Path

import torch
from transformers import HfArgumentParser, Seq2SeqTrainingArguments

from ..evaluation.metrics import check_bleu_tokenizer
from ..features.language_codes import check_language_code
from ..models.registry import MODEL_FAMILIES, family_fields, help_signature
from ..models.taggers import tagger_help
from .errors import UsageError, unknown_flags_message
from .recipes import NO_RECIPE, RECIPE_NAMES, cuda_fast_defaults, recipe_settings

logger = logging.getLogger("xlpe.train")

BUILTIN_DATASET = "builtin:synthetic"


# ---------------------------------------------------------------------------------------------------------
# The three argument groups (run_translation's names)
# ---------------------------------------------------------------------------------------------------------


def _help(text: str, **kwargs):
    return field(metadata={"help": text}, **kwargs)


@dataclass
class _ModelArgumentsBase:
    """Which model, tokenizer and family to train (run_translation's names first); the registered families' own
    fields are added after `config_overrides` (`model_arguments_class`)."""

    model_name_or_path: str | None = _help(
        "checkpoint to start from (Hub id or directory); none = from scratch", default=None
    )
    model_type: str | None = _help(
        "vanilla (stock MarianMT) or a registered family: xlpe, dpe, mvpe_pos, ... Default: xlpe from scratch, "
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
    # --- here: the families' fields (xlpe.models.registry, `ModelFamily.fields`; None: the family's default);
    # each is checked against the family's config ---
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
    for name, (family_field, families) in family_fields().items():
        family = families[0]
        metadata = {"help": family.field_help(family_field)}
        if family.field_choices(family_field):  # the strategies, or a registry's names (argparse's choices;
            metadata["choices"] = family.field_choices(family_field)  # HfArgumentParser passes metadata on)
        made.append((name, family_field.type | None, field(default=None, metadata=metadata)))
    return made


def _model_type_help() -> str:
    return (
        f"vanilla (stock MarianMT) or a registered family: {', '.join(MODEL_FAMILIES)}. Default: xlpe from scratch, "
        "the checkpoint's own type with --model_name_or_path. A stock Marian checkpoint with --model_type xlpe "
        "is upgraded function-preservingly"
    )


_MODEL_ARGUMENTS: dict[str, type] = {}


def model_arguments_class() -> type:
    """`ModelArguments` for the families registered now: the base fields, with each family's fields (and their
    choices) after `config_overrides` (built once per registry state)."""
    key = help_signature()
    if key not in _MODEL_ARGUMENTS:
        made = []
        for base in fields(_ModelArgumentsBase):
            default = {"default": base.default} if base.default is not MISSING else {}
            help_text = _model_type_help() if base.name == "model_type" else base.metadata["help"]
            made.append((base.name, base.type, _help(help_text, **default)))
            if base.name == "config_overrides":
                made += _family_flag_fields()
        cls = make_dataclass("ModelArguments", made)
        cls.__module__, cls.__doc__ = __name__, _ModelArgumentsBase.__doc__
        _MODEL_ARGUMENTS[key] = cls
    return _MODEL_ARGUMENTS[key]


ModelArguments = model_arguments_class()  # the built-in families' (the parser builds its own: a plugin's fields)


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
        "recompute the prepared features even when the cache holds them (and replace them)", default=False
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
    num_beams: int | None = _help("beams at evaluation/prediction (also saved as the model's default)", default=None)
    preprocessing_num_workers: int | None = _help("processes for the feature preparation", default=None)
    source_tagger: str | None = _help(
        f"POS tagger of the source (families with tags): {tagger_help()} (xlpe-tagger train)",
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
    average_last_checkpoints: int = _help("average the last N checkpoints into the final model (papers: 5)", default=0)
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


def builtin_recipe(model_args: ModelArguments) -> dict:
    """Defaults for the built-in corpus: a small model that learns the SVO -> SOV reordering in a few CPU
    minutes. Model-size entries apply only to a model trained from scratch."""
    recipe = dict(
        source_lang="en",
        target_lang="sov",
        num_beams=4,
        max_source_length=64,
        max_target_length=64,
        learning_rate=2e-3,
        warmup_steps=100,
        max_steps=800,
        per_device_train_batch_size=64,
        per_device_eval_batch_size=100,
        weight_decay=0.0,
        logging_steps=50,
        save_steps=400,
        save_total_limit=2,
        eval_strategy="no",
        tokenizer_model="bpe",
        tokenizer_vocab_size=1000,
        lr_scheduler_type="linear",
    )
    if model_args.model_name_or_path is None and model_args.config_name is None:
        recipe.update(d_model=128, encoder_layers=2, decoder_layers=2, attention_heads=4, ffn_dim=256, dropout=0.1)
    return recipe


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


# ---------------------------------------------------------------------------------------------------------
# Parsing: command line, JSON arguments file
# ---------------------------------------------------------------------------------------------------------


def check_flags_against_config_overrides(model_args, explicit: set[str]) -> None:
    """UsageError when an explicit flag and a `--config_overrides` key set one config field to different values
    (`--xl_strategy head --config_overrides xl_strategy=combination`: the override would win without a word); the
    same value twice is fine. The flags: the families' fields, the size flags and --init_std."""
    from .model_setup import SIZE_FIELDS, parse_config_overrides

    overrides = parse_config_overrides(model_args.config_overrides)
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


def explicit_keys(argv: list[str], given: dict | None) -> set[str]:
    """Argument names given explicitly: the JSON file's keys, or the `--flags` of the command line (`--no_x`
    and `--x-y` spellings count as `x` and `x_y`)."""
    if given is not None:
        return set(given)
    return {a[2:].split("=")[0].replace("-", "_").removeprefix("no_") for a in argv if a.startswith("--")}


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


def read_arguments_file(path: Path) -> dict:
    """`xlpe-train args.json`: a JSON object of argument names and values of the arguments' types; a damaged file,
    an unknown name or a value of another type is a UsageError naming the file and line."""
    import typing

    try:
        text = path.read_text(encoding="utf-8")
        given = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"{path}:{error.lineno}: not valid JSON ({error.msg})") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"{path}: cannot be read ({type(error).__name__})") from None
    if not isinstance(given, dict):
        raise UsageError(
            f"{path}: the arguments file must hold a JSON object of argument names and values, "
            f"got {type(given).__name__}"
        )
    from .reuse import key_line

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


def parse_arguments(
    argv: list[str] | None = None,
    recipe: str | None = None,
    with_validation: bool = True,
    train_pairs: int | None = None,
):
    """(model_args, data_args, training_args) from the command line or one JSON file, with the built-in
    corpus' recipe and the named recipe (`--recipe`, or `recipe` chosen by the caller) filling what was not
    given explicitly; `with_validation=False` leaves out a recipe's periodic evaluation and early stopping;
    `train_pairs` (the training set's size, when known) sizes the `small` recipe to the data (epochs, dropout).
    Every inconsistency is a `UsageError`."""
    try:
        return _parse_arguments(argv, recipe, with_validation, train_pairs)
    except UsageError:
        raise
    except ValueError as error:
        raise UsageError(str(error)) from error


def _parse_arguments(
    argv: list[str] | None = None,
    recipe: str | None = None,
    with_validation: bool = True,
    train_pairs: int | None = None,
):
    parser = HfArgumentParser((model_arguments_class(), DataTrainingArguments, XLPETrainingArguments))
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 1 and argv[0].endswith(".json"):
        given = read_arguments_file(Path(argv[0]))
    else:
        given = None
    explicit = explicit_keys(argv, given)

    def parse(extra: dict):
        if given is not None:
            return parser.parse_dict({**extra, **given})
        flags = [item for key, value in extra.items() for item in (f"--{key}", str(value))]
        try:
            return parser.parse_args_into_dataclasses(args=flags + argv)
        except ValueError as error:  # unknown flags: the closest known ones ("did you mean")
            _, marker, unused = str(error).partition("not used by the HfArgumentParser: ")
            if not marker:
                raise
            raise UsageError(unknown_flags_message(ast.literal_eval(unused), parser._option_string_actions)) from None

    model_args, data_args, training_args = parse({})
    check_flags_against_config_overrides(model_args, explicit)
    check_data_sources(data_args)
    for name in ("source_lang", "target_lang"):  # `french` or `ffr` would pick tokenizers by a wrong code
        check_language_code(getattr(data_args, name), f"--{name}")
    defaults = (
        {"dataset_name": BUILTIN_DATASET, **builtin_recipe(model_args)} if data_args.uses_builtin_corpus() else {}
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
        model_args, data_args, training_args = parse(defaults)
    training_args.cuda_defaults = {"device": device, **fast}  # printed and stored by run.py
    check_batching(training_args, explicit)
    if data_args.prepared_dataset:  # raw data flags refused; its saved tokenizer and languages filled in
        from .data import use_prepared_dataset
        from .reuse import check_prepared_dataset

        check_prepared_dataset(data_args.prepared_dataset)  # whole: JSON files parse, Arrow files read to the end
        use_prepared_dataset(data_args, model_args)
    stages = ("do_train", "do_eval", "do_predict")
    training_args.explicit_do = {k for k in stages if k in explicit}
    data_args.explicit_lengths = {k for k in ("max_source_length", "max_target_length") if k in explicit}
    if not any(getattr(training_args, k) for k in training_args.explicit_do):  # none asked for, some switched off:
        for stage in set(stages) - training_args.explicit_do:  # the others run (`--do_eval false`: train + test)
            setattr(training_args, stage, True)  # (an eval_strategy alone turns do_eval on: not a choice of stages)
        if not any(getattr(training_args, k) for k in stages):
            raise UsageError("--do_train, --do_eval and --do_predict are all false: nothing to do")
    check_numbers(data_args, training_args)
    # generation settings of evaluations run *during* training (eval_strategy steps/epoch): an explicit
    # --val_max_target_length / --generation_max_length caps every sentence; without one, the length rule gives
    # each sentence its own budget (xlpe/models/length_rule.py; trainer.py)
    if training_args.generation_max_length is None:
        training_args.generation_max_length = data_args.val_max_target_length
    if training_args.generation_num_beams is None:
        training_args.generation_num_beams = data_args.num_beams
    fit_recipe_to_explicit(training_args, explicit)
    if training_args.average_last_checkpoints and training_args.do_train:
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
        if training_args.eval_strategy == "no" and training_args.do_train:
            raise ValueError(
                f"--early_stopping_patience {training_args.early_stopping_patience} needs periodic "
                "evaluation: --eval_strategy steps --eval_steps N (got --eval_strategy no)"
            )
    if training_args.predict_with_generate and (training_args.do_eval or training_args.do_predict):
        # the tokenizer BLEU will need, resolved and tried now, not after hours of training (ja-mecab needs mecab)
        data_args.bleu_tokenize = check_bleu_tokenizer(data_args.target_lang, data_args.bleu_tokenize)
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
    return model_args, data_args, training_args

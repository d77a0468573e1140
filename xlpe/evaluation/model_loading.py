"""A saved translation model and its tokenizer, loaded for use (`xlpe-translate`, `xlpe-evaluate`) and checked
to belong together before a sentence goes through them.

A model directory is an artefact reused by every later command, and its tokenizer is the part most easily
swapped (a `tokenizer.json` copied from another run, a Hub tokenizer saved over the model's): token ids then mean
other pieces, and the model translates fluent garbage without a word. `xlpe-train` records the tokenizer it
trained with in the config (`record_tokenizer_fingerprint`), and `check_model_tokenizer` refuses a loaded pair

* whose tokenizer is not the recorded one (either fingerprint): `--ignore_tokenizer_mismatch` overrides it;
* whose tokenizer has more tokens than the model's `vocab_size` (ids past the embeddings), or pads on the left
  (these models count positions from the first slot): always refused.

A config without a fingerprint (a model saved by an older version, a stock checkpoint) is not checked.

**The fingerprint means "the same ids from the same text".** Version 2 (`tokenizer_fingerprint_version: 2`,
written by `record_tokenizer_fingerprint` from 2026-11-28 on) hashes the whole definition of how text becomes ids
(`tokenizer_definition`): the backend tokenizer's normaliser, pre-tokeniser, model (vocabulary, merges or
Unigram scores), post-processor (Marian's appended `</s>`) and added tokens, parsed from `to_str()` and written as
canonical JSON (so a re-saved file with other formatting or key order has the same fingerprint), plus the
special tokens with their ids, the padding side and the truncation side. Left out: the decoder (it turns ids back
into text and changes no id; an export digests the tokenizer files in full, so there it is covered too), the
backend's `padding`/`truncation` (settings a call leaves behind, replaced by the two sides) and `model_max_length`
(replaced by the model's position limit at load). A slow (Python) tokenizer contributes its class, vocabulary,
added tokens, sentencepiece models and case/prefix options. The config also records one short digest per part
(`tokenizer_fingerprint_parts`), so a mismatch names what differs ("post_processor differs"). Version 1 (no
version field: models saved before) hashed only the piece <-> id table and the pad/EOS ids
(`xlpe.features.predicted_reordering.tokenizer_fingerprint`, still the one a standalone reorderer records in
`reorderer_config`); such a record is checked by version 1's rule, so models saved then still load.

`load_model(name, trust_remote_code=True)` runs the folder's (or Hub repository's) own code, named by its
`config.auto_map`, even though this package registers classes for the same `model_type`: transformers prefers
registered classes over remote code, so the class is fetched with `get_class_from_dynamic_module` and loaded
directly. Without the flag the installed package's classes load the weights.

**Loading is all-or-nothing** (`load_whole`, which every command that loads a model goes through): a model is
used only when every tensor its config builds comes from the weights and every tensor of the weights is used, at
the shape the config gives it. Refused (`WeightsConfigMismatch`, one line naming the folder, what disagrees, the
first keys and their count, and what to do): tensors the config builds that the weights lack (transformers would
initialise them at random: `encoder_layers: 3` over 2-layer weights), tensors of the weights the config does not
build (transformers would drop them: `encoder_layers: 1` over 2-layer weights, an attached reorderer that
`reorderer_config` does not name), and tensors of another shape (`ignore_mismatched_sizes` stays False; the
shapes are named). What the model class leaves out by design is no disagreement: the tensors transformers skips
by the class's `_keys_to_ignore_on_load_missing` / `_keys_to_ignore_on_load_unexpected` (Marian's sinusoid
tables, rebuilt at load and never saved) and tied weights (one tensor saved once). Upgrading a stock checkpoint
(`HubModelMixin.stock_model_types`, e.g. MarianMT to XL PE) builds the family's new parts from scratch by design:
there, only a tensor the stock architecture has is required of the weights. The layout fields of any config, a
stock one too, are checked first (`xlpe.models.config_checks.check_layout_fields`). The parameters the class
builds frozen (the sinusoid tables) stay frozen, as in the model built from its config: a resumed run's
optimiser holds the same parameters.

Errors are `ModelLoadError` (a ValueError): one line naming the model, the file and the difference.
"""

from __future__ import annotations

import hashlib
import json
import re
from contextlib import contextmanager
from pathlib import Path

FINGERPRINT_FIELD = "tokenizer_fingerprint"
VERSION_FIELD = "tokenizer_fingerprint_version"
PARTS_FIELD = "tokenizer_fingerprint_parts"
FINGERPRINT_VERSION = 2
OVERRIDE_FLAG = "--ignore_tokenizer_mismatch"
BACKEND_PARTS = ("normalizer", "pre_tokenizer", "model", "post_processor", "added_tokens")  # not "decoder"
SLOW_OPTIONS = ("do_lower_case", "strip_accents", "tokenize_chinese_chars", "add_prefix_space", "legacy")
SLOW_OPTIONS += ("add_bos_token", "add_eos_token", "separate_vocabs", "source_lang", "target_lang")
LITERAL_PARTS = ("split_special_tokens", "padding_side", "truncation_side")  # recorded as themselves


def vocabulary_fingerprint(tokenizer) -> str:
    """The version-1 fingerprint (`xlpe.features.predicted_reordering.tokenizer_fingerprint`), imported on use: that
    module needs torch, and this one is imported where only onnxruntime is installed (`xlpe.export.runtime`)."""
    from ..features.predicted_reordering import tokenizer_fingerprint

    return tokenizer_fingerprint(tokenizer)


class ModelLoadError(ValueError):
    """A model and tokenizer that cannot be used together, or a model that cannot be found: one line."""


class WeightsConfigMismatch(ModelLoadError):
    """A model folder whose config.json and weights disagree (`load_whole`): one line."""


# ---------------------------------------------------------------------------------------------------------
# The tokenizer fingerprint (version 2: the whole definition of text -> ids; module docstring)
# ---------------------------------------------------------------------------------------------------------


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def tokenizer_definition(tokenizer) -> dict:
    """Everything that decides which ids `tokenizer` gives a text, part by part (JSON values; module docstring)."""
    parts = {}
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = json.loads(backend.to_str())
        parts.update({name: state.get(name) for name in BACKEND_PARTS})
    else:  # a slow tokenizer: its code (class), table, added tokens, sentencepiece models, options
        parts["model"] = {
            "class": type(tokenizer).__name__,
            "vocab": sorted(tokenizer.get_vocab().items(), key=lambda item: (item[1], item[0])),
            "sentencepiece": {
                name: hashlib.sha256(value.serialized_model_proto()).hexdigest()
                for name, value in sorted(vars(tokenizer).items())
                if callable(getattr(value, "serialized_model_proto", None))
            },
            "options": {
                name: tokenizer.init_kwargs[name]
                for name in SLOW_OPTIONS
                if tokenizer.init_kwargs.get(name) is not None
            },
        }
        parts["added_tokens"] = [
            [index, str(token), *(getattr(token, flag, None) for flag in ("special", "lstrip", "rstrip", "normalized"))]
            for index, token in sorted(getattr(tokenizer, "added_tokens_decoder", {}).items())
        ]
    special = {}
    for name, value in sorted(getattr(tokenizer, "special_tokens_map", {}).items()):
        tokens = [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
        special[name] = [[token, tokenizer.convert_tokens_to_ids(token)] for token in tokens]
    parts["special_tokens"] = special
    parts["split_special_tokens"] = bool(getattr(tokenizer, "split_special_tokens", False))
    parts["padding_side"] = getattr(tokenizer, "padding_side", "right")
    parts["truncation_side"] = getattr(tokenizer, "truncation_side", "right")
    return parts


def tokenizer_fingerprint_parts(tokenizer) -> dict:
    """One short digest per part of `tokenizer_definition` (`LITERAL_PARTS` as themselves, to be named)."""
    return {
        name: value if name in LITERAL_PARTS else hashlib.sha256(_canonical(value).encode()).hexdigest()[:12]
        for name, value in tokenizer_definition(tokenizer).items()
    }


def fingerprint_of_parts(parts: dict) -> str:
    return hashlib.sha256(_canonical(parts).encode()).hexdigest()[:16]


def tokenizer_fingerprint(tokenizer) -> str:
    """The version-2 fingerprint of `tokenizer`: equal iff every part of `tokenizer_definition` is."""
    return fingerprint_of_parts(tokenizer_fingerprint_parts(tokenizer))


def differing_parts(recorded: dict | None, actual: dict) -> str:
    """'post_processor differs, padding_side is 'left' (recorded 'right')' for two `tokenizer_fingerprint_parts`;
    '' when `recorded` names no part (an incomplete record)."""
    if not isinstance(recorded, dict):
        return ""
    said = []
    for name in sorted(set(recorded) | set(actual)):
        before, after = recorded.get(name), actual.get(name)
        if before == after:
            continue
        if name in LITERAL_PARTS:
            said.append(f"{name} is {after!r} (recorded {before!r})")
        else:
            said.append(f"{name} differs")
    return ", ".join(said)


def record_tokenizer_fingerprint(config, tokenizer) -> str:
    """Record `tokenizer` in `config` (saved with the model) so that a later load can check it: the version-2
    fingerprint, its version and its parts (module docstring); returns the fingerprint."""
    parts = tokenizer_fingerprint_parts(tokenizer)
    fingerprint = fingerprint_of_parts(parts)
    setattr(config, FINGERPRINT_FIELD, fingerprint)
    setattr(config, VERSION_FIELD, FINGERPRINT_VERSION)
    setattr(config, PARTS_FIELD, parts)
    return fingerprint


def check_padding_side(tokenizer, name: str) -> None:
    """ModelLoadError when `tokenizer` pads on the left: these models count positions from the first slot (every
    loader of a model or an export calls this one check)."""
    if getattr(tokenizer, "padding_side", "right") != "right":
        raise ModelLoadError(
            f"{name}: the tokenizer pads on the {tokenizer.padding_side} (padding_side="
            f"{tokenizer.padding_side!r} in tokenizer_config.json); these models take right-padded inputs: set it "
            "to 'right'"
        )


def _field(config, name: str):
    return config.get(name) if isinstance(config, dict) else getattr(config, name, None)


def _recorded_fingerprints(config) -> list[tuple[str, str, int, dict | None]]:
    """(where, fingerprint, version, parts) for every tokenizer record in `config`: its own (version 1 when it
    records no version) and an attached reorderer's (version 1, `xlpe-reorder train`'s)."""
    found = []
    own = _field(config, FINGERPRINT_FIELD)
    if isinstance(own, str) and own:
        version = _field(config, VERSION_FIELD) or 1
        found.append(("config.json tokenizer_fingerprint", own, version, _field(config, PARTS_FIELD)))
    reorderer = _field(config, "reorderer_config")
    if isinstance(reorderer, dict) and isinstance(reorderer.get(FINGERPRINT_FIELD), str):
        found.append(("config.json reorderer_config.tokenizer_fingerprint", reorderer[FINGERPRINT_FIELD], 1, None))
    return found


def check_model_tokenizer(config, tokenizer, name: str, ignore_mismatch: bool = False) -> None:
    """ModelLoadError when `tokenizer` cannot feed the model of `config` (a config, its dict, or a model; module
    docstring); `name` names the model."""
    config = getattr(config, "config", config)
    vocab_size = _field(config, "vocab_size")
    if vocab_size is not None and len(tokenizer) > vocab_size:
        raise ModelLoadError(
            f"{name}: the tokenizer has {len(tokenizer)} tokens but the model's vocab_size is "
            f"{vocab_size}: it is not the model's tokenizer (ids >= {vocab_size} have no embedding)"
        )
    check_padding_side(tokenizer, name)
    if ignore_mismatch:
        return
    for where, expected, version, parts in _recorded_fingerprints(config):
        if version not in (1, FINGERPRINT_VERSION):
            raise ModelLoadError(
                f"{name}: {where} is of version {version!r} ({VERSION_FIELD}), this xlpe knows versions 1 and "
                f"{FINGERPRINT_VERSION}: upgrade xlpe, or pass {OVERRIDE_FLAG}"
            )
        actual_parts = tokenizer_fingerprint_parts(tokenizer) if version == FINGERPRINT_VERSION else None
        actual = fingerprint_of_parts(actual_parts) if actual_parts else vocabulary_fingerprint(tokenizer)
        if expected != actual:
            what = differing_parts(parts, actual_parts) if actual_parts else ""
            raise ModelLoadError(
                f"{name}: the tokenizer is not the one the model was trained with"
                + (f": {what}" if what else "")
                + f" ({where} {expected}, the tokenizer loaded has {actual}); restore the model's tokenizer "
                f"files or pass {OVERRIDE_FLAG}"
            )


def _is_local(name: str) -> bool:
    return Path(name).expanduser().is_dir()


# ---------------------------------------------------------------------------------------------------------
# The load rule: config.json and the weights agree, or nothing is loaded (module docstring)
# ---------------------------------------------------------------------------------------------------------

SHOWN_KEYS = 3  # keys a refusal names (then the count)
_LAYER_KEY = re.compile(r"(?:^|\.)(encoder|decoder)\.layers\.(\d+)\.")


@contextmanager
def _without_load_report():
    """transformers' LOAD REPORT table (a logged warning) and its "Loading weights" bar left out while
    `load_whole` loads: whatever the table would list, the refusal says in one line, the only one on stderr."""
    from transformers.utils import logging as hf_logging

    report_logger = hf_logging.get_logger("transformers.modeling_utils")

    def keep(record) -> bool:
        return "LOAD REPORT" not in record.getMessage()

    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    report_logger.addFilter(keep)
    try:
        yield
    finally:
        report_logger.removeFilter(keep)
        if bars_were_on:
            hf_logging.enable_progress_bar()


def _keys(keys) -> str:
    keys = sorted(keys)
    more = f", ... ({len(keys)} in all)" if len(keys) > SHOWN_KEYS else ""
    return ", ".join(keys[:SHOWN_KEYS]) + more


def _shape(shape) -> str:
    return "x".join(map(str, shape))


def _layer_hints(config_dict: dict, missing, unexpected) -> list[str]:
    """'config.json has encoder_layers 1, the weights hold 2 encoder layers' for layer tensors that disagree."""
    hints = []
    for side in ("encoder", "decoder"):
        extra = {int(m[2]) for key in unexpected if (m := _LAYER_KEY.search(key)) and m[1] == side}
        lacking = {int(m[2]) for key in missing if (m := _LAYER_KEY.search(key)) and m[1] == side}
        held = max(extra) + 1 if extra else min(lacking) if lacking else None
        field = f"{side}_layers"
        if held is not None and config_dict.get(field) is not None and config_dict[field] != held:
            hints.append(f"config.json has {field} {config_dict[field]}, the weights hold {held} {side} layers")
    return hints


def weights_disagreement(name: str, config_dict: dict, info: dict, required=None) -> str | None:
    """The one-line refusal for a load whose `info` (from_pretrained's `output_loading_info`) lists tensors that
    the weights lack (of `required` only, when given: a stock upgrade), tensors of the weights the config does not
    build, or tensors of another shape; None when the config and the weights agree."""
    missing = set(info.get("missing_keys") or ())
    if required is not None:
        missing &= set(required)
    unexpected = set(info.get("unexpected_keys") or ())
    mismatched = sorted(info.get("mismatched_keys") or (), key=lambda item: item[0])
    if not (missing or unexpected or mismatched):
        return None
    said = _layer_hints(config_dict, missing, unexpected)
    if any(".reorderer." in f".{key}" for key in unexpected) and not config_dict.get("reorderer_config"):
        said.append("the weights hold an attached reorderer that config.json does not name (no reorderer_config)")
    if mismatched:
        shapes = ", ".join(
            f"{key} {_shape(weights)} in the weights but {_shape(built)} by config.json"
            for key, weights, built in mismatched[:SHOWN_KEYS]
        )
        more = f", ... ({len(mismatched)} in all)" if len(mismatched) > SHOWN_KEYS else ""
        said.append(f"{len(mismatched)} tensors have other shapes ({shapes}{more})")
    if missing:
        said.append(f"the weights lack {len(missing)} tensors config.json builds ({_keys(missing)})")
    if unexpected:
        said.append(f"config.json does not build {len(unexpected)} tensors of the weights ({_keys(unexpected)})")
    return (
        f"{name}: config.json and the weights disagree: {'; '.join(said)}. Refused rather than run with "
        "weights dropped or made up: put back the config.json saved with these weights (or the weights saved "
        "with it), or save the model again"
    )


def _stock_keys(model_class, config_dict: dict) -> set[str] | None:
    """The tensor names of the stock architecture that `model_class` upgrades from `config_dict` (None: not a
    stock upgrade): the parts the weights must hold; the family's new parts start from scratch by design."""
    own_type = getattr(getattr(model_class, "config_class", None), "model_type", None)
    stock_type = config_dict.get("model_type")
    if stock_type == own_type or stock_type not in getattr(model_class, "stock_model_types", ()):
        return None
    import torch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    fields = {key: value for key, value in config_dict.items() if key not in ("model_type", "auto_map")}
    with torch.device("meta"):
        stock = AutoModelForSeq2SeqLM.from_config(AutoConfig.for_model(stock_type, **fields))
    return set(stock.state_dict())


def load_whole(model_class, name, **kwargs):
    """`model_class.from_pretrained(name, **kwargs)` (a model class or an Auto class), refused with a one-line
    `WeightsConfigMismatch` unless config.json and the weights agree (module docstring: the load rule). The
    layout fields are checked first (`check_layout_fields`); `ignore_mismatched_sizes` is always False."""
    from transformers import PretrainedConfig

    from ..models import register_with_transformers

    register_with_transformers()  # the xlpe families, with the Auto classes
    from ..models.config_checks import check_layout_fields

    hub = {key: kwargs[key] for key in ("cache_dir", "revision", "token", "subfolder") if kwargs.get(key)}
    config_dict, _ = PretrainedConfig.get_config_dict(name, **hub)
    check_layout_fields(config_dict)
    kwargs = {
        key: value for key, value in kwargs.items() if key not in ("output_loading_info", "ignore_mismatched_sizes")
    }
    with _without_load_report():
        try:
            model, info = model_class.from_pretrained(name, output_loading_info=True, **kwargs)
        except RuntimeError as error:  # tensors of another shape: transformers refuses them, the report names them
            if "ignore_mismatched_sizes" not in str(error):
                raise
            model = None
            _, info = model_class.from_pretrained(  # (only to name the tensors; this model is dropped)
                name, output_loading_info=True, ignore_mismatched_sizes=True, **kwargs
            )
    refusal = weights_disagreement(str(name), config_dict, info, _stock_keys(model_class, config_dict))
    if refusal or model is None:
        raise WeightsConfigMismatch(refusal or f"{name}: config.json and the weights disagree on tensor shapes")
    return _frozen_as_built(model)


def _frozen_as_built(model):
    """`model` with the parameters its class builds frozen (`requires_grad=False`: Marian's sinusoid tables,
    never saved) frozen again: transformers makes the tensors a checkpoint does not hold anew, trainable, so a
    loaded model would otherwise train (and give its optimiser) other parameters than the same model built."""
    import copy

    import torch

    with torch.device("meta"):
        built = type(model)(copy.deepcopy(model.config))
    frozen = {name for name, parameter in built.named_parameters() if not parameter.requires_grad}
    for name, parameter in model.named_parameters():
        if name in frozen:
            parameter.requires_grad_(False)
    return model


def load_model(name: str, trust_remote_code: bool = False):
    """The seq2seq model of `name` (a directory or Hub id), in eval mode, loaded whole (`load_whole`); with
    `trust_remote_code`, of the code its `config.auto_map` names (module docstring)."""
    from transformers import AutoModelForSeq2SeqLM, PretrainedConfig

    from ..models import register_with_transformers

    register_with_transformers()  # the xlpe families, with the Auto classes

    if trust_remote_code:
        config_dict, _ = PretrainedConfig.get_config_dict(name)
        reference = (config_dict.get("auto_map") or {}).get("AutoModelForSeq2SeqLM")
        if reference:
            from transformers.dynamic_module_utils import get_class_from_dynamic_module
            from transformers.models.auto.auto_factory import add_generation_mixin_to_remote_model

            model_class = add_generation_mixin_to_remote_model(get_class_from_dynamic_module(reference, name))
            return load_whole(model_class, name, trust_remote_code=True).eval()
    return load_whole(AutoModelForSeq2SeqLM, name, trust_remote_code=trust_remote_code).eval()


def _configuration_error(name: str, error: Exception) -> ModelLoadError | None:
    """A one-line ModelLoadError for a configuration that cannot build a model or tokenizer (a hand-edited
    `config.json`: a negative width, a string where a number belongs, a value the family refuses), else None."""
    if isinstance(error, ModelLoadError) or not (
        isinstance(error, (TypeError, RuntimeError, ValueError, AttributeError))
        or type(error).__name__ == "StrictDataclassFieldValidationError"  # huggingface_hub: a field of the wrong type
    ):
        return None
    where = str(Path(name).expanduser() / "config.json") if _is_local(name) else f"{name} (config.json)"
    reason = " ".join(str(error).split()) or type(error).__name__
    return ModelLoadError(
        f"{where}: no model can be built from this configuration ({type(error).__name__}: {reason[:200]})"
    )


def load_model_and_tokenizer(name: str, trust_remote_code: bool = False, ignore_tokenizer_mismatch: bool = False):
    """(model, tokenizer) of `name`, checked by `check_model_tokenizer` before the weights are loaded; the
    tokenizer's `model_max_length` is the model's `max_position_embeddings` (the limit the model has). A name that
    is no local directory and that the Hub cannot serve is a one-line ModelLoadError saying both (not the Hub
    client's connection advice)."""
    from transformers import AutoTokenizer, PretrainedConfig

    from ..features.tokenization import check_tokenizer_files

    try:  # a damaged tokenizer.json: its file and line (transformers names neither, or blames config.json)
        check_tokenizer_files(name, name)
    except ValueError as error:
        raise ModelLoadError(str(error)) from None
    try:
        config_dict, _ = PretrainedConfig.get_config_dict(name)
        try:
            tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
            check_model_tokenizer(config_dict, tokenizer, name, ignore_tokenizer_mismatch)
            model = load_model(name, trust_remote_code)
        except Exception as error:
            converted = _configuration_error(name, error)
            if converted is None:
                raise
            raise converted from None
    except OSError as error:
        if _is_local(name):
            raise
        reason = " ".join(str(error).split())
        raise ModelLoadError(
            f"{name}: no such local directory, and no model of that name could be loaded from the Hub ({reason[:160]})"
        ) from None
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit:  # the model's position limit, not a tokenizer's other model_max_length (xlpe.models.length_rule)
        from ..models.length_rule import align_tokenizer_limit

        align_tokenizer_limit(tokenizer, int(limit))
    return model, tokenizer


__all__ = [
    "FINGERPRINT_FIELD",
    "FINGERPRINT_VERSION",
    "ModelLoadError",
    "OVERRIDE_FLAG",
    "WeightsConfigMismatch",
    "PARTS_FIELD",
    "VERSION_FIELD",
    "check_model_tokenizer",
    "check_padding_side",
    "differing_parts",
    "fingerprint_of_parts",
    "load_model",
    "load_model_and_tokenizer",
    "load_whole",
    "record_tokenizer_fingerprint",
    "tokenizer_definition",
    "tokenizer_fingerprint",
    "tokenizer_fingerprint_parts",
    "weights_disagreement",
]

"""A saved translation model and its tokenizer, loaded for use (`xlpe-translate`, `xlpe-evaluate`) and checked
to belong together before a sentence goes through them.

A model directory is an artefact reused by every later command, and its tokenizer is the part most easily
swapped (a `tokenizer.json` copied from another run, a Hub tokenizer saved over the model's): token ids then mean
other pieces, and the model translates fluent garbage without a word. `xlpe-train` records the tokenizer it
trained with in the config (`config.tokenizer_fingerprint`, `record_tokenizer_fingerprint`: the hash of the
piece <-> id table and the pad/EOS ids, the one an attached reorderer records in `reorderer_config`), and
`check_model_tokenizer` refuses a loaded pair

* whose tokenizer is not the recorded one (either fingerprint): `--ignore_tokenizer_mismatch` overrides it;
* whose tokenizer has more tokens than the model's `vocab_size` (ids past the embeddings), or pads on the left
  (these models count positions from the first slot): always refused.

A config without a fingerprint (a model saved by an older version, a stock checkpoint) is not checked.

`load_model(name, trust_remote_code=True)` runs the folder's (or Hub repository's) own code, named by its
`config.auto_map`, even though this package registers classes for the same `model_type`: transformers prefers
registered classes over remote code, so the class is fetched with `get_class_from_dynamic_module` and loaded
directly. Without the flag the installed package's classes load the weights.

Errors are `ModelLoadError` (a ValueError): one line naming the model, the file and the difference.
"""

from __future__ import annotations

from pathlib import Path

from ..features.predicted_reordering import tokenizer_fingerprint

FINGERPRINT_FIELD = "tokenizer_fingerprint"
OVERRIDE_FLAG = "--ignore_tokenizer_mismatch"


class ModelLoadError(ValueError):
    """A model and tokenizer that cannot be used together, or a model that cannot be found: one line."""


def record_tokenizer_fingerprint(config, tokenizer) -> str:
    """Record `tokenizer` in `config` (saved with the model) so that a later load can check it; returns it."""
    fingerprint = tokenizer_fingerprint(tokenizer)
    setattr(config, FINGERPRINT_FIELD, fingerprint)
    return fingerprint


def _field(config, name: str):
    return config.get(name) if isinstance(config, dict) else getattr(config, name, None)


def _recorded_fingerprints(config) -> list[tuple[str, str]]:
    """(where, fingerprint) for every tokenizer record in `config`: its own and an attached reorderer's."""
    found = []
    own = _field(config, FINGERPRINT_FIELD)
    if isinstance(own, str) and own:
        found.append(("config.json tokenizer_fingerprint", own))
    reorderer = _field(config, "reorderer_config")
    if isinstance(reorderer, dict) and isinstance(reorderer.get(FINGERPRINT_FIELD), str):
        found.append(("config.json reorderer_config.tokenizer_fingerprint", reorderer[FINGERPRINT_FIELD]))
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
    if getattr(tokenizer, "padding_side", "right") == "left":
        raise ModelLoadError(
            f"{name}: the tokenizer pads on the left (padding_side='left' in tokenizer_config.json); "
            "these models take right-padded inputs: set it to 'right'"
        )
    actual = tokenizer_fingerprint(tokenizer)
    for where, expected in _recorded_fingerprints(config):
        if expected != actual and not ignore_mismatch:
            raise ModelLoadError(
                f"{name}: the tokenizer is not the one the model was trained with ({where} "
                f"{expected}, the tokenizer loaded has {actual}); restore the model's tokenizer "
                f"files or pass {OVERRIDE_FLAG}"
            )


def _is_local(name: str) -> bool:
    return Path(name).expanduser().is_dir()


def load_model(name: str, trust_remote_code: bool = False):
    """The seq2seq model of `name` (a directory or Hub id), in eval mode; with `trust_remote_code`, of the code
    its `config.auto_map` names (module docstring)."""
    from transformers import AutoModelForSeq2SeqLM, PretrainedConfig

    from .. import models  # noqa: F401  (registers the xlpe families with the Auto classes)

    if trust_remote_code:
        config_dict, _ = PretrainedConfig.get_config_dict(name)
        reference = (config_dict.get("auto_map") or {}).get("AutoModelForSeq2SeqLM")
        if reference:
            from transformers.dynamic_module_utils import get_class_from_dynamic_module
            from transformers.models.auto.auto_factory import add_generation_mixin_to_remote_model

            model_class = add_generation_mixin_to_remote_model(get_class_from_dynamic_module(reference, name))
            return model_class.from_pretrained(name, trust_remote_code=True).eval()
    return AutoModelForSeq2SeqLM.from_pretrained(name, trust_remote_code=trust_remote_code).eval()


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
    "ModelLoadError",
    "OVERRIDE_FLAG",
    "check_model_tokenizer",
    "load_model",
    "load_model_and_tokenizer",
    "record_tokenizer_fingerprint",
]

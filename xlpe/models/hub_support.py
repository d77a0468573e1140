"""`HubModelMixin`: what every family's `<Family>PreTrainedModel` adds to the stock `*PreTrainedModel` it extends.

A family's pre-trained base is `class <Family>PreTrainedModel(HubModelMixin, <Stock>PreTrainedModel)` (a mixin
before the class it extends, as always in Python); its encoder, decoder, base model and generation model derive
from that one class only (the generation model also from `GenerationMixin`), as in transformers' own model files.

* `__init__` validates the config (config_checks.py) before any module is built, whichever way the config was
  built or changed.
* `_init_weights` (seq2seq_scaffold.InitOwnParametersMixin): after the stock initialisation, a module that
  defines `init_own_parameters()` (XL fusion and gate, DPE gate, sinusoid tables) initialises itself, and a
  generation model's `final_logits_bias` starts at zero (what the stock rule does for the stock classes only).
  It runs for every module at `post_init` and for the modules a checkpoint does not cover at `from_pretrained`
  (meta-device loading), so state filled here (e.g. non-persistent sinusoid tables) survives both.
* The translation pipeline's hook `prepare_pipeline_inputs` and the source tagger's file in `save_pretrained`
  (source_tags.SourceTagsPipelineMixin).
* `save_pretrained` writes what `pipeline("translation", model=dir, trust_remote_code=True)` needs: the
  `custom_pipelines` entry in config.json, and (through the relative import below, which
  `custom_object_save` follows) the file `pipeline_translation.py` next to the modeling files.
  `add_translation_pipeline(folder)` writes the same into a saved folder of a *stock* model (plain MarianMT,
  BART, an OPUS-MT checkpoint: no custom model code), so that call works for it too.
* `save_pretrained` leaves the weight files with the permissions of the user's umask: safetensors writes
  them through a private temporary file and renames it, which leaves `model.safetensors` at mode 0600
  (unreadable to the group, e.g. a shared model folder), unlike every other file of the save.
* `from_pretrained` refuses, with a message naming the path and both model types, a checkpoint of another
  model type (another family, or a stock model the family cannot start from, e.g. BART for mvPE+POS).
* `from_pretrained` refuses (ValueError naming the folder) a checkpoint whose config builds a part listed in
  `weights_never_initialised` (XL PE's attached reorderer) that its weights lack, instead of initialising it at
  random: a save cut short between config.json and the weights never translates with a random reorderer.
* `from_pretrained` on a directory (or Hub id) of a *stock* checkpoint of the family's base architecture
  (`stock_model_types`, e.g. "marian") builds this family's config from it, applies `upgrade_overrides`
  (e.g. the XL gate at 0, which makes the new model compute exactly the stock function) and loads every stock
  weight; the new parameters are initialised by `_init_weights`. Any other directory loads as usual.

`XLPEHubMixin`, the old name of `HubModelMixin`, still imports (with a DeprecationWarning) for one release.

Flat file, single-dot imports only, so it travels as Hub custom code.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import torch
from transformers import PreTrainedConfig
from transformers import initialization as hf_init  # also imported from here by the modeling files
from transformers.utils import logging

from .pipeline_translation import TRANSLATION_PIPELINE_ENTRY
from .seq2seq_scaffold import InitOwnParametersMixin
from .source_tags import SourceTagsPipelineMixin

logger = logging.get_logger(__name__)

HUB_KWARGS = ("cache_dir", "force_download", "proxies", "token", "revision", "local_files_only", "subfolder")


def apply_umask_to_weights(directory) -> None:
    """Give the `*.safetensors` files in `directory` that safetensors left owner-only (0600) the mode a
    plain `open()` would have given them under the current umask (0644 for umask 022)."""
    umask = os.umask(0)
    os.umask(umask)
    mode = 0o666 & ~umask
    for path in Path(directory).glob("*.safetensors"):
        if path.is_file() and path.stat().st_mode & 0o777 == 0o600 and mode != 0o600:
            path.chmod(mode)


def _pipeline_code_files() -> list[Path]:
    """`pipeline_translation.py` and the sibling files it imports (`length_rule.py`, `length_limits.py`), as this
    package has them."""
    from transformers.dynamic_module_utils import get_relative_import_files

    module = Path(__file__).with_name("pipeline_translation.py")
    return [module, *sorted(Path(path) for path in get_relative_import_files(str(module)))]


def check_translation_pipeline_folder(folder) -> bool:
    """Can `add_translation_pipeline` write into `folder`? Reads only; returns whether config.json already names
    this package's translation pipeline. ValueError naming the folder: no config.json; a model
    `AutoModelForSeq2SeqLM` does not load (neither a transformers sequence-to-sequence model type nor an `auto_map`
    entry for it); no tokenizer files; another "translation" pipeline in config.json; a code file of that name
    there with other contents (and no translation entry that it belongs to)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ValueError(f"{folder}: no config.json (a folder written by model.save_pretrained is expected)")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    model_type = config.get("model_type")
    if model_type not in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES and "AutoModelForSeq2SeqLM" not in (
        config.get("auto_map") or {}
    ):
        raise ValueError(
            f"{folder}: model_type {model_type!r} is not a sequence-to-sequence model AutoModelForSeq2SeqLM loads "
            "(a transformers seq2seq model type, or an auto_map entry for it): the translation pipeline needs one"
        )
    if not any((folder / name).is_file() for name in ("tokenizer_config.json", "tokenizer.json")):
        raise ValueError(
            f"{folder}: no tokenizer (tokenizer_config.json or tokenizer.json): the pipeline loads it from the "
            "folder; save it there with tokenizer.save_pretrained(folder)"
        )
    held = (config.get("custom_pipelines") or {}).get("translation")
    if held is not None and (not isinstance(held, dict) or held.get("impl") != TRANSLATION_PIPELINE_ENTRY["impl"]):
        raise ValueError(
            f"{folder}: config.json already has another translation pipeline in custom_pipelines ({held!r}); "
            "it is not replaced"
        )
    for source in _pipeline_code_files():
        target = folder / source.name
        if held is None and target.is_file() and target.read_bytes() != source.read_bytes():
            raise ValueError(
                f"{folder}: holds a {source.name} other than this package's; it is not replaced (a folder with "
                "its own code of that name: add the pipeline by hand)"
            )
    return held is not None


def add_translation_pipeline(folder) -> bool:
    """Make the saved seq2seq model in `folder` (config.json, weights, tokenizer) load with
    `pipeline("translation", model=folder, trust_remote_code=True)` also where xlpe is not installed: write the
    pipeline's code files (`pipeline_translation.py` and the siblings it imports) beside the weights and the
    `custom_pipelines["translation"]` entry (`XLPETranslationPipeline` over `AutoModelForSeq2SeqLM`, with the
    length rule) into config.json. Changes `folder` in place (refusals: `check_translation_pipeline_folder`);
    returns False when it already carries both (a family's `save_pretrained` writes them), True when something
    was written. A code file already there is kept."""
    folder = Path(folder)
    named = check_translation_pipeline_folder(folder)
    written = False
    for source in _pipeline_code_files():
        if not (folder / source.name).is_file():
            shutil.copyfile(source, folder / source.name)
            written = True
    if not named:
        config_file = folder / "config.json"
        config = json.loads(config_file.read_text(encoding="utf-8"))
        pipelines = {**(config.get("custom_pipelines") or {}), "translation": dict(TRANSLATION_PIPELINE_ENTRY)}
        temporary = config_file.with_name(f".{config_file.name}.partial")
        temporary.write_text(
            json.dumps({**config, "custom_pipelines": pipelines}, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        os.replace(temporary, config_file)
        written = True
    return written


class HubModelMixin(SourceTagsPipelineMixin, InitOwnParametersMixin):
    """The base, besides the stock `*PreTrainedModel`, of every family's `<Family>PreTrainedModel` (module doc)."""

    stock_model_types: tuple[str, ...] = ()  # model_type values that `from_pretrained` upgrades
    upgrade_overrides: dict = {}  # config fields set when upgrading a stock checkpoint
    weights_never_initialised: tuple[
        str, ...
    ] = ()  # submodule names a checkpoint must hold when the config builds them

    def __init__(self, config, *args, **kwargs):
        config.validate()  # a config changed by attribute assignment since it was built is checked here
        super().__init__(config, *args, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        final_logits_bias = getattr(module, "final_logits_bias", None)
        if isinstance(final_logits_bias, torch.Tensor):  # a generation model's: the stock rule knows only its own
            hf_init.zeros_(final_logits_bias)

    def save_pretrained(self, save_directory, *args, **kwargs):
        self.config.custom_pipelines = {"translation": dict(TRANSLATION_PIPELINE_ENTRY)}
        result = super().save_pretrained(save_directory, *args, **kwargs)
        apply_umask_to_weights(save_directory)
        return result

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, config=None, **kwargs):
        if config is None:
            hub_kwargs = {key: kwargs[key] for key in HUB_KWARGS if key in kwargs}
            config_dict, _ = PreTrainedConfig.get_config_dict(pretrained_model_name_or_path, **hub_kwargs)
            stock_type = config_dict.get("model_type")
            own_type = cls.config_class.model_type
            if stock_type not in (None, own_type, *cls.stock_model_types):
                upgrades = (
                    f"; it upgrades stock {', '.join(map(repr, cls.stock_model_types))} checkpoints"
                    if cls.stock_model_types
                    else " and upgrades no stock checkpoint (no stock model computes a function it can start from)"
                )
                raise ValueError(
                    f"{pretrained_model_name_or_path} holds a {stock_type!r} checkpoint, but {cls.__name__} loads "
                    f"{own_type!r} checkpoints{upgrades}. Load it with its own class (AutoModelForSeq2SeqLM), or "
                    f"build {cls.__name__}({cls.config_class.__name__}(...)) and train it"
                )
            if stock_type in cls.stock_model_types:
                config_kwargs = {key: value for key, value in kwargs.items() if key not in HUB_KWARGS}
                overrides = {key: value for key, value in cls.upgrade_overrides.items() if key not in config_kwargs}
                stock_dict = {
                    key: value
                    for key, value in config_dict.items()
                    if key not in ("model_type", "architectures", "auto_map")
                }
                config, model_kwargs = cls.config_class.from_dict(
                    {**stock_dict, **overrides}, return_unused_kwargs=True, **config_kwargs
                )
                logger.info(
                    f"Upgrading a stock '{stock_type}' checkpoint to {cls.__name__} with {overrides}: "
                    "all stock weights are loaded; new parameters are initialised function-preservingly."
                )
                return cls._loaded_whole(
                    pretrained_model_name_or_path, *model_args, config=config, **hub_kwargs, **model_kwargs
                )
        return cls._loaded_whole(pretrained_model_name_or_path, *model_args, config=config, **kwargs)

    @classmethod
    def _loaded_whole(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """`from_pretrained`, refusing a checkpoint whose config builds a part named in `weights_never_initialised`
        (XL PE's attached reorderer) that its weights do not hold: transformers would initialise it at random (a
        "newly initialized" warning) and the model would translate with it; here it is one ValueError naming the
        folder (a save cut short, or a config.json copied from another model)."""
        wanted = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(
            pretrained_model_name_or_path, *model_args, output_loading_info=True, **kwargs
        )
        missing = [
            key
            for key in info.get("missing_keys", ())
            if any(f".{part}." in f".{key}" for part in cls.weights_never_initialised)
        ]
        if missing:
            parts = sorted(
                {part for part in cls.weights_never_initialised if any(f".{part}." in f".{k}" for k in missing)}
            )
            raise ValueError(
                f"{pretrained_model_name_or_path}: config.json has an attached {' and '.join(parts)} but the "
                f"weights lack {len(missing)} of its tensors (e.g. {sorted(missing)[0]}): an incomplete save (an "
                "attach or save cut short?); refused rather than run with random weights: attach or save it again"
            )
        return (model, info) if wanted else model


def __getattr__(name: str):
    """`XLPEHubMixin`: the old name of `HubModelMixin`, importable for one release (a DeprecationWarning)."""
    if name == "XLPEHubMixin":
        warnings.warn(
            "XLPEHubMixin was renamed HubModelMixin (it serves every family); the old name goes away in the next "
            "release",
            DeprecationWarning,
            stacklevel=2,
        )
        return HubModelMixin
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Tokenizer and model of an `xlpe-train` run: a checkpoint's, an upgraded stock checkpoint, or a model built
from scratch (Transformer-base unless sized by flags), with the family's fields checked by name; the per-token
features the model's `forward` takes (what the preparation must compute); checks that must come before any
training (vocabulary, pad/EOS ids, initialisation options)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging

import torch
import transformers
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer

from ..models import register_with_transformers
from ..models.registry import (
    MODEL_FAMILIES,
    declares_field,
    extra_input_names,
    family_fields,
    family_of_model_type,
    get_family,
)
from .arguments import SIZE_FIELDS

register_with_transformers()  # the xlpe families with the Auto classes (AutoConfig/AutoModel* below read them)

logger = logging.getLogger("xlpe.train")
TRANSFORMER_BASE = dict(d_model=512, encoder_layers=6, decoder_layers=6, attention_heads=8, ffn_dim=2048, dropout=0.1)


# ---------------------------------------------------------------------------------------------------------
# The family's classes, and the config fields the command line sets (its flags, --config_overrides)
# ---------------------------------------------------------------------------------------------------------


def __getattr__(name: str):
    if name == "FAMILY_FIELDS":  # the families' flags, now read off the registry (`ModelFamily.fields`)
        return tuple(family_fields())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def family_classes(model_type: str) -> tuple[type, type]:
    """(config class, generation model class) of `model_type`; "vanilla" is stock MarianMT."""
    if model_type == "vanilla" and "vanilla" not in MODEL_FAMILIES:
        return transformers.MarianConfig, transformers.MarianMTModel
    try:
        family = get_family(model_type)
    except ValueError:
        raise ValueError(
            f"unknown --model_type {model_type!r}; known: {sorted({'vanilla', *MODEL_FAMILIES})}"
        ) from None
    return family.config_class, family.generation_model_class


def family_overrides(model_args, config_class: type, model_type: str, config_overrides: dict | None = None) -> dict:
    """Config fields given on the command line (the registered families' fields and --config_overrides, parsed:
    `config_overrides`, else parsed here), checked by name; a field's `convert` turns the flag's value into the
    config's."""
    fields = family_fields()
    overrides = {name: getattr(model_args, name) for name in fields if getattr(model_args, name, None) is not None}
    if config_overrides is None:
        config_overrides = parse_config_overrides(model_args.config_overrides)
    check_override_types(config_class, config_overrides)
    overrides.update(config_overrides)
    for name, (field, _) in fields.items():
        if name in overrides and field.convert is not None:
            overrides[name] = field.convert(overrides[name])
    for name in overrides:
        if not (declares_field(config_class, name) or hasattr(config_class(), name)):
            raise ValueError(
                f"--{name} does not apply to --model_type {model_type} ({config_class.__name__} has no such field)"
            )
    return overrides


def parse_config_overrides(text: str | None) -> dict:
    """--config_overrides "a=1,b=true,c=text" -> {"a": 1, "b": True, "c": "text"} (JSON values, else strings);
    an item that is not KEY=VALUE is a UsageError naming it."""
    from .errors import UsageError

    overrides = {}
    for item in filter(None, (text or "").split(",")):
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise UsageError(
                f"--config_overrides {text!r}: {item.strip()!r} is not FIELD=VALUE (expected e.g. 'dropout=0.1', "
                "items separated by commas)"
            )
        try:
            overrides[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key.strip()] = value.strip()
    return overrides


def check_override_types(config_class: type, overrides: dict) -> None:
    """UsageError naming the first --config_overrides item whose value is not of its config field's type (the
    strict dataclass's own validators: `encoder_layers=1.0` is a float for an int field)."""
    from .errors import UsageError

    types = {field.name: field.type for field in dataclasses.fields(config_class)}
    for name, value in overrides.items():
        for validator in getattr(config_class, "__validators__", {}).get(name, ()):
            try:
                validator(value)
            except (TypeError, ValueError):
                kind = getattr(types.get(name), "__name__", None) or str(types.get(name))
                raise UsageError(
                    f"--config_overrides {name}={json.dumps(value)}: {name} takes {kind}, got {value!r} "
                    f"({type(value).__name__})"
                ) from None


# ---------------------------------------------------------------------------------------------------------
# The tokenizer and the model: trained or loaded, built, upgraded or resumed (loaded whole)
# ---------------------------------------------------------------------------------------------------------


def default_position_limit(data_args) -> int:
    """`max_position_embeddings` of a model built from scratch: twice the longest length flag + 16 (room for the
    length rule's budget, 1.5 x source + 10, beyond `--max_target_length`); a tokenizer trained here gets it as
    its `model_max_length`."""
    lengths = [data_args.max_source_length, data_args.max_target_length, data_args.val_max_target_length or 0]
    return 2 * max(lengths) + 16


def load_or_train_tokenizer(run, splits, checkpoint):
    """The tokenizer of the run `run` (a `RunConfig`): the checkpoint's, --tokenizer_name's or the model's, else a
    joint one trained on the training split (by the main process; the others load what it saved)."""
    model_args, data_args, training_args = run.groups()
    source = checkpoint or model_args.tokenizer_name or model_args.model_name_or_path
    if source:
        return AutoTokenizer.from_pretrained(
            source,
            cache_dir=model_args.cache_dir,
            revision=model_args.model_revision,
            token=model_args.token,
            trust_remote_code=model_args.trust_remote_code,
        )
    from ..features.tokenization import train_joint_tokenizer

    with training_args.main_process_first(local=False, desc="training the joint tokenizer"):
        if training_args.process_index == 0:  # the others load what it saved
            train = splits["train"]
            logger.info(
                "training a joint %s tokenizer (%d pieces) on %d sentence pairs",
                model_args.tokenizer_model,
                model_args.tokenizer_vocab_size,
                len(train.sources),
            )
            tokenizer = train_joint_tokenizer(
                train.sources + train.targets,
                vocab_size=model_args.tokenizer_vocab_size,
                model=model_args.tokenizer_model,
                model_max_length=default_position_limit(data_args),  # the model's limit (aligned once it is built)
            )
            tokenizer.save_pretrained(training_args.output_dir)
        else:
            tokenizer = AutoTokenizer.from_pretrained(training_args.output_dir)
    return tokenizer


def target_config(model_args, checkpoint):
    """The config (instance, when one exists already) or config class of the model to train."""
    if checkpoint or (model_args.model_name_or_path and not model_args.model_type):
        source = checkpoint or model_args.model_name_or_path
        config = AutoConfig.from_pretrained(
            source,
            cache_dir=model_args.cache_dir,
            revision=model_args.model_revision,
            token=model_args.token,
            trust_remote_code=model_args.trust_remote_code,
        )
        config._name_or_path = str(
            source
        )  # as the model's from_pretrained sets it: where its files (a tagger file) are
        return config
    return family_classes(model_args.model_type or "xlpe")[0]


def check_stock_start(model_args, checkpoint) -> None:
    """`refuse_stock_start` for `--model_name_or_path` with `--model_type`, before anything else is loaded (the
    taggers: a missing tagger must not hide that the family cannot start from that checkpoint)."""
    if checkpoint or not (model_args.model_name_or_path and model_args.model_type):
        return
    if model_args.model_type == "vanilla" and "vanilla" not in MODEL_FAMILIES:
        return
    try:
        _, model_class = family_classes(model_args.model_type)
    except ValueError:  # build_model says so
        return
    hub = dict(cache_dir=model_args.cache_dir, revision=model_args.model_revision, token=model_args.token)
    refuse_stock_start(model_args.model_name_or_path, model_args.model_type, model_class, hub)


def refuse_stock_start(source: str, model_type: str, model_class: type, hub: dict) -> None:
    """UsageError when `source` holds a stock checkpoint (e.g. an OPUS-MT MarianMT model) that `--model_type` cannot
    start from (mvPE+POS: BART with its own positions), naming the families that upgrade it."""
    from transformers import PreTrainedConfig

    from .errors import UsageError

    try:
        config_dict, _ = PreTrainedConfig.get_config_dict(
            source, **{key: hub[key] for key in ("cache_dir", "revision", "token") if hub.get(key) is not None}
        )
    except (OSError, ValueError):  # from_pretrained says what is wrong with it
        return
    stock_type = config_dict.get("model_type")
    if stock_type is None or stock_type == model_class.config_class.model_type:
        return
    if stock_type in getattr(model_class, "stock_model_types", (stock_type,)) or family_of_model_type(stock_type):
        return  # an upgrade, or another family's checkpoint (refused by from_pretrained, naming both types)
    upgrading = sorted(
        name
        for name in MODEL_FAMILIES
        if stock_type in getattr(get_family(name).generation_model_class, "stock_model_types", ())
    )
    hint = f"; --model_type {' or '.join(upgrading)} upgrade it function-preservingly" if upgrading else ""
    raise UsageError(
        f"--model_type {model_type} cannot start from {source}, a stock {stock_type!r} checkpoint: "
        f"{model_class.__name__} upgrades no {stock_type!r} checkpoint (no stock weights compute its position "
        f"encoding){hint}"
    )


def build_model(model_args, data_args, tokenizer, checkpoint, taggers, config=None, config_overrides=None):
    """The model to train: the checkpoint's (resumed), a checkpoint as it is, a stock checkpoint upgraded to a family,
    or one built here. `config`: `target_config`'s answer when the caller has it (not loaded again);
    `config_overrides`: --config_overrides parsed (`RunConfig.config_overrides`)."""
    hub = dict(
        cache_dir=model_args.cache_dir,
        revision=model_args.model_revision,
        token=model_args.token,
        trust_remote_code=model_args.trust_remote_code,
    )
    loaded = config if config is not None and not isinstance(config, type) else None  # (target_config's instance)
    if checkpoint:  # resumed: config and weights of the checkpoint, loaded whole (the Trainer's own load only warns)
        return load_checked(AutoModelForSeq2SeqLM, checkpoint, trust_remote_code=model_args.trust_remote_code)
    model_type = model_args.model_type or ("xlpe" if not model_args.model_name_or_path else None)
    if model_type is None:  # a checkpoint as it is (its own family)
        config_class = type(loaded or AutoConfig.from_pretrained(model_args.model_name_or_path, **hub))
        overrides = family_overrides(model_args, config_class, config_class.model_type, config_overrides)
        return load_checked(AutoModelForSeq2SeqLM, model_args.model_name_or_path, overrides, **hub)
    config_class, model_class = family_classes(model_type)
    overrides = family_overrides(model_args, config_class, model_type, config_overrides)
    overrides.update(tag_vocabulary_fields(config_class, taggers))
    overrides.update(untrainable_decoder_tags(config_class, taggers, overrides))
    if model_args.model_name_or_path:  # e.g. a stock MarianMT checkpoint upgraded to this family
        refuse_stock_start(model_args.model_name_or_path, model_type, model_class, hub)
        return load_checked(model_class, model_args.model_name_or_path, overrides, **hub)
    if model_args.init_std is not None:
        overrides["init_std"] = model_args.init_std
    if model_args.config_name:
        model = model_class(config_class.from_pretrained(model_args.config_name, **overrides, **hub))
    else:
        size = {
            k: getattr(model_args, k) if getattr(model_args, k) is not None else v for k, v in TRANSFORMER_BASE.items()
        }
        config_kwargs = dict(
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.pad_token_id,
            forced_eos_token_id=tokenizer.eos_token_id,
            max_position_embeddings=default_position_limit(data_args),
            # Transformer-style embeddings (Vaswani et al.): N(0, d^-1/2) scaled by sqrt(d). With Marian's defaults
            # (no scaling, std 0.02) the sinusoids swamp the token embeddings and lexical learning crawls. HF's
            # init_std also sets every linear layer's std: see --embedding_init_std (docs/training.md).
            scale_embedding=True,
            init_std=size["d_model"] ** -0.5,
            **{field: size[arg] for arg, fields in SIZE_FIELDS.items() for field in fields},
        )
        config_kwargs.update(overrides)
        model = model_class(config_class(**config_kwargs))
    if model_args.embedding_init_std is not None:
        initialise_token_embeddings(model, model_args.embedding_init_std)
    return model


def load_checked(model_class, source, overrides: dict | None = None, **kwargs):
    """`model_class.from_pretrained(source, **overrides, **kwargs)` by the load rule
    (`xlpe.evaluation.model_loading.load_whole`: config.json and the weights agree, or a UsageError in one line
    that names the config fields the command line set over config.json, `overrides`)."""
    from ..evaluation.model_loading import WeightsConfigMismatch, load_whole
    from .errors import UsageError

    try:
        return load_whole(model_class, source, **(overrides or {}), **kwargs)
    except WeightsConfigMismatch as error:
        given = ", ".join(f"{key}={value!r}" for key, value in (overrides or {}).items())
        raise UsageError(str(error) + (f" (the command line set {given} over config.json)" if given else "")) from None


def check_init_options(model_args, checkpoint) -> None:
    """--init_std / --embedding_init_std initialise a model built here: positive, and not with trained weights."""
    for name in ("init_std", "embedding_init_std"):
        value = getattr(model_args, name)
        if value is None:
            continue
        if not value > 0:
            raise ValueError(f"--{name} must be a positive standard deviation, got {value}")
        source = checkpoint or model_args.model_name_or_path
        if source:
            raise ValueError(
                f"--{name} initialises a model built here; {source} brings trained weights "
                "(drop --model_name_or_path, or use --config_name for its architecture)"
            )


def initialise_token_embeddings(model, std: float) -> None:
    """Token embeddings ~ N(0, std), padding rows zero, leaving every other weight at HF's `init_std`. Tied
    embeddings (encoder, decoder, output projection) are one tensor and are drawn once."""
    tables = {}
    for module in (model.get_input_embeddings(), getattr(model.get_decoder(), "embed_tokens", None)):
        if isinstance(module, torch.nn.Embedding):
            tables[id(module.weight)] = module
    with torch.no_grad():
        for module in tables.values():
            module.weight.normal_(0.0, std)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()


def untrainable_decoder_tags(config_class, taggers, overrides: dict) -> dict:
    """mvPE+POS without a target tagger: its hypothesis tagger has no gold tags to learn from, so decoder tags would
    be an untrained function of the tokens that takes pos_dim of the decoder's width. The default "both" becomes
    "encoder" (warned); "both"/"decoder" asked for explicitly is refused."""
    if not taggers or taggers.get("target") is not None or not declares_field(config_class, "decoder_pos_tags"):
        return {}
    sides = overrides.get("pos_tag_sides", "both")
    if sides not in ("both", "decoder"):
        return {}
    if "pos_tag_sides" in overrides:
        raise ValueError(
            f"pos_tag_sides={sides!r} needs decoder tags to train the hypothesis tagger: give "
            "--target_tagger, or use pos_tag_sides=encoder"
        )
    logger.warning(
        "no --target_tagger: POS tags on the encoder only (pos_tag_sides=encoder); decoder tags need a "
        "target tagger to train the hypothesis tagger"
    )
    return {"pos_tag_sides": "encoder"}


def tag_vocabulary_fields(config_class, taggers) -> dict:
    """Families with POS tags store the taggers' vocabularies (and the source tagger's name) in their config."""
    fields = {}
    source, target = taggers.get("source"), taggers.get("target")
    if source is not None and declares_field(config_class, "pos_tags"):
        fields["pos_tags"] = source.vocabulary.to_list()
        if declares_field(config_class, "pos_tagger") and isinstance(taggers.get("source_spec"), str):
            fields["pos_tagger"] = taggers["source_spec"]
    if target is not None and declares_field(config_class, "decoder_pos_tags"):
        fields["decoder_pos_tags"] = target.vocabulary.to_list()
    if taggers.get("nltk_data") and declares_field(config_class, "nltk_data"):
        fields["nltk_data"] = taggers["nltk_data"]  # where the pipeline's tagger finds its model on this machine
    return fields


# ---------------------------------------------------------------------------------------------------------
# Once the model is there: checks against the tokenizer, its extra inputs, generation settings
# ---------------------------------------------------------------------------------------------------------


def check_vocabulary(tokenizer, model, tokenizer_source: str) -> None:
    """Token ids must index the model's embeddings; pad and EOS must agree (error before training)."""
    config = model.config
    if len(tokenizer) > config.vocab_size:
        raise ValueError(
            f"the tokenizer ({tokenizer_source}) has {len(tokenizer)} tokens but the model's vocab_size is "
            f"{config.vocab_size}: ids >= {config.vocab_size} would index past the embeddings. Use the model's "
            "own tokenizer (--tokenizer_name) or train the model from scratch with this tokenizer"
        )
    for name in ("pad_token_id", "eos_token_id"):
        if getattr(tokenizer, name) is not None and getattr(config, name) != getattr(tokenizer, name):
            raise ValueError(
                f"tokenizer {name}={getattr(tokenizer, name)} but model config {name}={getattr(config, name)}"
            )


def model_features(model) -> list[str]:
    """The per-token extra inputs this model reads (what the preparation must compute): of the registered extra
    inputs, those its family declares (`ModelFamily.extra_inputs`; every one for a family that declares none),
    its forward takes and its config uses (`uses_extra_input`: e.g. an XL PE model takes `pos_tag_ids` only with
    a tagger)."""
    parameters = inspect.signature(model.forward).parameters
    uses = getattr(model.config, "uses_extra_input", lambda name: True)
    family = family_of_model_type(getattr(model.config, "model_type", ""))
    declared = family.extra_inputs if family is not None and family.extra_inputs is not None else None
    return [
        feature
        for feature in extra_input_names()
        if (declared is None or feature in declared) and feature in parameters and uses(feature)
    ]


def set_word_starts(model, tokenizer) -> None:
    """Give an XL PE reorderer the tokenizer's word starts, so that it ranks whole words (reorder_unit="word").
    A tokenizer whose word boundaries cannot be read leaves the reorderer ranking single tokens, with a warning."""
    encoder = model.get_encoder()
    word_starts = getattr(encoder, "word_starts", None)
    if word_starts is None or getattr(model.config, "reorder_unit", "token") != "word":
        return
    from ..features.tokenization import word_start_flags

    flags = word_start_flags(tokenizer)
    if flags is None:
        logger.warning("the tokenizer marks no word boundaries (▁, Ġ or ##): the reorderer ranks single tokens")
        return
    flags += [True] * (word_starts.flags.shape[0] - len(flags))  # ids past the tokenizer (padded vocabularies)
    word_starts.set_from(flags)


def apply_generation_options(model, tokenizer, model_args, data_args) -> None:
    """The model's generation settings from the model and the user's flags only, never from the training state a
    checkpoint was saved in: decoding uses the key/value cache (`use_cache`, which the Trainer switches off in
    `config.json` for training; a checkpoint saved that way must not make every later model decode without it,
    16x slower); the tokenizer's `model_max_length` is the model's `max_position_embeddings`; run_translation's
    `--forced_bos_token` (its id forced as the first generated token; refused when
    the vocabulary lacks it) and `--use_fast_tokenizer false` (warned: transformers 5 only has fast tokenizers)."""
    from .errors import UsageError

    stale = [
        name
        for name, settings in (("config.json", model.config), ("generation_config.json", model.generation_config))
        if getattr(settings, "use_cache", None) is False
    ]
    if stale:
        logger.info("use_cache was false in the loaded %s (a training-time setting): decoding uses the cache", stale)
    model.config.use_cache = True
    model.generation_config.use_cache = True
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit:  # the tokenizer saved with the model states the model's limit (xlpe.models.length_rule)
        from ..models.length_rule import align_tokenizer_limit

        align_tokenizer_limit(tokenizer, int(limit))

    if not model_args.use_fast_tokenizer:
        logger.warning(
            "--use_fast_tokenizer false: transformers 5 always loads the fast tokenizer; using %s",
            type(tokenizer).__name__,
        )
    if data_args.forced_bos_token:
        token_id = tokenizer.convert_tokens_to_ids(data_args.forced_bos_token)
        if token_id is None or (
            token_id == tokenizer.unk_token_id and data_args.forced_bos_token != tokenizer.unk_token
        ):
            raise UsageError(f"--forced_bos_token {data_args.forced_bos_token!r} is not in the tokenizer's vocabulary")
        model.config.forced_bos_token_id = token_id
        model.generation_config.forced_bos_token_id = token_id


def attach_reorderer(model, reorderer_dir: str, tokenizer) -> None:
    """Load a standalone reorderer (`xlpe-reorder train`) and make it the XL PE model's source of predicted
    positions; refused (UsageError) for another family or a reorderer trained on other token ids."""
    from ..features.predicted_reordering import check_tokenizer_match
    from ..models.modeling_reorderer import XLPEReordererModel
    from .card_facts import HELD_OUT_KEY, reorderer_held_out_quality
    from .errors import UsageError

    if not hasattr(model, "attach_reorderer"):
        raise UsageError(f"--reorderer applies to XL PE models, not {type(model).__name__}")
    from .reorderer import check_reorderer_dir

    try:  # a translation model, a jackknife fold, an unfinished run: refused by name, never loaded as random weights
        check_reorderer_dir(reorderer_dir, "--reorderer")
    except (ValueError, FileNotFoundError) as error:
        raise UsageError(str(error)) from None
    reorderer = load_checked(XLPEReordererModel, reorderer_dir)
    try:
        check_tokenizer_match(reorderer.config, tokenizer, "the translation model's tokenizer")
        model.attach_reorderer(reorderer)
        quality = reorderer_held_out_quality(reorderer_dir)  # its held-out tau and the source order's, for the card
        if quality is not None:
            model.config.reorderer_config[HELD_OUT_KEY] = quality
    except ValueError as error:
        raise UsageError(f"--reorderer {reorderer_dir}: {error}") from None
    logger.info("predicted XL positions come from the reorderer in %s", reorderer_dir)

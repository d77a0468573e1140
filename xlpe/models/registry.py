"""The registries of xlpe's extension points, the one place every layer reads them from: model families (name ->
classes, the family's `xlpe-train` fields, its variant, the extra inputs it reads, its title), strategies (a
family's named variants: XL PE's none / in / head / combination) and the per-token extra inputs (name, side,
padding, oracle or not, whether `generate` takes it).

Light: this module imports no torch, no transformers and no model module. A family names its classes as
"module:Class" strings, loaded on first use (`ModelFamily.config_class`, ...), so `xlpe-train --help`, the CLIs'
argument choices and a user error read the registry at once. The strategy and extra-input tables live in the
remote-code files `strategies.py` and `extra_input_specs.py` (the configs, the collator and the input checks read
them where xlpe is not installed); this module re-exports them and adds to them. A family's classes register
themselves with the Auto classes where they are defined (the bottom of its configuration and modeling files).

Adding a family: a `ModelFamily` row (the built-in ones are `BUILTIN_FAMILIES` below; a plugin calls
`register_family`); a strategy: a `Strategy` row of strategies.py (`add_strategy`); an extra input: an
`ExtraInput` row of extra_input_specs.py, or `register_extra_input` to give its computation (CONTRIBUTING.md).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from .extra_input_specs import EXAMPLE_KINDS, EXTRA_INPUTS, ExtraInput
from .strategies import STRATEGIES, Strategy, strategy_names

# ---------------------------------------------------------------------------------------------------------
# Model families
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FamilyField:
    """A config field `xlpe-train` takes as a flag (`--name VALUE`; None = the family's default)."""

    name: str
    type: type  # the flag's value type: int, float or str
    help: str  # one line; the family's strategy field gets its choices appended
    convert: Callable | None = None  # flag value -> config value (e.g. pe_step: "auto" or a number)
    choices: Callable[[], tuple[str, ...]] | None = None  # the flag's choices, read from a registry when asked


def _load(reference):
    """A class given as itself or as "module:Qualified.Name"."""
    if not isinstance(reference, str):
        return reference
    module, _, name = reference.partition(":")
    value = importlib.import_module(module)
    for part in name.split("."):
        value = getattr(value, part)
    return value


@dataclass(frozen=True)
class ModelFamily:
    """One row of the family table: what users type (`--model_type NAME`), its three classes (classes or
    "module:Class" strings, loaded on first use: `config_class`, `base_model_class`, `generation_model_class`) and
    the facts every layer reads:

    * `model_type`: the config's `model_type` (known without importing it; read off a config given as a class);
    * `title`: the family in words (model cards, docs);
    * `fields`: the config fields `xlpe-train` takes as flags (`FamilyField`s);
    * `strategy_field`: the config field that picks one of the family's strategies (strategies.py), if any;
    * `variant`: the model's variant in one word (the Hub tag "<family>-<variant>"): a config field name or a
      function of the config; default the strategy field;
    * `extra_inputs`: the per-token extra inputs its `forward` may read (None: every registered one it takes);
    * `tiny_fields`: the config fields a tiny config (`tiny_config`: tests, benches) sets besides `TINY_LAYOUT`, so
      that it builds every module the family adds (e.g. XL PE's Combination with its predictor narrowed);
    * `translation_loss_only`: config fields under which `loss` is the translation loss alone (DPE's lambda = 1),
      for checks written for a stock model's loss (transformers' own tests);
    * `exportable`: whether `xlpe-export` (ONNX) takes its models.

    What every family must have (`REQUIRED_CONFIG_ATTRIBUTES`, `REQUIRED_OUTPUT_FIELDS`, the extra inputs as
    `forward` parameters, `HubModelMixin` under the models) is checked when its classes are first loaded (`check`;
    at `register_family` for classes given as classes), with an error that names what is missing.
    """

    name: str
    config: type | str
    base_model: type | str
    generation_model: type | str
    model_type: str | None = None
    title: str | None = None
    fields: tuple[FamilyField, ...] = ()
    strategy_field: str | None = None
    variant: str | Callable | None = None
    extra_inputs: tuple[str, ...] | None = None
    tiny_fields: dict = dataclasses.field(default_factory=dict, hash=False)
    translation_loss_only: dict = dataclasses.field(default_factory=dict, hash=False)
    exportable: bool = True

    def __post_init__(self):
        if self.model_type is None:
            if isinstance(self.config, str):
                raise ValueError(f"model family {self.name!r}: model_type is needed with a config given as a string")
            object.__setattr__(self, "model_type", self.config.model_type)
        object.__setattr__(self, "title", self.title or self.name)
        object.__setattr__(self, "variant", self.variant if self.variant is not None else self.strategy_field)

    @cached_property
    def classes(self) -> tuple[type, type, type]:
        """(config, base model, generation model) classes, loaded and checked on first use."""
        return check(self, tuple(map(_load, (self.config, self.base_model, self.generation_model))))

    config_class = property(lambda self: self.classes[0], doc="the config class (loaded on first use)")
    base_model_class = property(lambda self: self.classes[1], doc="the base model class (AutoModel)")
    generation_model_class = property(lambda self: self.classes[2], doc="the model with the LM head (Seq2SeqLM)")

    def tiny_config(self, **overrides):
        """A tiny config of the family (tests, benches): `TINY_LAYOUT`, the family's `tiny_fields`, `overrides`."""
        return self.config_class(**{**TINY_LAYOUT, **self.tiny_fields, **overrides})

    def example_inputs(self, config, input_ids, decoder_input_ids=None, **masks) -> dict:
        """Valid values of the extra inputs a model of `config` reads, for a right-padded batch (`attention_mask`,
        `decoder_attention_mask`, `generator` as keywords; tests, benches: `extra_inputs.example_extra_inputs`)."""
        from .extra_inputs import example_extra_inputs

        names = self.extra_inputs if self.extra_inputs is not None else tuple(EXTRA_INPUTS)
        return example_extra_inputs(config, names, input_ids, decoder_input_ids, **masks)

    def stock_classes(self) -> tuple[type, type]:
        """The stock transformers classes the family extends: (its `*PreTrainedModel`, its generation model), e.g.
        (MarianPreTrainedModel, MarianMTModel), the baseline of the speed bench and the flat-class test."""
        import transformers

        pretrained = next(
            klass
            for klass in self.generation_model_class.__mro__
            if klass.__module__.startswith("transformers.models.") and klass.__name__.endswith("PreTrainedModel")
        )
        prefix = pretrained.__name__[: -len("PreTrainedModel")]
        generation = next(
            getattr(transformers, name)
            for name in (f"{prefix}MTModel", f"{prefix}ForConditionalGeneration")
            if hasattr(transformers, name)
        )
        return pretrained, generation

    def strategies(self) -> tuple[str, ...]:
        """The names of the family's strategies (empty without a strategy field)."""
        return strategy_names(self.name) if self.strategy_field else ()

    def field_choices(self, field: FamilyField) -> tuple[str, ...]:
        """The choices of one of the family's flags: its strategies for the strategy field, else the field's own."""
        if field.name == self.strategy_field:
            return self.strategies()
        return tuple(field.choices()) if field.choices is not None else ()

    def field_help(self, field: FamilyField) -> str:
        choices = self.field_choices(field)
        return f"{field.help}: {' | '.join(choices)}" if choices else field.help

    def variant_of(self, config) -> str | None:
        """The variant `config` is, in one word (None: the family has none)."""
        if self.variant is None:
            return None
        if callable(self.variant):
            return self.variant(config)
        value = getattr(config, self.variant, None)
        return value if isinstance(value, str) else None


def check(family: ModelFamily, classes: tuple[type, type, type]) -> tuple[type, type, type]:
    """`classes` of `family`, or a ValueError naming everything they lack of what every layer relies on."""
    import inspect
    import typing

    from .hub_support import HubModelMixin

    config_class, base_class, generation_class = classes
    missing = [f"config attribute {name!r}" for name in REQUIRED_CONFIG_ATTRIBUTES if not hasattr(config_class, name)]
    missing += [
        f"{model_class.__name__} is not a HubModelMixin (xlpe/models/hub_support.py)"
        for model_class in (base_class, generation_class)
        if not issubclass(model_class, HubModelMixin)
    ]
    parameters = inspect.signature(generation_class.forward).parameters
    missing += [
        f"extra input {name!r} as a parameter of {generation_class.__name__}.forward"
        for name in family.extra_inputs or ()
        if name not in parameters
    ]
    try:
        output = typing.get_type_hints(generation_class.forward).get("return")
    except Exception:  # an annotation that does not resolve is a missing one
        output = None
    fields = getattr(output, "__dataclass_fields__", None)
    if fields is None:
        missing.append(f"an output dataclass as the return annotation of {generation_class.__name__}.forward")
    else:
        missing += [
            f"output field {name!r} of {output.__name__}" for name in REQUIRED_OUTPUT_FIELDS if name not in fields
        ]
    if missing:
        raise ValueError(f"model family {family.name!r} lacks: {'; '.join(missing)} (CONTRIBUTING.md, a new family)")
    return classes


# what every family's config has (the trainer sets `label_smoothing`; the Hub pipeline reads `pos_tagger`; the model
# setup asks `uses_extra_input`; `validate` runs the config's checks) and its generation output carries
REQUIRED_CONFIG_ATTRIBUTES = ("label_smoothing", "pos_tagger", "uses_extra_input", "validate")
REQUIRED_OUTPUT_FIELDS = ("loss", "logits", "translation_loss")

# a tiny layout every family accepts (Marian and BART configs), as transformers' ModelTesters: vocabulary 99,
# d_model 16, 2 + 2 layers of 4 heads; tests and benches override what they need
TINY_LAYOUT = dict(
    vocab_size=99,
    d_model=16,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    max_position_embeddings=64,
    bos_token_id=0,
    pad_token_id=1,
    eos_token_id=2,
    decoder_start_token_id=1,
)

MODEL_FAMILIES: dict[str, ModelFamily] = {}


def register_family(family: ModelFamily) -> ModelFamily:
    """Add `family` (the same family again is a no-op; another one of that name an error)."""
    existing = MODEL_FAMILIES.get(family.name)
    if existing is not None and existing != family:
        raise ValueError(f"model family {family.name!r} is already registered as {existing!r}")
    if existing is None and not any(
        isinstance(c, str) for c in (family.config, family.base_model, family.generation_model)
    ):
        family.classes  # noqa: B018  (checked at once)
    MODEL_FAMILIES[family.name] = family
    return family


def get_family(name: str) -> ModelFamily:
    if name not in MODEL_FAMILIES:
        raise ValueError(f"unknown model_type {name!r}; known: {sorted(MODEL_FAMILIES)}")
    return MODEL_FAMILIES[name]


def family_of_model_type(model_type: str) -> ModelFamily | None:
    """The registered family whose config has `model_type` (e.g. "xlpe_marian" -> the "xlpe" family)."""
    for family in MODEL_FAMILIES.values():
        if family.model_type == model_type:
            return family
    return None


def family_fields() -> dict[str, tuple[FamilyField, list[ModelFamily]]]:
    """Every family's `xlpe-train` fields: name -> (field, the families that declare it), in registration order."""
    found: dict[str, tuple[FamilyField, list[ModelFamily]]] = {}
    for family in MODEL_FAMILIES.values():
        for field in family.fields:
            found.setdefault(field.name, (field, []))[1].append(family)
    return found


def family_flags() -> list[tuple[str, type, str, tuple[str, ...]]]:
    """(name, type, help, choices) of every family's `xlpe-train` flag, as the first family declaring it describes
    it: what the argument dataclass (`training.arguments.model_arguments_class`) adds to the model arguments."""
    made = []
    for name, (field, families) in family_fields().items():
        made.append((name, field.type, families[0].field_help(field), tuple(families[0].field_choices(field))))
    return made


def declares_field(config_class: type, name: str) -> bool:
    """Does `config_class` (or a base) declare the config field `name`? (a family's own fields, e.g. `pos_tags`)"""
    return any(name in getattr(klass, "__annotations__", {}) for klass in config_class.__mro__)


# ---------------------------------------------------------------------------------------------------------
# Extra inputs (extra_input_specs.py holds the table: the collator and the input checks read it)
# ---------------------------------------------------------------------------------------------------------

_FEATURE_COMPUTERS: dict[str, Callable | str] = {}  # extra input -> how the preparation computes it (not built in)
BUILTIN_FEATURES = ("reorder_positions", "target_positions", "pos_tag_ids", "decoder_pos_tag_ids", "alignment_links")


def register_extra_input(spec: ExtraInput, compute: Callable | str | None = None) -> ExtraInput:
    """Add a per-token extra input: the collator pads it, `generate` takes it if `spec.generate`, the preparation
    computes it with `compute(batch) -> list of per-token int lists` (a callable or "module:function"; see
    `xlpe.features.example_features.FeatureBatch`), `xlpe-prepare --features` lists it."""
    existing = EXTRA_INPUTS.get(spec.name)
    if existing is not None and existing != spec:
        raise ValueError(f"extra input {spec.name!r} is already registered as {existing}")
    if spec.side not in ("source", "target"):
        raise ValueError(f"extra input {spec.name!r}: side must be 'source' or 'target', got {spec.side!r}")
    if spec.example not in EXAMPLE_KINDS:
        raise ValueError(f"extra input {spec.name!r}: example must be one of {EXAMPLE_KINDS}, got {spec.example!r}")
    EXTRA_INPUTS[spec.name] = spec
    if compute is not None:
        _FEATURE_COMPUTERS[spec.name] = compute
    return spec


def unregister_extra_input(name: str) -> None:
    if name in BUILTIN_FEATURES:
        raise ValueError(f"{name!r} is a built-in extra input")
    EXTRA_INPUTS.pop(name, None)
    _FEATURE_COMPUTERS.pop(name, None)


def extra_input_names() -> tuple[str, ...]:
    """Every registered extra input, built-in ones first (the preparation's features, `--features` choices)."""
    return tuple(EXTRA_INPUTS)


def feature_computer(name: str) -> Callable | None:
    """How the preparation computes a registered (not built-in) extra input, or None."""
    compute = _FEATURE_COMPUTERS.get(name)
    return _load(compute) if isinstance(compute, str) else compute


def generate_inputs(with_oracle: bool = False) -> tuple[str, ...]:
    """The extra inputs `generate()` may be given: test-time ones, and the oracles when `with_oracle`."""
    return tuple(n for n, s in EXTRA_INPUTS.items() if s.generate and (with_oracle or not s.oracle))


def oracle_inputs() -> tuple[str, ...]:
    return tuple(name for name, spec in EXTRA_INPUTS.items() if spec.oracle)


# ---------------------------------------------------------------------------------------------------------
# The built-in families, and what the CLI's help is made from
# ---------------------------------------------------------------------------------------------------------


def _xl_position_forms() -> tuple[str, ...]:
    from .xl_position_forms import XL_POSITION_FORMS  # no imports there: the CLI reads it without torch

    return tuple(XL_POSITION_FORMS)


def _pe_step(value):
    return value if value == "auto" else float(value)


def _mvpe_variant(config) -> str:
    return "mvpe" if config.pos_tag_sides == "none" else f"pos-{config.pos_tag_sides}"


_M = __name__.rpartition(".")[0]  # xlpe.models
_GUIDED_ALIGNMENT = FamilyField(
    "guided_alignment_weight", float, "weight of the guided alignment cost (Garg et al. 2019; 0 = off)"
)
BUILTIN_FAMILIES = (
    ModelFamily(
        "xlpe",
        f"{_M}.configuration_xlpe:XLPEMarianConfig",
        f"{_M}.modeling_xlpe:XLPEMarianModel",
        f"{_M}.modeling_xlpe:XLPEMarianMTModel",
        model_type="xlpe_marian",
        title="XL PE (cross-lingual position representation)",
        fields=(
            FamilyField("xl_strategy", str, "XL PE"),
            FamilyField("xl_heads", int, "XL PE: tau, first-layer heads that see the XL positions"),
            FamilyField("reorder_loss_weight", float, "XL PE: weight of the reorder predictor's loss"),
            FamilyField(
                "xl_position_form", str, "XL PE: how the XL heads see the XL positions", choices=_xl_position_forms
            ),
            _GUIDED_ALIGNMENT,
        ),
        strategy_field="xl_strategy",
        extra_inputs=("reorder_positions", "pos_tag_ids", "alignment_links"),
        tiny_fields=dict(
            xl_strategy="combination", xl_heads=2, reorder_predictor_hidden_size=8, reorder_predictor_heads=2
        ),
        translation_loss_only=dict(reorder_loss_weight=0.0),
    ),
    ModelFamily(
        "dpe",
        f"{_M}.configuration_dpe:DPEMarianConfig",
        f"{_M}.modeling_dpe:DPEMarianModel",
        f"{_M}.modeling_dpe:DPEMarianMTModel",
        model_type="dpe_marian",
        title="DPE (dynamic position encoding)",
        fields=(FamilyField("order_loss_weight", float, "DPE: lambda of Eq. 2"), _GUIDED_ALIGNMENT),
        extra_inputs=("target_positions", "pos_tag_ids", "alignment_links"),
        tiny_fields=dict(dpe_layers=1),
        translation_loss_only=dict(order_loss_weight=1.0),
    ),
    ModelFamily(
        "mvpe_pos",
        f"{_M}.configuration_mvpe_pos:MvPEPosConfig",
        f"{_M}.modeling_mvpe_pos:MvPEPosModel",
        f"{_M}.modeling_mvpe_pos:MvPEPosForConditionalGeneration",
        model_type="mvpe_pos",
        title="mvPE+POS (augmented Transformer)",
        fields=(FamilyField("pe_step", str, "mvPE+POS: k of Eq. 9-10, a number or 'auto'", convert=_pe_step),),
        variant=_mvpe_variant,
        extra_inputs=("pos_tag_ids", "decoder_pos_tag_ids"),
        tiny_fields=dict(
            pos_tag_sides="both",
            pos_tags=["NOUN", "VERB", "DET"],
            pos_dim=4,
            decoder_tagger_window=3,
            decoder_tagger_hidden_size=8,
            pe_step=1.0,
        ),
        translation_loss_only=dict(tag_loss_weight=0.0),
    ),
)
for _family in BUILTIN_FAMILIES:
    register_family(_family)
del _family


def help_signature() -> str:
    """What of the registries shapes `xlpe-train --help` (families, their fields and strategies; the taggers its
    `--pos_tagger` help lists), as one string: part of the help text's cache key, so a family or a tagger added
    (built in or in a plugin) never shows a stale help."""
    from .taggers import tagger_help

    parts = []
    for family in MODEL_FAMILIES.values():
        fields = ",".join(f"{f.name}:{f.type.__name__}:{family.field_help(f)}" for f in family.fields)
        parts.append(f"{family.name}[{fields}]")
    return ";".join(parts) + f";taggers[{tagger_help()}]"


__all__ = [
    "BUILTIN_FAMILIES",
    "REQUIRED_CONFIG_ATTRIBUTES",
    "REQUIRED_OUTPUT_FIELDS",
    "TINY_LAYOUT",
    "EXTRA_INPUTS",
    "MODEL_FAMILIES",
    "STRATEGIES",
    "ExtraInput",
    "FamilyField",
    "ModelFamily",
    "Strategy",
    "declares_field",
    "extra_input_names",
    "family_fields",
    "family_flags",
    "family_of_model_type",
    "feature_computer",
    "generate_inputs",
    "get_family",
    "help_signature",
    "oracle_inputs",
    "register_extra_input",
    "register_family",
    "unregister_extra_input",
]

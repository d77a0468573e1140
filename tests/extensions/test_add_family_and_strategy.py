"""A family, a strategy and an extra input added through the tables alone (`xlpe.models.registry`, `strategies`), as
CONTRIBUTING.md's recipes say: every layer picks them up with no other file touched: `xlpe-train`'s flags, choices
and help, `xlpe-prepare --features`, the model setup (classes, flags -> config, the features a model reads), the
feature preparation, the Auto classes and a saved model, and the model card's family, title and variant tag. Each
registration is undone afterwards (the registry is back as it was)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from xlpe.models.configuration_xlpe import XLPEMarianConfig
from xlpe.models.modeling_xlpe import XLPEMarianModel, XLPEMarianMTModel, XLPESeq2SeqLMOutput
from xlpe.models.registry import (
    EXTRA_INPUTS,
    MODEL_FAMILIES,
    ExtraInput,
    FamilyField,
    ModelFamily,
    Strategy,
    extra_input_names,
    help_signature,
    register_extra_input,
    register_family,
    unregister_extra_input,
)
from xlpe.models.strategies import INPUT_FUSION, XL_HEADS, add_strategy, remove_strategy, strategy_names
from xlpe.training.command_line import help_key

TINY = dict(
    d_model=16,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    max_position_embeddings=64,
    vocab_size=40,
    pad_token_id=0,
    eos_token_id=1,
    decoder_start_token_id=0,
)

# ---------------------------------------------------------------------------------------------------------
# The dummy extensions: what a contributor writes (the classes would be the family's file pair)
# ---------------------------------------------------------------------------------------------------------


class DummyPEConfig(XLPEMarianConfig):
    """XL PE plus one field of its own (what a new family's configuration file declares)."""

    model_type = "dummy_pe_marian"
    dummy_scale: float = 1.0  # the family's own field, given on the command line as --dummy_scale


class DummyPEModel(XLPEMarianModel):
    config_class = DummyPEConfig


class DummyPEMTModel(XLPEMarianMTModel):
    config_class = DummyPEConfig

    def forward(
        self, input_ids=None, attention_mask=None, reorder_positions=None, dummy_ids=None, **kwargs
    ) -> XLPESeq2SeqLMOutput:
        """XL PE's forward, plus the family's extra input `dummy_ids` (taken and ignored here)."""
        return super().forward(
            input_ids=input_ids, attention_mask=attention_mask, reorder_positions=reorder_positions, **kwargs
        )


# with the Auto classes and for Hub custom code, where the classes are defined (the bottom of the family's files)
AutoConfig.register(DummyPEConfig.model_type, DummyPEConfig, exist_ok=True)
AutoModel.register(DummyPEConfig, DummyPEModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(DummyPEConfig, DummyPEMTModel, exist_ok=True)
DummyPEConfig.register_for_auto_class()
DummyPEModel.register_for_auto_class("AutoModel")
DummyPEMTModel.register_for_auto_class("AutoModelForSeq2SeqLM")


def length_ids(batch) -> list[list[int]]:
    """The dummy feature: the index of each source token (what `compute` of a registered extra input returns)."""
    return [list(range(int(n))) for n in batch.source.lengths]


DUMMY_INPUT = ExtraInput("dummy_ids", "source", 0, "a dummy per-token input (the token's index)")
DUMMY_STRATEGY = Strategy("dummy_heads", "xlpe", "HeadXL under another name (a test)", frozenset({XL_HEADS}))
DUMMY_FAMILY = ModelFamily(
    "dummy_pe",
    DummyPEConfig,
    DummyPEModel,
    DummyPEMTModel,
    title="Dummy PE (a test family)",
    fields=(FamilyField("dummy_scale", float, "Dummy PE: a scale of nothing"),),
    variant=lambda config: f"scale-{config.dummy_scale:g}",
    extra_inputs=("reorder_positions", "dummy_ids"),
)


@pytest.fixture
def registered():
    """The three registrations (registry calls only), undone afterwards; the registry is then as it was."""
    before = (help_signature(), dict(MODEL_FAMILIES), extra_input_names(), strategy_names("xlpe"))
    register_extra_input(DUMMY_INPUT, compute=f"{__name__}:length_ids")
    add_strategy(DUMMY_STRATEGY)
    register_family(DUMMY_FAMILY)
    try:
        yield
    finally:
        MODEL_FAMILIES.pop(DUMMY_FAMILY.name)
        remove_strategy("xlpe", DUMMY_STRATEGY.name)
        unregister_extra_input(DUMMY_INPUT.name)
    assert (help_signature(), dict(MODEL_FAMILIES), extra_input_names(), strategy_names("xlpe")) == before


# ---------------------------------------------------------------------------------------------------------
# Every layer picks them up
# ---------------------------------------------------------------------------------------------------------


def test_the_command_lines_list_them(registered):
    from xlpe.cli import prepare as prepare_cli
    from xlpe.cli import train as train_cli
    from xlpe.training.arguments import model_arguments_class
    from xlpe.training.run_config import flag_parser, parse_arguments, read_given

    text = train_cli.help_text()  # (what `xlpe-train --help` prints: the parser's text, cached per registry state)
    parser = flag_parser()
    program, parser.prog = parser.prog, "xlpe-train"
    try:
        assert text == parser.format_help()  # the real parser's text, with the plugin family's flags
    finally:
        parser.prog = program
    assert "--dummy_scale" in text and "Dummy PE: a scale of nothing" in text
    assert "--xl_strategy {none,in,head,combination,dummy_heads}" in text
    assert "registered family: xlpe, dpe, mvpe_pos, dummy_pe" in " ".join(text.split())
    assert "dummy_ids" in prepare_cli.FEATURE_CHOICES
    features = next(a for a in prepare_cli._parser()._actions if a.dest == "features")
    assert "dummy_ids" in features.choices
    # the help cache is keyed by the registries: a plugin family never gets a stale help
    assert help_key() != _unregistered_help_key()
    parsed = read_given(["--dummy_scale", "2"])
    assert parsed.values == {"dummy_scale": 2.0}  # the console script's parse knows the plugin's flag
    model_args, _, _ = parse_arguments(
        ["--output_dir", "unused", "--model_type", "dummy_pe", "--dummy_scale", "2", "--xl_strategy", "dummy_heads"]
    )
    assert isinstance(model_args, model_arguments_class())
    assert (model_args.dummy_scale, model_args.xl_strategy) == (2.0, "dummy_heads")


def _unregistered_help_key() -> str:
    saved = MODEL_FAMILIES.pop(DUMMY_FAMILY.name)
    try:
        return help_key()
    finally:
        MODEL_FAMILIES[saved.name] = saved


def test_the_model_setup_builds_them(registered):
    from xlpe.training.model_setup import family_classes, family_overrides, model_features

    config_class, model_class = family_classes("dummy_pe")
    assert (config_class, model_class) == (DummyPEConfig, DummyPEMTModel)
    model_args = dataclasses.make_dataclass(
        "Args", [("dummy_scale", float, 3.0), ("xl_strategy", str, "dummy_heads"), ("config_overrides", str, "")]
    )()
    overrides = family_overrides(model_args, config_class, "dummy_pe")
    assert overrides == {"dummy_scale": 3.0, "xl_strategy": "dummy_heads"}
    config = config_class(**TINY, **overrides)
    assert config.uses_xl and config.xl_heads == 1  # the strategy's traits: HeadXL's default tau, H // 4
    model = model_class(config)
    assert model_features(model) == ["reorder_positions", "dummy_ids"]
    # an XL PE model does not read the dummy input: its forward does not take it
    assert "dummy_ids" not in model_features(XLPEMarianMTModel(XLPEMarianConfig(**TINY)))


def test_the_strategy_is_validated_and_unknown_ones_still_refused(registered):
    config = XLPEMarianConfig(**TINY, xl_strategy="dummy_heads")
    assert config.uses_xl and config.xl_heads == 1
    with pytest.raises(ValueError, match="xl_strategy must be one of"):
        XLPEMarianConfig(**TINY, xl_strategy="dummy_other")


@pytest.mark.parametrize(
    "traits, same_as", [({XL_HEADS}, "head"), ({INPUT_FUSION}, "in"), ({INPUT_FUSION, XL_HEADS}, "combination")]
)
def test_the_model_reads_a_strategys_traits_not_its_name(traits, same_as):
    """A strategy registered with the traits of a built-in one builds the same modules and computes the same
    output: the modeling file reads traits (INPUT_FUSION, XL_HEADS), so a new strategy needs no code there."""
    strategy = Strategy("dummy_traits", "xlpe", "a built-in strategy's traits under another name", frozenset(traits))
    add_strategy(strategy)
    try:
        outputs = []
        for name in (same_as, strategy.name):
            torch.manual_seed(0)
            model = XLPEMarianMTModel(XLPEMarianConfig(**TINY, xl_strategy=name)).eval()
            ids = torch.tensor([[5, 6, 7, 8, 1]])
            positions = torch.tensor([[3, 2, 1, 0, 4]])
            with torch.no_grad():
                outputs.append(model(input_ids=ids, reorder_positions=positions, decoder_input_ids=ids).logits)
            outputs.append(sorted(name for name, _ in model.named_parameters()))
        assert outputs[1] == outputs[3]  # the same parameters
        torch.testing.assert_close(outputs[0], outputs[2], rtol=0, atol=0)
    finally:
        remove_strategy("xlpe", strategy.name)


def test_the_feature_preparation_computes_the_extra_input(registered, toy_tokenizer):
    from xlpe.features.example_features import PrepareOptions, _compute_features

    batch = {
        "_line": [0, 1],
        "_source": ["the cat sees the dog", "a dog"],
        "_target": ["die katze sieht den hund", "ein hund"],
        "_links": [[0, 0, 1, 1, 2, 2, 3, 3, 4, 4], [0, 0, 1, 1]],
    }
    options = PrepareOptions(features=["reorder_positions", "dummy_ids"], aligner=lambda s, t: [])
    table = _compute_features(batch, toy_tokenizer, options).to_pydict()
    assert [len(row) for row in table["dummy_ids"]] == [len(row) for row in table["input_ids"]]
    assert table["dummy_ids"][1] == list(range(len(table["input_ids"][1])))
    with pytest.raises(ValueError, match="unknown features"):
        PrepareOptions(features=["no_such_input"], aligner=lambda s, t: [])


def test_the_collator_pads_it_and_generate_is_given_it(registered, toy_tokenizer):
    from xlpe.training.collator import ExtraInputsDataCollator
    from xlpe.training.trainer import generation_inputs

    features = [
        {"input_ids": [5, 6, 1], "attention_mask": [1, 1, 1], "labels": [5, 1], "dummy_ids": [7, 8, 9]},
        {"input_ids": [5, 1], "attention_mask": [1, 1], "labels": [5, 6, 1], "dummy_ids": [3, 4]},
    ]
    batch = ExtraInputsDataCollator(tokenizer=toy_tokenizer)(features)
    assert batch["dummy_ids"].tolist() == [[7, 8, 9], [3, 4, 0]]  # its side's length, its pad value
    assert "dummy_ids" in generation_inputs(dict(batch))  # a source-side input a test-time tool would give


def test_the_auto_classes_and_a_saved_model_load_the_family(registered, tmp_path):
    torch.manual_seed(0)
    model = DummyPEMTModel(DummyPEConfig(**TINY, dummy_scale=2.0)).eval()
    assert type(AutoConfig.for_model("dummy_pe_marian")) is DummyPEConfig
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is DummyPEMTModel and loaded.config.dummy_scale == 2.0
    ids = torch.tensor([[5, 6, 7, 1]])
    with torch.no_grad():
        np.testing.assert_allclose(
            model.generate(ids, max_new_tokens=3, do_sample=False).numpy(),
            loaded.generate(ids, max_new_tokens=3, do_sample=False).numpy(),
        )


def test_the_model_card_names_the_family_and_its_variant(registered):
    from xlpe.training.model_card import build_model_card, family_of, variant_name

    config = DummyPEConfig(**TINY, dummy_scale=2.0)
    assert (family_of(config), variant_name(config)) == ("dummy_pe", "scale-2")
    assert variant_name(XLPEMarianConfig(**TINY, xl_strategy="dummy_heads")) == "dummy_heads"
    card = build_model_card(DummyPEMTModel(config), repo_id="me/dummy")
    assert "dummy_pe-scale-2" in card.data.tags and "Dummy PE (a test family)" in card.text


def test_registrations_are_checked():
    with pytest.raises(ValueError, match="already registered"):
        register_family(ModelFamily("xlpe", DummyPEConfig, DummyPEModel, DummyPEMTModel))
    with pytest.raises(ValueError, match="already registered"):
        add_strategy(Strategy("head", "xlpe", "another head"))
    with pytest.raises(ValueError, match="already registered"):
        register_extra_input(ExtraInput("pos_tag_ids", "target", 0, "another"))
    with pytest.raises(ValueError, match="built-in"):
        unregister_extra_input("pos_tag_ids")
    assert set(EXTRA_INPUTS) >= {"reorder_positions", "target_positions", "pos_tag_ids", "decoder_pos_tag_ids"}


def test_a_family_lacking_what_every_layer_relies_on_is_refused_naming_it():
    """Checked at registration (classes given) or at first use ("module:Class" strings): the config attributes,
    the output fields, the extra inputs as `forward` parameters and the Hub mixin under the models."""
    from transformers import MarianConfig, MarianModel, MarianMTModel

    class BareConfig(MarianConfig):
        model_type = "bare_marian"

    with pytest.raises(ValueError) as refused:
        register_family(ModelFamily("bare", BareConfig, MarianModel, MarianMTModel, extra_inputs=("dummy_ids",)))
    message = str(refused.value)
    for missing in (
        "config attribute 'label_smoothing'",
        "config attribute 'pos_tagger'",
        "config attribute 'uses_extra_input'",
        "MarianMTModel is not a HubModelMixin",
        "extra input 'dummy_ids' as a parameter of MarianMTModel.forward",
        "output field 'translation_loss' of Seq2SeqLMOutput",
    ):
        assert missing in message, message
    assert "bare" not in MODEL_FAMILIES

    class NoOutputModel(DummyPEMTModel):
        def forward(self, input_ids=None, reorder_positions=None, **kwargs):
            return super().forward(input_ids=input_ids, reorder_positions=reorder_positions, **kwargs)

    lazy = ModelFamily("lazy", DummyPEConfig, DummyPEModel, f"{__name__}:NoOutputModelHolder.model")
    NoOutputModelHolder.model = NoOutputModel
    for _ in range(2):  # the first use loads and checks the classes; a later use is refused as well
        with pytest.raises(ValueError, match="an output dataclass as the return annotation of NoOutputModel.forward"):
            lazy.generation_model_class  # noqa: B018


class NoOutputModelHolder:
    model = None

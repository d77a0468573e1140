"""The model side of bad input: every bad config or input gets a ValueError that names the field or argument (no
IndexError from an embedding, no reshape error, no NaN), on every construction path; a property test feeds random
tensors to every family's forward and accepts only a finite output or the documented ValueError."""

from __future__ import annotations

import math

import pytest
import torch
from family_tester import registry_family_tests, tiny_kwargs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoConfig, BartConfig, BartForConditionalGeneration, MarianConfig, MarianMTModel

from xlpe import (
    DPEMarianConfig,
    DPEMarianMTModel,
    MvPEPosConfig,
    MvPEPosForConditionalGeneration,
    XLPEMarianConfig,
    XLPEMarianMTModel,
)
from xlpe.models.configuration_reorderer import XLPEReordererConfig
from xlpe.models.registry import MODEL_FAMILIES

TESTERS = {name: registry_family_tests(name) for name in MODEL_FAMILIES}  # every registered family


@pytest.fixture(scope="module")
def models(toy_tokenizer):
    """One tiny model and one valid training batch per family."""
    built = {}
    for family, tester_class in TESTERS.items():
        tester = tester_class()
        built[family] = (tester.make_model(toy_tokenizer).eval(), tester.make_batch(toy_tokenizer))
    return built


@pytest.fixture(scope="module")
def stock_marian_dir(tmp_path_factory, toy_tokenizer):
    directory = tmp_path_factory.mktemp("stock") / "marian"
    MarianMTModel(MarianConfig(**tiny_kwargs(toy_tokenizer))).save_pretrained(directory)
    return directory


# ---------------------------------------------------------------------------------------------------------
# Configs: checked on every construction path
# ---------------------------------------------------------------------------------------------------------

BOGUS_FIELDS = [
    (XLPEMarianConfig, "xl_strategy", "sideways"),
    (XLPEMarianConfig, "xl_heads", 99),
    (XLPEMarianConfig, "xl_gate_init", 2.0),
    (XLPEMarianConfig, "reorder_predictor_dropout", float("nan")),
    (DPEMarianConfig, "dpe_layers", -1),
    (DPEMarianConfig, "order_loss_weight", float("inf")),
    (MvPEPosConfig, "pe_step", math.inf),
    (MvPEPosConfig, "pe_step", float("nan")),
    (MvPEPosConfig, "pos_dim", 0),
    (MvPEPosConfig, "tag_loss_weight", -1.0),
    (XLPEReordererConfig, "order_prior", float("nan")),
    (XLPEReordererConfig, "decoder", "greedy"),
]


@pytest.mark.parametrize(("config_class", "field", "value"), BOGUS_FIELDS, ids=lambda v: str(v))
def test_bogus_field_is_refused_at_construction(config_class, field, value):
    with pytest.raises(ValueError, match=field.split()[0]):
        config_class(**{field: value})


@pytest.mark.parametrize(("config_class", "field"), [(MarianConfig, "dropout"), (BartConfig, "init_std")])
def test_inherited_float_fields_must_be_finite(config_class, field):
    family_config = {MarianConfig: XLPEMarianConfig, BartConfig: MvPEPosConfig}[config_class]
    with pytest.raises(ValueError, match=f"{field} must be a finite number"):
        family_config(**{field: float("nan")})


@pytest.mark.parametrize(("config_class", "field", "value"), BOGUS_FIELDS[:6], ids=lambda v: str(v))
def test_from_pretrained_keywords_are_checked(config_class, field, value, tmp_path):
    config_class(vocab_size=60, pad_token_id=0, d_model=32, encoder_attention_heads=4).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=field):
        config_class.from_pretrained(tmp_path, **{field: value})
    with pytest.raises(ValueError, match=field):
        AutoConfig.from_pretrained(tmp_path, **{field: value})


@pytest.mark.parametrize(
    ("model_class", "field", "value"),
    [
        (XLPEMarianMTModel, "xl_strategy", "sideways"),
        (XLPEMarianMTModel, "xl_heads", 99),
        (DPEMarianMTModel, "dpe_layers", -1),
        (DPEMarianMTModel, "dpe_gate_init", float("nan")),
    ],
)
def test_stock_upgrade_keywords_are_checked(model_class, field, value, stock_marian_dir):
    with pytest.raises(ValueError, match=field):
        model_class.from_pretrained(stock_marian_dir, **{field: value})


def test_keywords_are_applied_before_derived_defaults(stock_marian_dir, tmp_path):
    """xl_strategy="in" from a stock checkpoint derives xl_heads=0 (it used to keep Combination's 1, which the
    saved model then refused); the upgraded model saves and loads again."""
    model = XLPEMarianMTModel.from_pretrained(stock_marian_dir, xl_strategy="in")
    assert (model.config.xl_strategy, model.config.xl_heads) == ("in", 0)
    model.save_pretrained(tmp_path)
    assert XLPEMarianMTModel.from_pretrained(tmp_path).config.xl_strategy == "in"


def test_attribute_assignment_is_checked_when_a_model_is_built(toy_tokenizer):
    config = TESTERS["xlpe"]().make_config(toy_tokenizer)
    config.xl_heads = 7
    with pytest.raises(ValueError, match="xl_heads"):
        XLPEMarianMTModel(config)
    config.xl_heads = 1
    config.xl_strategy = "sideways"
    with pytest.raises(ValueError, match="xl_strategy"):
        config.save_pretrained("/nonexistent-never-written")


@pytest.mark.parametrize("stock", ["bart", "marian"])
def test_mvpe_pos_refuses_a_stock_checkpoint_by_name(stock, tmp_path, toy_tokenizer):
    if stock == "bart":
        BartForConditionalGeneration(
            BartConfig(
                vocab_size=len(toy_tokenizer),
                d_model=128,
                encoder_layers=1,
                decoder_layers=1,
                encoder_attention_heads=2,
                decoder_attention_heads=2,
                encoder_ffn_dim=32,
                decoder_ffn_dim=32,
                max_position_embeddings=64,
            )
        ).save_pretrained(tmp_path)
    else:
        MarianMTModel(MarianConfig(**tiny_kwargs(toy_tokenizer))).save_pretrained(tmp_path)
    with pytest.raises(
        ValueError, match=f"holds a '{stock}' checkpoint, but MvPEPosForConditionalGeneration loads 'mvpe_pos'"
    ):
        MvPEPosForConditionalGeneration.from_pretrained(tmp_path)


def test_another_family_checkpoint_is_refused(models, tmp_path):
    models["dpe"][0].save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="holds a 'dpe_marian' checkpoint"):
        XLPEMarianMTModel.from_pretrained(tmp_path)


# ---------------------------------------------------------------------------------------------------------
# Inputs: a ValueError naming the argument, for every family
# ---------------------------------------------------------------------------------------------------------


def _with(batch, **changes):
    return {**batch, **changes}


def _set(tensor, index, value):
    tensor = tensor.clone()
    tensor[index] = value
    return tensor


BAD_INPUTS = {
    "input id outside the vocabulary": (
        lambda b, v, n: _with(b, input_ids=_set(b["input_ids"], (0, 0), v + 5)),
        r"`input_ids` must be token ids in \[0, vocab_size=",
    ),
    "negative input id": (
        lambda b, v, n: _with(b, input_ids=_set(b["input_ids"], (1, 0), -3)),
        "`input_ids` must be token ids",
    ),
    "label outside the vocabulary": (
        lambda b, v, n: _with(b, labels=_set(b["labels"], (0, 1), v)),
        "`labels` must be token ids",
    ),
    "attention mask of another shape": (
        lambda b, v, n: _with(b, attention_mask=b["attention_mask"][:, :-1]),
        r"`attention_mask` must have the shape of `input_ids`",
    ),
    "left padding": (
        lambda b, v, n: _with(b, attention_mask=_set(b["attention_mask"], (0, 0), 0)),
        "starts with padding",
    ),
    "a row with no real token": (
        lambda b, v, n: _with(b, attention_mask=_set(b["attention_mask"], 1, 0)),
        "masks every token",
    ),
    "labels longer than max_position_embeddings": (
        lambda b, v, n: (
            {k: val for k, val in b.items() if k not in ("labels", "decoder_pos_tag_ids")}
            | {"labels": torch.full((b["input_ids"].shape[0], n + 3), 5)}
        ),
        "more than max_position_embeddings",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
@pytest.mark.parametrize("family", sorted(TESTERS))
def test_bad_input_is_named(models, family, case):
    model, batch = models[family]
    make, message = BAD_INPUTS[case]
    with pytest.raises(ValueError, match=message):
        model(**make(batch, model.config.vocab_size, model.config.max_position_embeddings))


@pytest.mark.parametrize("family", sorted(TESTERS))
def test_empty_input_and_overlong_generation_are_named(models, family):
    model, batch = models[family]
    with pytest.raises(ValueError, match="`input_ids` is empty"):
        model.generate(input_ids=torch.zeros(1, 0, dtype=torch.long), max_new_tokens=3)
    limit = model.config.max_position_embeddings
    source = {"input_ids": batch["input_ids"][:1], "attention_mask": batch["attention_mask"][:1]}
    if family == "mvpe_pos":
        source["pos_tag_ids"] = batch["pos_tag_ids"][:1]
    with pytest.raises(ValueError, match=f"exceeds max_position_embeddings={limit}.*max_new_tokens"):
        model.generate(**source, max_new_tokens=limit + 4, min_new_tokens=limit + 4, num_beams=1)


def test_reorder_positions_are_checked_even_when_the_strategy_ignores_them(toy_tokenizer):
    tester = TESTERS["xlpe"]()
    model = tester.make_model(toy_tokenizer, xl_strategy="none", xl_heads=0)
    batch = tester.make_batch(toy_tokenizer)
    with pytest.raises(ValueError, match="`reorder_positions` values must lie in"):
        model(**_with(batch, reorder_positions=torch.full_like(batch["input_ids"], 99)))


def test_input_checks_can_be_switched_off(toy_tokenizer):
    """check_inputs=False skips the value checks (one host sync per call); shapes are always checked."""
    tester = TESTERS["xlpe"]()
    model = tester.make_model(toy_tokenizer, check_inputs=False)
    batch = tester.make_batch(toy_tokenizer)
    model(**_with(batch, attention_mask=_set(batch["attention_mask"], (0, 0), 0)))  # left padding, unchecked
    with pytest.raises(ValueError, match="must have the shape"):
        model(**_with(batch, attention_mask=batch["attention_mask"][:, :-1]))


# ---------------------------------------------------------------------------------------------------------
# Property: random tensors in, a finite output or the documented ValueError out
# ---------------------------------------------------------------------------------------------------------


@st.composite
def random_batches(draw, vocab_size: int):
    batch, length, target = draw(st.integers(0, 3)), draw(st.integers(0, 7)), draw(st.integers(1, 6))
    ids = st.integers(-2, vocab_size + 2)
    rows = st.lists(st.lists(ids, min_size=length, max_size=length), min_size=batch, max_size=batch)
    inputs = {"input_ids": torch.tensor(draw(rows), dtype=torch.long).reshape(batch, length)}
    if draw(st.booleans()):
        mask_rows = st.lists(
            st.lists(st.integers(0, 1), min_size=length, max_size=length), min_size=batch, max_size=batch
        )
        inputs["attention_mask"] = torch.tensor(draw(mask_rows), dtype=torch.long).reshape(batch, length)
    if draw(st.booleans()):
        label_rows = st.lists(
            st.lists(st.one_of(ids, st.just(-100)), min_size=target, max_size=target), min_size=batch, max_size=batch
        )
        inputs["labels"] = torch.tensor(draw(label_rows), dtype=torch.long).reshape(batch, target)
    extra = st.integers(-2, 9)
    for name, side in (
        ("reorder_positions", "source"),
        ("target_positions", "source"),
        ("pos_tag_ids", "source"),
        ("decoder_pos_tag_ids", "target"),
    ):
        if draw(st.booleans()):
            width = length if side == "source" else target
            values = draw(st.lists(extra, min_size=batch * width, max_size=batch * width))
            inputs[name] = torch.tensor(values, dtype=torch.long).reshape(batch, width)
    return inputs


@pytest.mark.parametrize("family", sorted(TESTERS))
def test_random_tensors_give_output_or_a_value_error(models, family):
    model, _ = models[family]
    accepted = {
        "xlpe": {"reorder_positions"},
        "dpe": {"target_positions"},
        "mvpe_pos": {"pos_tag_ids", "decoder_pos_tag_ids"},
    }[family]

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(random_batches(model.config.vocab_size))
    def run(inputs):
        inputs = {
            key: value
            for key, value in inputs.items()
            if key not in {"reorder_positions", "target_positions", "pos_tag_ids", "decoder_pos_tag_ids"} - accepted
        }
        if "labels" not in inputs:
            inputs.pop("decoder_pos_tag_ids", None)
            inputs["decoder_input_ids"] = torch.full(
                (inputs["input_ids"].shape[0], 1), model.config.decoder_start_token_id
            )
        try:
            with torch.no_grad():
                output = model(**inputs)
        except ValueError as error:
            assert str(error).strip(), "a ValueError must say what is wrong"
            return
        assert torch.isfinite(output.logits).all()
        if output.loss is not None:
            assert torch.isfinite(output.loss)

    run()


def test_mvpe_pos_decoder_ids_outside_the_vocabulary_are_named(models):
    """The hypothesis tagger embeds `decoder_input_ids` before the shared decoder check: they are checked first
    (was an IndexError from the embedding lookup); cached decode steps feed back the model's own ids, unchecked."""
    model, batch = models["mvpe_pos"]
    assert model.model.decoder.hypothesis_tagger is not None
    decoder_input_ids = batch["labels"].clamp(min=0)
    source = {k: v for k, v in batch.items() if k not in ("labels", "decoder_pos_tag_ids")}
    model(**source, decoder_input_ids=decoder_input_ids)  # in range: fine
    with pytest.raises(ValueError, match=r"`decoder_input_ids` must be token ids in \[0, "):
        model(**source, decoder_input_ids=_set(decoder_input_ids, (0, 1), model.config.vocab_size + 3))
    with pytest.raises(ValueError, match="`decoder_input_ids` must be token ids"):
        model(**source, decoder_input_ids=_set(decoder_input_ids, (1, 0), -2))

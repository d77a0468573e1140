"""Rotary positions (RoPE) as a position option, and XL PE's relative and rotary forms (position_attention.py):
the rotation against a written-out one, the relative property, the XL heads against their parts (monotone XL
positions = the plain option; gate 0 = no XL term; only the tau heads see the order), the upgrade from a stock
checkpoint, predictor positions without absolute PE, config rules, and the family checks for an XL-rotary model."""

from __future__ import annotations

import math

import pytest
import torch
import torch._dynamo as dynamo
from family_tester import FamilyTests, tiny_kwargs
from hypothesis import given, settings
from hypothesis import strategies as st
from test_compile import training_and_decode_inputs
from test_modeling_xlpe import reversed_positions
from transformers import MarianConfig, MarianMTModel

from xlpe import XLPEMarianConfig, XLPEMarianModel, XLPEMarianMTModel
from xlpe.models.configuration_dpe import DPEMarianConfig
from xlpe.models.modeling_dpe import DPEMarianMTModel
from xlpe.models.position_attention import RotaryPositions

XL_ROTARY = dict(
    xl_strategy="head", xl_heads=1, xl_position_form="rotary", rotary_attention=True, absolute_positions=False
)
XL_RELATIVE = dict(
    xl_strategy="head",
    xl_heads=1,
    xl_position_form="relative",
    relative_attention_max_distance=3,
    xl_relative_max_distance=3,
)


# --------------------------------------------------------------------------------------------------------
# The rotation
# --------------------------------------------------------------------------------------------------------


def written_out_rotation(states: torch.Tensor, positions: list[float], base: float) -> torch.Tensor:
    """Su et al. (2021) Eq. 34, one 2x2 rotation per pair of dimensions (k, k + d/2), angle p * base^(-2k/d)."""
    half = states.shape[-1] // 2
    out = states.clone()
    for t, p in enumerate(positions):
        for k in range(half):
            angle = p * base ** (-2 * k / states.shape[-1])
            x, y = states[..., t, k], states[..., t, k + half]
            out[..., t, k] = x * math.cos(angle) - y * math.sin(angle)
            out[..., t, k + half] = x * math.sin(angle) + y * math.cos(angle)
    return out


def test_rotation_matches_the_written_out_rotation():
    torch.manual_seed(0)
    states = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    rotary = RotaryPositions(8, base=100.0)
    positions = [0.0, 1.0, 2.0, 7.0, 3.5]
    got = rotary(states, torch.tensor(positions))
    torch.testing.assert_close(got, written_out_rotation(states, positions, 100.0), rtol=1e-6, atol=1e-6)
    # per-row, per-head positions (the XL heads' orders): row 1, head 2 rotated by its own positions
    per_head = torch.zeros(2, 3, 5)
    per_head[1, 2] = torch.tensor([4.0, 0.0, 1.0, 3.0, 2.0])
    got = rotary(states, per_head)
    torch.testing.assert_close(got[1, 2], written_out_rotation(states[1, 2], [4.0, 0.0, 1.0, 3.0, 2.0], 100.0))
    torch.testing.assert_close(got[0], states[0])  # position 0: no rotation
    with pytest.raises(ValueError, match="even"):
        RotaryPositions(7, base=10000.0)


@settings(max_examples=40, deadline=None)
@given(m=st.integers(0, 60), n=st.integers(0, 60), shift=st.integers(-30, 30))
def test_rotated_scores_depend_on_the_distance_only(m, n, shift):
    """q_m . k_n after rotation is a function of n - m (the property RoPE is built for)."""
    generator = torch.Generator().manual_seed(m * 1000 + n)
    q, k = torch.randn(2, 16, generator=generator, dtype=torch.float64).unbind(0)
    rotary = RotaryPositions(16, base=10000.0)

    def score(a, b):
        rq = rotary(q[None, None, None], torch.tensor([float(a)]))
        rk = rotary(k[None, None, None], torch.tensor([float(b)]))
        return (rq * rk).sum()

    torch.testing.assert_close(score(m, n), score(m + shift, n + shift), rtol=1e-5, atol=1e-5)  # fp32 angles


# --------------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------------


def tiny_xl(toy_tokenizer, seed=0, **fields):
    torch.manual_seed(seed)
    return XLPEMarianMTModel(XLPEMarianConfig(**{**tiny_kwargs(toy_tokenizer), "dropout": 0.0, **fields})).eval()


def batch_of(toy_tokenizer):
    batch = dict(
        toy_tokenizer(
            ["the cat sees the dog", "a dog chases the small cat in the garden"],
            text_target=["x y", "y x z"],
            return_tensors="pt",
            padding=True,
        )
    )
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == toy_tokenizer.pad_token_id, -100)
    return batch


def monotone(batch):
    return torch.arange(batch["input_ids"].shape[1]).expand_as(batch["input_ids"])


@pytest.mark.parametrize(
    "xl_fields, plain_fields",
    [
        (XL_ROTARY, dict(xl_strategy="none", xl_heads=0, rotary_attention=True, absolute_positions=False)),
        (
            dict(XL_ROTARY, xl_position_layers="all"),
            dict(xl_strategy="none", xl_heads=0, rotary_attention=True, absolute_positions=False),
        ),
        (XL_RELATIVE, dict(xl_strategy="none", xl_heads=0, relative_attention_max_distance=3)),
        (
            dict(XL_RELATIVE, xl_position_layers="all"),
            dict(xl_strategy="none", xl_heads=0, relative_attention_max_distance=3),
        ),
    ],
    ids=["rotary-first", "rotary-all", "relative-first", "relative-all"],
)
def test_monotone_xl_positions_compute_the_plain_option(toy_tokenizer, xl_fields, plain_fields):
    """XL heads whose XL positions are the source indices are heads of the plain option (RoPE / Shaw with the
    same tables): the XL form adds nothing but the order."""
    xl = tiny_xl(toy_tokenizer, **xl_fields)
    plain = tiny_xl(toy_tokenizer, **plain_fields)
    state = {k: v for k, v in xl.state_dict().items() if "xl_relative" not in k}
    missing, unexpected = plain.load_state_dict(state, strict=False)
    assert (
        not unexpected
        and all(
            "reorder_predictor" in k or "word_starts" in k or "xl_position" in k or "predictor_positions" in k
            for k in missing
        )
        or not missing
    )
    for layer in xl.model.encoder.layers:  # XL tables = the plain tables: a distance is a distance
        if getattr(layer.self_attn, "xl_relative", None) is not None:
            layer.self_attn.xl_relative.load_state_dict(layer.self_attn.relative.state_dict())
    batch = batch_of(toy_tokenizer)
    with torch.no_grad():
        got = xl(**batch, reorder_positions=monotone(batch)).logits
        want = plain(**{k: v for k, v in batch.items()}).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "fields",
    [XL_ROTARY, XL_RELATIVE, dict(XL_RELATIVE, xl_position_layers="all")],
    ids=["rotary", "relative", "relative-all"],
)
def test_only_the_xl_heads_see_the_order_and_gate_zero_removes_it(toy_tokenizer, fields):
    model = tiny_xl(toy_tokenizer, attn_implementation="eager", **fields)  # eager: attention weights returned
    with torch.no_grad():  # sharper attention than the tiny init's (near-uniform: no order would show in it)
        for layer in model.model.encoder.layers:
            layer.self_attn.q_proj.weight.normal_(std=1.0)
            layer.self_attn.k_proj.weight.normal_(std=1.0)
    batch = batch_of(toy_tokenizer)
    with torch.no_grad():
        forward = model(**batch, reorder_positions=monotone(batch), output_attentions=True)
        reverse = model(**batch, reorder_positions=reversed_positions(batch), output_attentions=True)
        first_forward, first_reverse = forward.encoder_attentions[0], reverse.encoder_attentions[0]
        assert not torch.allclose(first_forward[:, :1], first_reverse[:, :1], atol=1e-4)  # the XL head
        torch.testing.assert_close(first_forward[:, 1:], first_reverse[:, 1:])  # the other heads of layer 1
        assert (forward.encoder_last_hidden_state - reverse.encoder_last_hidden_state).abs().max() > 1e-6
        model.model.encoder.xl_position.gate.zero_()
        torch.testing.assert_close(
            model(**batch, reorder_positions=monotone(batch)).logits,
            model(**batch, reorder_positions=reversed_positions(batch)).logits,
        )


@pytest.mark.parametrize("form", ["rotary", "relative"])
def test_upgrade_from_a_stock_marian_checkpoint_is_function_preserving(toy_tokenizer, tmp_path, form):
    torch.manual_seed(0)
    stock = MarianMTModel(MarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    stock.save_pretrained(tmp_path)
    fields = dict(xl_strategy="head", xl_heads=1, xl_position_form=form, xl_position_layers="all")
    if form == "relative":
        fields["xl_relative_max_distance"] = 3
    upgraded = XLPEMarianMTModel.from_pretrained(tmp_path, **fields).eval()
    assert float(upgraded.model.encoder.xl_position.gate) == 0.0
    batch = batch_of(toy_tokenizer)
    with torch.no_grad():
        torch.testing.assert_close(upgraded(**batch).logits, stock(**batch).logits, rtol=1e-5, atol=1e-5)


def test_predictor_sees_positions_without_absolute_pe(toy_tokenizer):
    """Without PE_abs (relative/rotary forms) the reorder predictor gets a sinusoid of its own: its scores are not
    the same for a word wherever it stands (a position-blind predictor could not learn an order)."""
    model = tiny_xl(toy_tokenizer, **XL_ROTARY)
    encoder = model.model.encoder
    assert encoder.predictor_positions is not None
    ids = toy_tokenizer(["the the the the"], return_tensors="pt")
    with torch.no_grad():
        embeds = encoder.embed_tokens(ids["input_ids"]) * encoder.embed_scale
        scores = encoder.reorder_predictor(
            embeds + encoder.predictor_positions(embeds.shape[:-1]), ids["attention_mask"].bool()
        )
    assert scores[0, :4].unique().numel() == 4
    assert tiny_xl(toy_tokenizer, **XL_RELATIVE).model.encoder.predictor_positions is None  # PE_abs is there


def test_rotary_dpe_and_eager_equals_sdpa(toy_tokenizer):
    kwargs = {**tiny_kwargs(toy_tokenizer), "dropout": 0.0, "rotary_attention": True}  # DPE reads X + PE_abs
    batch = batch_of(toy_tokenizer)
    for implementation in ("eager", "sdpa"):
        torch.manual_seed(0)
        model = DPEMarianMTModel(DPEMarianConfig(**kwargs, attn_implementation=implementation)).eval()
        with torch.no_grad():
            logits = model(**batch).logits
        if implementation == "eager":
            eager = logits
    torch.testing.assert_close(logits, eager, rtol=1e-5, atol=1e-5)
    assert all(layer.self_attn.rotary for layer in model.model.decoder.layers)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(xl_strategy="combination", xl_position_form="rotary"), "xl_strategy='head'"),
        (dict(xl_strategy="in", xl_position_form="relative"), "xl_strategy='head'"),
        (dict(xl_strategy="head", xl_position_layers="all"), "xl_position_layers='all'"),
        (dict(xl_strategy="head", xl_position_form="sideways"), "xl_position_form"),
        (dict(xl_strategy="head", xl_position_form="relative", xl_relative_max_distance=0), "xl_relative_max_distance"),
        (dict(xl_strategy="head", absolute_positions=False), "absolute_positions=True"),
        (dict(rotary_attention=True, d_model=12, encoder_attention_heads=4, decoder_attention_heads=4), "must be even"),
        (dict(rotary_attention=True, rotary_base=1.0), "rotary_base"),
        (dict(rotary_attention=True, rotary_attention_sides="left"), "rotary_attention_sides"),
        (dict(rotary_attention="yes"), "rotary_attention must be True or False"),
    ],
)
def test_conflicting_or_bad_options_are_refused_by_name(toy_tokenizer, fields, message):
    with pytest.raises(ValueError, match=message):
        XLPEMarianConfig(**{**tiny_kwargs(toy_tokenizer), **fields})


@pytest.mark.parametrize(
    "fields", [XL_ROTARY, dict(XL_RELATIVE, xl_position_layers="all")], ids=["xl-rotary", "xl-relative-all"]
)
def test_training_forward_and_cached_decode_step_are_one_graph(toy_tokenizer, fields):
    tester = TestXLRotaryFamily()
    model = tiny_xl(toy_tokenizer, **fields)
    batch, step = training_and_decode_inputs(tester, model, toy_tokenizer)
    for mode, inputs in (("train", batch), ("decode", step)):
        model.train(mode == "train")
        dynamo.reset()
        explained = dynamo.explain(model)(**inputs)
        assert explained.graph_break_count == 0 and explained.graph_count == 1, (mode, explained.break_reasons)


class TestXLRotaryFamily(FamilyTests):
    """The family checks (save/load, sdpa = eager, beam search, collator, pipeline, remote code) for XL PE in
    rotary form on a RoPE model without absolute PE."""

    model_class = XLPEMarianMTModel
    base_model_class = XLPEMarianModel
    auxiliary_loss_off = {"reorder_loss_weight": 0.0}

    def make_config(self, tokenizer, **overrides):
        return XLPEMarianConfig(**{**tiny_kwargs(tokenizer), **XL_ROTARY, **overrides})

    def extra_inputs(self, batch):
        return {"reorder_positions": reversed_positions(batch)}

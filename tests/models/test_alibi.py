"""ALiBi (Press et al., 2022) as a position option, and XL PE's ALiBi form (position_modules.py): the slopes and
the bias against a direct formula (hypothesis, head counts that are and are not powers of two), the attention
against softmax(q K^T / sqrt(d_h) + bias + mask) written out, the XL bias following the reorder positions
(permuting the positions permutes the bias), monotone XL positions = plain ALiBi, gate 0 = no XL term, the stock
upgrade, config rules, one compiled graph, the export, and the family checks for an XL-ALiBi model. Cached ==
uncached generation: tests/models/test_generation_consistency.py's ALiBi stacks."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch._dynamo as dynamo
from family_tester import FamilyTests, tiny_kwargs
from hypothesis import given, settings
from hypothesis import strategies as st
from test_compile import training_and_decode_inputs
from test_modeling_xlpe import reversed_positions
from test_rotary_and_xl_forms import batch_of, monotone, tiny_xl
from transformers import MarianConfig, MarianMTModel

from xlpe import XLPEMarianConfig, XLPEMarianModel, XLPEMarianMTModel
from xlpe.models.configuration_dpe import DPEMarianConfig
from xlpe.models.modeling_dpe import DPEMarianMTModel
from xlpe.models.position_attention import PositionAwareSelfAttention
from xlpe.models.position_modules import ALiBiBias, XLALiBiForm, alibi_slopes

ALIBI = dict(xl_strategy="none", alibi_attention=True, absolute_positions=False)
XL_ALIBI = dict(
    xl_strategy="head", xl_heads=1, xl_position_form="alibi", alibi_attention=True, absolute_positions=False
)


# --------------------------------------------------------------------------------------------------------
# Slopes and bias
# --------------------------------------------------------------------------------------------------------


def reference_slopes(n: int) -> list[float]:
    """The reference implementation's `get_slopes` (ofirpress/attention_with_linear_biases), written as there:
    start = ratio = 2^(-2^-(log2 n - 3)) for a power of two; else the closest power's slopes and every other one
    of twice that power's."""
    if math.log2(n).is_integer():
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]
    closest = 2 ** math.floor(math.log2(n))
    return reference_slopes(closest) + reference_slopes(2 * closest)[0::2][: n - closest]


@settings(max_examples=60, deadline=None)
@given(heads=st.integers(1, 24), queries=st.integers(1, 9), keys=st.integers(1, 12), offset=st.integers(0, 6))
def test_slopes_and_bias_match_the_formula(heads, queries, keys, offset):
    slopes = alibi_slopes(heads)
    torch.testing.assert_close(slopes, torch.tensor(reference_slopes(heads)), rtol=1e-6, atol=0)
    if heads & (heads - 1) == 0:  # a power of two: Press et al.'s geometric sequence 2^(-8h/H)
        torch.testing.assert_close(slopes, torch.tensor([2.0 ** (-8 * h / heads) for h in range(1, heads + 1)]))
    assert len(set(slopes.tolist())) == heads and slopes.max() < 1 and slopes.min() >= 2.0**-8
    bias = ALiBiBias(heads)(torch.arange(queries) + offset, torch.arange(keys), torch.float32)
    reference = reference_slopes(heads)
    expected = torch.tensor(
        [[[-reference[h] * abs(i + offset - j) for j in range(keys)] for i in range(queries)] for h in range(heads)]
    )
    torch.testing.assert_close(bias, expected, rtol=1e-6, atol=1e-6)


def test_bad_head_count_is_refused():
    with pytest.raises(ValueError, match="num_heads >= 1"):
        alibi_slopes(0)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("is_decoder", [False, True])
def test_attention_is_softmax_of_scores_plus_the_bias(implementation, is_decoder):
    """softmax(q K^T / sqrt(d_h) - m_h |i - j| + mask) V, the causal decoder's j <= i only (Press et al., Sec. 3)."""
    torch.manual_seed(0)
    config = XLPEMarianConfig(
        **dict(tiny_kwargs_plain(), attn_implementation=implementation), xl_strategy="none", alibi_attention=True
    )
    heads = 6  # not a power of two
    module = PositionAwareSelfAttention(config, heads, is_decoder=is_decoder, layer_idx=0, alibi=True).eval()
    module.alibi.init_own_parameters()
    hidden = torch.randn(2, 7, config.d_model)
    padding = torch.ones(2, 7, dtype=torch.bool)
    padding[1, 5:] = False
    mask = torch.zeros(2, 1, 7, 7).masked_fill(~padding[:, None, None, :], torch.finfo(torch.float32).min)
    with torch.no_grad():
        output, _ = module(hidden, attention_mask=mask)
        split = lambda x: x.view(2, 7, heads, -1).transpose(1, 2)  # noqa: E731
        q, k, v = split(module.q_proj(hidden)), split(module.k_proj(hidden)), split(module.v_proj(hidden))
        slopes = torch.tensor(reference_slopes(heads))
        distance = (torch.arange(7)[None, :] - torch.arange(7)[:, None]).abs()
        scores = q @ k.transpose(-1, -2) / module.head_dim**0.5 - slopes[:, None, None] * distance
        blocked = ~padding[:, None, None, :] | (
            torch.triu(torch.ones(7, 7, dtype=torch.bool), 1) if is_decoder else torch.zeros(7, 7, dtype=torch.bool)
        )
        weights = scores.masked_fill(blocked, float("-inf")).softmax(-1)
        expected = module.out_proj((weights @ v).transpose(1, 2).reshape(2, 7, -1))
    torch.testing.assert_close(output, expected, rtol=1e-5, atol=1e-5)


def tiny_kwargs_plain() -> dict:
    return dict(
        TINY_MARIAN_6_HEADS,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        dropout=0.0,
        attention_dropout=0.0,
    )


TINY_MARIAN_6_HEADS = dict(  # 6 heads: not a power of two
    vocab_size=40,
    d_model=24,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=6,
    decoder_attention_heads=6,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    max_position_embeddings=32,
)


@settings(max_examples=25, deadline=None)
@given(data=st.data(), heads=st.integers(1, 8), xl_heads=st.integers(1, 8), length=st.integers(1, 10))
def test_xl_bias_reads_the_reorder_positions(data, heads, xl_heads, length):
    """The XL heads' bias is -g m_h |pi(i) - pi(j)| of the reorder positions: permuting the tokens' positions
    (sigma) permutes the bias's rows and columns; the slopes are the first ones of the layer's H heads."""
    xl_heads = min(xl_heads, heads)
    form = XLALiBiForm(SimpleNamespace(encoder_attention_heads=heads), head_dim=4)  # the field it reads
    positions = torch.tensor(data.draw(st.permutations(range(length))))[None]
    sigma = torch.tensor(data.draw(st.permutations(range(length))))
    gate = torch.tensor(data.draw(st.floats(0.0, 1.0)))
    query = torch.zeros(1, xl_heads, length, 4)
    bias, state = form.attention_bias(query, positions, gate, scaling=0.5)
    assert state is None and bias.shape == (1, xl_heads, length, length)
    slopes = torch.tensor(reference_slopes(heads)[:xl_heads])
    expected = -float(gate) * slopes[:, None, None] * (positions[0][None, :] - positions[0][:, None]).abs()
    torch.testing.assert_close(bias[0], expected, rtol=1e-6, atol=1e-6)
    permuted, _ = form.attention_bias(query, positions[:, sigma], gate, scaling=0.5)
    torch.testing.assert_close(permuted, bias[:, :, sigma][:, :, :, sigma])


# --------------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------------


def test_alibi_makes_a_model_without_pe_order_aware_and_has_no_parameters(toy_tokenizer):
    plain = tiny_xl(toy_tokenizer, xl_strategy="none", absolute_positions=False)
    alibi = tiny_xl(toy_tokenizer, **ALIBI)
    assert sum(p.numel() for p in alibi.parameters()) == sum(p.numel() for p in plain.parameters())
    assert all(layer.self_attn.alibi is not None for layer in alibi.model.encoder.layers)
    assert all(layer.self_attn.alibi is not None for layer in alibi.model.decoder.layers)
    assert all(layer.encoder_attn.__class__.__name__ == "MarianAttention" for layer in alibi.model.decoder.layers)
    ids = toy_tokenizer(["the cat sees the dog"], return_tensors="pt")["input_ids"]
    length = ids.shape[1]
    swap = torch.tensor([1, 0, *range(2, length)])  # the first two tokens swapped
    reverse = torch.arange(length).flip(0)
    with torch.no_grad():
        for model, order, blind in ((plain, swap, True), (alibi, swap, False), (alibi, reverse, True)):
            encoder = model.get_encoder()
            states = encoder(input_ids=ids).last_hidden_state
            shuffled = encoder(input_ids=ids[:, order]).last_hidden_state
            # the symmetric encoder bias -m|i - j| is unchanged by a reversal (i -> L-1-i): the encoder with
            # ALiBi alone is reversal-equivariant (docs/xl_pe.md, "ALiBi")
            assert torch.allclose(states[:, order], shuffled, atol=1e-5) == blind


def test_sides_choose_the_self_attentions(toy_tokenizer):
    model = tiny_xl(toy_tokenizer, xl_strategy="none", alibi_attention=True, alibi_attention_sides="decoder")
    assert all(not isinstance(layer.self_attn, PositionAwareSelfAttention) for layer in model.model.encoder.layers)
    assert all(layer.self_attn.alibi is not None for layer in model.model.decoder.layers)
    # ALiBi on the encoder, Shaw's relative PE on the decoder: different sides, allowed
    both = tiny_xl(
        toy_tokenizer,
        xl_strategy="none",
        alibi_attention=True,
        alibi_attention_sides="encoder",
        relative_attention_max_distance=2,
        relative_attention_sides="decoder",
    )
    assert all(
        layer.self_attn.alibi is not None and layer.self_attn.relative is None for layer in both.model.encoder.layers
    )
    assert all(
        layer.self_attn.alibi is None and layer.self_attn.relative is not None for layer in both.model.decoder.layers
    )


def test_monotone_xl_positions_compute_plain_alibi(toy_tokenizer):
    xl = tiny_xl(toy_tokenizer, **dict(XL_ALIBI, xl_position_layers="all"))
    plain = tiny_xl(toy_tokenizer, **ALIBI)
    missing, unexpected = plain.load_state_dict(xl.state_dict(), strict=False)
    assert not missing and all(
        "reorder_predictor" in k or "word_starts" in k or "xl_position" in k or "predictor_positions" in k
        for k in unexpected
    )
    batch = batch_of(toy_tokenizer)
    with torch.no_grad():
        got = xl(**batch, reorder_positions=monotone(batch)).logits
        want = plain(**batch).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("plain_alibi", [True, False])
def test_only_the_xl_heads_see_the_order_and_gate_zero_removes_it(toy_tokenizer, plain_alibi):
    fields = dict(XL_ALIBI, alibi_attention=plain_alibi)
    model = tiny_xl(toy_tokenizer, attn_implementation="eager", **fields)
    with torch.no_grad():  # sharper attention than the tiny init's
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
        model.model.encoder.xl_position.gate.zero_()
        torch.testing.assert_close(
            model(**batch, reorder_positions=monotone(batch)).logits,
            model(**batch, reorder_positions=reversed_positions(batch)).logits,
        )


def test_upgrade_from_a_stock_marian_checkpoint_is_function_preserving(toy_tokenizer, tmp_path):
    torch.manual_seed(0)
    stock = MarianMTModel(MarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    stock.save_pretrained(tmp_path)
    fields = dict(xl_strategy="head", xl_heads=1, xl_position_form="alibi", xl_position_layers="all")
    upgraded = XLPEMarianMTModel.from_pretrained(tmp_path, **fields).eval()
    assert float(upgraded.model.encoder.xl_position.gate) == 0.0
    batch = batch_of(toy_tokenizer)
    with torch.no_grad():
        torch.testing.assert_close(upgraded(**batch).logits, stock(**batch).logits, rtol=1e-5, atol=1e-5)


def test_loaded_models_rebuild_the_slopes(toy_tokenizer, tmp_path):
    """The slopes are not saved (a fixed function of the head count): `from_pretrained` rebuilds them."""
    model = tiny_xl(toy_tokenizer, **XL_ALIBI)
    model.save_pretrained(tmp_path)
    from safetensors.torch import load_file

    assert not [name for name in load_file(tmp_path / "model.safetensors") if "slopes" in name]
    loaded = XLPEMarianMTModel.from_pretrained(tmp_path).eval()
    for name, buffer in loaded.named_buffers():
        if name.endswith("slopes"):
            torch.testing.assert_close(buffer, alibi_slopes(4), msg=name)


def test_dpe_takes_alibi_beside_its_sinusoid_and_eager_equals_sdpa(toy_tokenizer):
    kwargs = {**tiny_kwargs(toy_tokenizer), "dropout": 0.0, "alibi_attention": True}  # DPE reads X + PE_abs
    batch = batch_of(toy_tokenizer)
    logits = {}
    for implementation in ("eager", "sdpa"):
        torch.manual_seed(0)
        model = DPEMarianMTModel(DPEMarianConfig(**kwargs, attn_implementation=implementation)).eval()
        with torch.no_grad():
            logits[implementation] = model(**batch).logits
    torch.testing.assert_close(logits["sdpa"], logits["eager"], rtol=1e-5, atol=1e-5)
    assert all(layer.self_attn.alibi is not None for layer in model.model.decoder.layers)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(alibi_attention=True, relative_attention_max_distance=3), "both bias the decoder and encoder"),
        (
            dict(alibi_attention=True, alibi_attention_sides="decoder", relative_attention_max_distance=3),
            "both bias the decoder self-attention",
        ),
        (dict(alibi_attention="yes"), "alibi_attention must be True or False"),
        (dict(alibi_attention=True, alibi_attention_sides="cross"), "alibi_attention_sides must be one of"),
        (
            dict(xl_strategy="none", alibi_attention=True, alibi_attention_sides="encoder", encoder_layers=0),
            "no encoder self-attention",
        ),
        (dict(xl_strategy="combination", xl_position_form="alibi"), "xl_strategy='head'"),
        (dict(xl_strategy="head", xl_heads=0, xl_position_form="alibi"), "xl_heads >= 1"),
    ],
)
def test_conflicting_or_bad_options_are_refused_by_name(toy_tokenizer, fields, message):
    with pytest.raises(ValueError, match=message):
        XLPEMarianConfig(**{**tiny_kwargs(toy_tokenizer), **fields})


@pytest.mark.parametrize("fields", [ALIBI, dict(XL_ALIBI, xl_position_layers="all")], ids=["alibi", "xl-alibi-all"])
def test_training_forward_and_cached_decode_step_are_one_graph(toy_tokenizer, fields):
    tester = TestXLALiBiFamily()
    model = tiny_xl(toy_tokenizer, **fields)
    batch, step = training_and_decode_inputs(tester, model, toy_tokenizer)
    for mode, inputs in (("train", batch), ("decode", step)):
        model.train(mode == "train")
        dynamo.reset()
        explained = dynamo.explain(model)(**inputs)
        assert explained.graph_break_count == 0 and explained.graph_count == 1, (mode, explained.break_reasons)


class TestXLALiBiFamily(FamilyTests):
    """The family checks (save/load, sdpa = eager, beam search, collator, pipeline, remote code) for XL PE in
    ALiBi form on an ALiBi model without absolute PE."""

    model_class = XLPEMarianMTModel
    base_model_class = XLPEMarianModel
    auxiliary_loss_off = {"reorder_loss_weight": 0.0}

    def make_config(self, tokenizer, **overrides):
        return XLPEMarianConfig(**{**tiny_kwargs(tokenizer), **XL_ALIBI, **overrides})

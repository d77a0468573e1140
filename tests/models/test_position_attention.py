"""The XL PE paper's baselines as options of the XL PE family (position_attention.py): relative position
representations (Shaw et al., 2018), DiSAN-style directional heads, no absolute PE, the encoder-free setting
(Table 4), and their composition with the XL strategies."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import MarianMTModel

from xlpe.models import XLPEMarianConfig, XLPEMarianMTModel
from xlpe.models.position_attention import NoPositions, PositionAwareSelfAttention, directional_bias

TINY = dict(
    vocab_size=40,
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=64,
    pad_token_id=0,
    eos_token_id=1,
    decoder_start_token_id=0,
    forced_eos_token_id=None,
    dropout=0.0,
    attention_dropout=0.0,
)


def tiny_config(**fields) -> XLPEMarianConfig:
    return XLPEMarianConfig(**{**TINY, **fields})


def batch(seed: int = 0):
    """Three sources, the last right-padded (EOS then pads)."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 40, (3, 9), generator=generator)
    ids[:, -1] = 1
    mask = torch.ones_like(ids)
    ids[2, 5], ids[2, 6:], mask[2, 6:] = 1, 0, 0
    return ids, mask


def reference_shaw_attention(module, hidden, key_padding, causal: bool):
    """Shaw et al. Eq. 3-5 written out with explicit (L, L, d_h) tensors a^K_ij, a^V_ij (one head loop-free)."""
    length = hidden.shape[1]
    split = lambda x: x.view(*x.shape[:-1], module.num_heads, module.head_dim).transpose(1, 2)  # noqa: E731
    q, k, v = split(module.q_proj(hidden)), split(module.k_proj(hidden)), split(module.v_proj(hidden))
    rel = module.relative
    distance = torch.arange(length)[None, :] - torch.arange(length)[:, None]
    index = distance.clamp(-rel.max_distance, rel.max_distance) + rel.max_distance
    a_key = rel.keys[index]  # (L, L, d_h)
    scores = (q @ k.transpose(-1, -2) + torch.einsum("bhid,ijd->bhij", q, a_key)) / module.head_dim**0.5  # Eq. 4
    blocked = ~key_padding[:, None, None, :].bool()
    if causal:
        blocked = blocked | (distance > 0)
    alpha = scores.masked_fill(blocked, float("-inf")).softmax(-1)
    out = alpha @ v
    if rel.values is not None:
        out = out + torch.einsum("bhij,ijd->bhid", alpha, rel.values[index])  # Eq. 3
    return module.out_proj(out.transpose(1, 2).reshape(*hidden.shape))


# ---------------------------------------------------------------------------------------------------------
# The equations
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("values", [True, False])
@pytest.mark.parametrize("is_decoder", [False, True])
def test_relative_attention_is_shaw_equations_3_to_5(implementation, values, is_decoder):
    torch.manual_seed(0)
    config = tiny_config(relative_attention_max_distance=2, relative_attention_values=values)
    config._attn_implementation = implementation
    module = PositionAwareSelfAttention(config, 4, is_decoder=is_decoder, layer_idx=0, relative=True).eval()
    module.relative.init_own_parameters()
    hidden = torch.randn(2, 7, 32)
    padding = torch.ones(2, 7, dtype=torch.long)
    padding[1, 5:] = 0
    mask = torch.zeros(2, 1, 7, 7).masked_fill(~padding[:, None, None, :].bool(), torch.finfo(torch.float32).min)
    if is_decoder:  # a decoder gets the causal mask from Marian; here the module adds causality itself
        mask = None
        padding = torch.ones(2, 7, dtype=torch.long)
    output, _ = module(hidden, attention_mask=mask)
    expected = reference_shaw_attention(module, hidden, padding, causal=is_decoder)
    real = padding.bool()
    torch.testing.assert_close(output[real], expected[real], atol=1e-5, rtol=1e-5)


def test_relative_parameters_are_two_tables_of_2k_plus_1_per_layer_and_side():
    k, head_dim, layers = 16, 8, 2 + 2
    plain = sum(p.numel() for p in XLPEMarianMTModel(tiny_config(xl_strategy="none")).parameters())
    for values, tables in ((True, 2), (False, 1)):
        model = XLPEMarianMTModel(
            tiny_config(xl_strategy="none", relative_attention_max_distance=k, relative_attention_values=values)
        )
        assert sum(p.numel() for p in model.parameters()) - plain == tables * (2 * k + 1) * head_dim * layers
    encoder_only = XLPEMarianMTModel(
        tiny_config(xl_strategy="none", relative_attention_max_distance=k, relative_attention_sides="encoder")
    )
    assert sum(p.numel() for p in encoder_only.parameters()) - plain == 2 * (2 * k + 1) * head_dim * 2
    assert all(
        not isinstance(layer.self_attn, PositionAwareSelfAttention) for layer in encoder_only.model.decoder.layers
    )


@settings(max_examples=30, deadline=None)
@given(heads=st.integers(2, 6), length=st.integers(1, 9))
def test_directional_heads_see_only_their_side(heads, length):
    positions = torch.arange(length)
    bias = directional_bias(heads, positions, positions, torch.float32)
    allowed = bias == 0
    later = positions[None, :] > positions[:, None]
    for head in range(heads):
        blocked_side = later if head < heads // 2 else positions[None, :] < positions[:, None]
        assert torch.equal(allowed[head], ~blocked_side)  # every row keeps at least its diagonal
        assert allowed[head].diagonal().all()


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_directional_attention_weights_respect_direction_and_padding(implementation):
    torch.manual_seed(0)
    config = tiny_config(directional_attention=True)
    config._attn_implementation = "eager"  # weights are returned by the eager path
    module = PositionAwareSelfAttention(config, 4, directional=True).eval()
    hidden = torch.randn(2, 6, 32)
    mask = torch.zeros(2, 1, 6, 6)
    mask[1, ..., 4:] = torch.finfo(torch.float32).min
    _, weights = module(hidden, attention_mask=mask)
    upper = torch.ones(6, 6).triu(1).bool()
    real_rows = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, :, None]  # padded queries: anything
    forward, backward = weights[:, :2].masked_fill(~real_rows, 0), weights[:, 2:].masked_fill(~real_rows, 0)
    assert forward[..., upper].abs().max() == 0  # forward heads: nothing after the query
    assert backward[..., upper.T].abs().max() == 0  # backward heads: nothing before it
    assert weights[1, ..., :4, 4:].abs().max() == 0  # no weight on padding from a real token
    assert torch.isfinite(weights).all()  # a padded query row of a backward head (all keys masked) stays finite
    eager_output = module(hidden, attention_mask=mask)[0]
    config._attn_implementation = implementation  # the module reads its config at every call
    torch.testing.assert_close(module(hidden, attention_mask=mask)[0][:, :4], eager_output[:, :4])


# ---------------------------------------------------------------------------------------------------------
# Whole models: off by default, cache, save/load, composition rules
# ---------------------------------------------------------------------------------------------------------


def test_options_off_is_exactly_stock_marian():
    torch.manual_seed(0)
    model = XLPEMarianMTModel(tiny_config(xl_strategy="none")).eval()
    assert not any(isinstance(m, (PositionAwareSelfAttention, NoPositions)) for m in model.modules())
    stock = MarianMTModel(MarianMTModel.config_class(**TINY)).eval()
    missing, unexpected = stock.load_state_dict(model.state_dict(), strict=False)
    assert not missing and not [key for key in unexpected if "reorder" not in key and "word_starts" not in key]
    ids, mask = batch()
    labels = torch.randint(3, 40, (3, 6))
    torch.testing.assert_close(
        model(input_ids=ids, attention_mask=mask, labels=labels).logits,
        stock(input_ids=ids, attention_mask=mask, labels=labels).logits,
    )


STACKS = {
    "relative": dict(xl_strategy="none", relative_attention_max_distance=3),
    "relative keys only": dict(xl_strategy="none", relative_attention_max_distance=3, relative_attention_values=False),
    "relative only, no absolute PE": dict(
        xl_strategy="none", relative_attention_max_distance=3, absolute_positions=False
    ),
    "directional": dict(xl_strategy="none", directional_attention=True),
    "combination + relative + directional": dict(
        xl_strategy="combination", relative_attention_max_distance=3, directional_attention=True
    ),
    "head + relative on the decoder": dict(
        xl_strategy="head", relative_attention_max_distance=2, relative_attention_sides="decoder"
    ),
    "table 4: encoder-free, no PE": dict(xl_strategy="none", encoder_layers=0, absolute_positions=False),
    "table 4: encoder-free + relative": dict(xl_strategy="none", encoder_layers=0, relative_attention_max_distance=3),
    "table 4: encoder-free + InXL": dict(xl_strategy="in", encoder_layers=0),
}


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("name", sorted(STACKS))
def test_generate_with_cache_equals_without_and_full_forward(name, implementation):
    torch.manual_seed(0)
    model = XLPEMarianMTModel(tiny_config(**STACKS[name])).eval()
    model.set_attn_implementation(implementation)
    ids, mask = batch()
    kwargs = dict(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=7,
        do_sample=False,
        num_beams=1,
        output_scores=True,
        return_dict_in_generate=True,
    )
    cached, uncached = model.generate(**kwargs), model.generate(**kwargs, use_cache=False)
    assert torch.equal(cached.sequences, uncached.sequences)
    for a, b in zip(cached.scores, uncached.scores):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    # the last step's scores from one full forward over the generated prefix
    full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=cached.sequences[:, :-1]).logits[:, -1]
    torch.testing.assert_close(full.log_softmax(-1), cached.scores[-1].log_softmax(-1), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", sorted(STACKS))
def test_trains_and_round_trips_through_save_pretrained(name, tmp_path):
    torch.manual_seed(0)
    model = XLPEMarianMTModel(tiny_config(**STACKS[name]))
    ids, mask = batch()
    labels = torch.randint(3, 40, (3, 6))
    model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    for parameter_name, parameter in model.named_parameters():
        if "relative" in parameter_name:
            assert parameter.grad is not None and parameter.grad.abs().sum() > 0, parameter_name
    model.eval().save_pretrained(tmp_path)
    loaded = XLPEMarianMTModel.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(
        loaded(input_ids=ids, attention_mask=mask, labels=labels).logits,
        model(input_ids=ids, attention_mask=mask, labels=labels).logits,
    )


def test_no_absolute_positions_makes_the_encoder_order_blind():
    """With no PE at all and no relative representations, the encoder is permutation-equivariant (a bag of
    words, the paper's Table 4 noPos row); relative representations make it order-aware again."""
    torch.manual_seed(0)
    ids, mask = batch()
    order = torch.tensor([3, 0, 2, 1, 4, 5, 6, 7, 8])
    for fields, blind in (
        (dict(absolute_positions=False), True),
        (dict(absolute_positions=False, relative_attention_max_distance=2), False),
    ):
        encoder = XLPEMarianMTModel(tiny_config(xl_strategy="none", **fields)).eval().get_encoder()
        plain = encoder(input_ids=ids[:2], attention_mask=mask[:2]).last_hidden_state
        shuffled = encoder(input_ids=ids[:2, order], attention_mask=mask[:2]).last_hidden_state
        assert torch.allclose(plain[:, order], shuffled, atol=1e-5) == blind


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(xl_strategy="in", absolute_positions=False), "needs absolute_positions=True"),
        (dict(xl_strategy="combination", absolute_positions=False), "needs absolute_positions=True"),
        (dict(xl_strategy="head", encoder_layers=0), "encoder_layers=0"),
        (dict(xl_strategy="none", directional_attention=True, encoder_layers=0), "encoder_layers=0"),
        (
            dict(xl_strategy="none", directional_attention=True, encoder_attention_heads=1, d_model=32),
            "encoder_attention_heads >= 2",
        ),
        (
            dict(
                xl_strategy="none",
                relative_attention_max_distance=2,
                relative_attention_sides="encoder",
                encoder_layers=0,
            ),
            "no encoder self-attention",
        ),
        (dict(relative_attention_sides="cross"), "relative_attention_sides must be one of"),
        (dict(relative_attention_max_distance=-1), "relative_attention_max_distance must be an integer >= 0"),
        (dict(relative_attention_max_distance=2.5), "relative_attention_max_distance must be an integer"),
        (dict(directional_attention="yes"), "directional_attention must be True or False"),
    ],
)
def test_conflicting_position_options_are_rejected(fields, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**fields)


def test_flash_attention_is_refused_with_a_bias():
    model = XLPEMarianMTModel(tiny_config(xl_strategy="none", relative_attention_max_distance=2)).eval()
    model.config._attn_implementation = "flash_attention_2"  # never run: refused before attention
    ids, mask = batch()
    with pytest.raises(ValueError, match="takes no attention bias"):
        model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :3])


def test_static_cache_generate_equals_dynamic():
    """A static cache advances its length tensor in place: query positions are taken before the update."""
    torch.manual_seed(0)
    model = XLPEMarianMTModel(tiny_config(**STACKS["combination + relative + directional"])).eval()
    ids, mask = batch()
    kwargs = dict(input_ids=ids, attention_mask=mask, max_new_tokens=7, do_sample=False, num_beams=1)
    assert torch.equal(model.generate(**kwargs, cache_implementation="static"), model.generate(**kwargs))


def test_stacked_training_forward_is_one_graph():
    import torch._dynamo as dynamo

    torch.manual_seed(0)
    model = XLPEMarianMTModel(tiny_config(**STACKS["combination + relative + directional"], check_inputs=False)).train()
    ids, mask = batch()
    positions = torch.arange(9).expand(3, 9)
    dynamo.reset()
    explained = dynamo.explain(model)(
        input_ids=ids, attention_mask=mask, labels=ids[:, :6], reorder_positions=positions
    )
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons


# ---------------------------------------------------------------------------------------------------------
# The other Marian-based family: DPE takes the same options on its translation layers
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_dpe_takes_the_same_options_on_its_translation_layers(implementation, tmp_path):
    from xlpe.models.configuration_dpe import DPEMarianConfig
    from xlpe.models.modeling_dpe import DPEMarianMTModel

    torch.manual_seed(0)
    config = DPEMarianConfig(**TINY, dpe_layers=1, relative_attention_max_distance=3, directional_attention=True)
    model = DPEMarianMTModel(config).eval()
    model.set_attn_implementation(implementation)
    encoder = model.get_encoder()
    assert all(isinstance(layer.self_attn, PositionAwareSelfAttention) for layer in encoder.layers)
    assert not any(
        isinstance(m, PositionAwareSelfAttention) for m in encoder.dynamic_position.modules()
    )  # the block stays plain
    assert all(isinstance(layer.self_attn, PositionAwareSelfAttention) for layer in model.model.decoder.layers)
    ids, mask = batch()
    kwargs = dict(input_ids=ids, attention_mask=mask, max_new_tokens=7, do_sample=False, num_beams=1)
    assert torch.equal(model.generate(**kwargs), model.generate(**kwargs, use_cache=False))
    labels = torch.randint(3, 40, (3, 6))
    model.save_pretrained(tmp_path)
    loaded = DPEMarianMTModel.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(
        loaded(input_ids=ids, attention_mask=mask, labels=labels).logits,
        model(input_ids=ids, attention_mask=mask, labels=labels).logits,
    )
    with pytest.raises(ValueError, match="DPE needs absolute_positions=True"):
        DPEMarianConfig(**TINY, absolute_positions=False)
    with pytest.raises(ValueError, match="relative_attention_sides must be one of"):
        DPEMarianConfig(**TINY, relative_attention_sides="cross")


def test_position_options_are_family_fields_given_to_from_pretrained(tmp_path):
    """Declared once (configuration_position_options.py), they are each family's own fields: serialised with their
    defaults, and checked when given to `from_pretrained` (before the config is built)."""
    from xlpe.models.configuration_dpe import DPEMarianConfig

    for config_class in (XLPEMarianConfig, DPEMarianConfig):
        assert {
            "absolute_positions",
            "relative_attention_max_distance",
            "directional_attention",
        } <= config_class.family_fields()
        assert "vocab_size" not in config_class.family_fields()
        saved = config_class(**TINY)
        assert saved.to_dict()["relative_attention_max_distance"] == 0
        saved.save_pretrained(tmp_path / config_class.model_type)
        assert (
            config_class.from_pretrained(
                tmp_path / config_class.model_type, relative_attention_max_distance=4
            ).relative_attention_max_distance
            == 4
        )
        with pytest.raises(ValueError, match="directional_attention must be True or False"):
            config_class.from_pretrained(tmp_path / config_class.model_type, directional_attention="yes")

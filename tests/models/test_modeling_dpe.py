"""DPE model family: shared family checks plus the paper's properties (Zheng et al., Sec. 3.2, Eq. 1-2)."""

from __future__ import annotations

import pytest
import torch
from family_tester import RegistryFamilyTests, tiny_kwargs
from torch.nn import functional as F
from transformers import MarianConfig, MarianMTModel

from xlpe import DPEMarianConfig, DPEMarianMTModel, get_family
from xlpe.models.configuration_dpe import TABLE5_PRESETS, table5_preset
from xlpe.models.modeling_dpe import DynamicPositionEncoding, order_loss
from xlpe.models.sinusoid import sinusoid_table


def reversed_ranks(batch):
    """Target rank of each source token: the words in reverse order; EOS and padding unsupervised (-100)."""
    ids, mask = batch["input_ids"], batch["attention_mask"].bool()
    rows = []
    for row_mask in mask:
        n = int(row_mask.sum())
        rows.append(list(range(n - 2, -1, -1)) + [-100] * (ids.shape[1] - n + 1))
    return torch.tensor(rows)


def training_batch(tokenizer):
    return TestDPEFamily().make_batch(tokenizer)


class TestDPEFamily(RegistryFamilyTests):
    family_name = "dpe"


def test_family_is_registered():
    assert get_family("dpe").generation_model_class is DPEMarianMTModel


# --------------------------------------------------------------------------------------------------------
# Eq. 1: the order loss
# --------------------------------------------------------------------------------------------------------


def test_order_loss_is_zero_when_r_equals_target_pe_and_positive_otherwise(toy_tokenizer):
    torch.manual_seed(0)
    model = DPEMarianMTModel(DPEMarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    batch = training_batch(toy_tokenizer)
    table = model.model.encoder.embed_positions.weight
    assert model(**batch).order_loss.item() > 0  # the untrained block's r

    def r_is_target_pe(module, args, output):
        _, signal = output
        return table[batch["target_positions"].clamp(min=0)], signal

    handle = model.model.encoder.dynamic_position.register_forward_hook(r_is_target_pe)
    try:
        assert model(**batch).order_loss.item() == 0.0
    finally:
        handle.remove()


def test_order_loss_is_equation_1_over_supervised_tokens():
    torch.manual_seed(0)
    table = sinusoid_table(16, 8)
    r = torch.randn(2, 5, 8)
    targets = torch.tensor([[3, 0, -100, 1, 2], [1, 0, -100, 7, 7]])  # row 1: last two tokens are padding
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]).bool()
    terms = [
        F.mse_loss(r[b, i], table[targets[b, i]])
        for b in range(2)
        for i in range(5)
        if mask[b, i] and targets[b, i] != -100
    ]
    torch.testing.assert_close(order_loss(r, targets, table, mask), torch.stack(terms).mean())
    none = torch.full_like(targets, -100)
    assert order_loss(r, none, table, mask).item() == 0.0  # no supervised token: 0, not NaN


def test_base_model_reports_the_order_loss_when_given_target_positions(toy_tokenizer):
    torch.manual_seed(0)
    model = DPEMarianMTModel(DPEMarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    batch = training_batch(toy_tokenizer)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        base = model.model(**inputs, decoder_input_ids=batch["input_ids"])
        assert torch.equal(base.order_loss, model(**batch).order_loss)
        assert (
            model.model(**{**inputs, "target_positions": None}, decoder_input_ids=batch["input_ids"]).order_loss is None
        )


def test_order_target_table_is_the_input_pe_table(toy_tokenizer):
    model = DPEMarianMTModel(DPEMarianConfig(**tiny_kwargs(toy_tokenizer)))
    assert torch.equal(model.model.encoder.embed_positions.weight, sinusoid_table(64, 32))


def test_r_replaces_the_absolute_pe_at_the_encoder_input(toy_tokenizer):
    torch.manual_seed(0)
    model = DPEMarianMTModel(DPEMarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    encoder = model.model.encoder
    batch = dict(toy_tokenizer(["the cat sees the dog", "a dog"], return_tensors="pt", padding=True))
    with torch.no_grad():
        out = encoder(**batch, output_hidden_states=True)
        x = encoder.embed_tokens(batch["input_ids"]) * encoder.embed_scale
    assert len(out.hidden_states) == model.config.encoder_layers + 1  # the DPE block's layers are not counted
    torch.testing.assert_close(out.hidden_states[0], x + out.dynamic_positions)


def test_inference_runs_from_the_source_alone(toy_tokenizer):
    torch.manual_seed(0)
    model = DPEMarianMTModel(DPEMarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    batch = training_batch(toy_tokenizer)
    source = {k: batch[k] for k in ("input_ids", "attention_mask")}
    with torch.no_grad():
        assert torch.equal(model(**source, labels=batch["labels"]).logits, model(**batch).logits)
    plain = model.generate(**source, num_beams=3, max_new_tokens=6)
    with_ranks = model.generate(**source, target_positions=batch["target_positions"], num_beams=3, max_new_tokens=6)
    assert torch.equal(plain, with_ranks)


# --------------------------------------------------------------------------------------------------------
# Eq. 2: the total loss, lambda side and normalisation
# --------------------------------------------------------------------------------------------------------


def test_lambda_one_gives_exactly_the_translation_loss(toy_tokenizer):
    model = DPEMarianMTModel(DPEMarianConfig(**tiny_kwargs(toy_tokenizer), order_loss_weight=1.0)).eval()
    out = model(**training_batch(toy_tokenizer))
    assert out.order_loss.item() > 0
    assert torch.equal(out.loss, out.translation_loss)


@pytest.mark.parametrize("side, normalization", [("translation", "mean"), ("order", "mean"), ("order", "reference")])
def test_total_loss_is_equation_2(toy_tokenizer, side, normalization):
    config = DPEMarianConfig(
        **tiny_kwargs(toy_tokenizer),
        order_loss_weight=0.25,
        order_loss_lambda_side=side,
        order_loss_normalization=normalization,
    )
    model = DPEMarianMTModel(config).eval()
    batch = training_batch(toy_tokenizer)
    out = model(**batch)
    order = out.order_loss / (batch["labels"] != -100).sum() if normalization == "reference" else out.order_loss
    if side == "translation":  # the paper: lambda weights the translation loss
        expected = 0.25 * out.translation_loss + 0.75 * order
    else:  # the reference code: lambda weights the order loss
        expected = 0.75 * out.translation_loss + 0.25 * order
    torch.testing.assert_close(out.loss, expected)


def test_without_target_positions_the_loss_is_the_translation_loss(toy_tokenizer):
    model = DPEMarianMTModel(DPEMarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    batch = {k: v for k, v in training_batch(toy_tokenizer).items() if k != "target_positions"}
    out = model(**batch)
    assert out.order_loss is None and torch.equal(out.loss, out.translation_loss)


def test_a_few_steps_lower_the_order_loss(toy_tokenizer):
    torch.manual_seed(0)
    config = DPEMarianConfig(**{**tiny_kwargs(toy_tokenizer), "encoder_layers": 1, "decoder_layers": 1})
    model = DPEMarianMTModel(config).train()
    batch = training_batch(toy_tokenizer)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(8):
        out = model(**batch)
        losses.append(out.order_loss.item())
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
    assert losses[-1] < 0.7 * losses[0], losses


def test_order_loss_pads_and_unaligned_tokens_do_not_matter(toy_tokenizer):
    model = DPEMarianMTModel(DPEMarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    batch = training_batch(toy_tokenizer)
    garbage = batch["target_positions"].clone()
    garbage[batch["attention_mask"] == 0] = 999  # pad slots may hold anything
    with torch.no_grad():
        assert torch.equal(model(**batch).order_loss, model(**{**batch, "target_positions": garbage}).order_loss)


# --------------------------------------------------------------------------------------------------------
# Upgrade path from a stock MarianMT checkpoint (gate g = 0)
# --------------------------------------------------------------------------------------------------------


def test_upgrade_from_stock_marian_is_exactly_the_stock_function(toy_tokenizer, tmp_path):
    torch.manual_seed(0)
    stock = MarianMTModel(MarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    stock.save_pretrained(tmp_path)
    upgraded = DPEMarianMTModel.from_pretrained(tmp_path).eval()
    assert upgraded.config.model_type == "dpe_marian" and upgraded.config.dpe_gate_init == 0.0
    assert upgraded.model.encoder.dynamic_position.gate.item() == 0.0
    assert all(torch.isfinite(p).all() for p in upgraded.parameters())
    batch = training_batch(toy_tokenizer)
    source = {k: batch[k] for k in ("input_ids", "attention_mask")}
    with torch.no_grad():
        expected, got = stock(**source, labels=batch["labels"]).logits, upgraded(**batch).logits
    assert (expected - got).abs().max().item() == 0.0  # measured: bit-identical logits
    kwargs = dict(num_beams=3, max_new_tokens=8)
    assert torch.equal(stock.generate(**source, **kwargs), upgraded.generate(**source, **kwargs))
    # fine-tuning: the order loss trains the new block at once, the translation loss moves g off 0
    upgraded.train()
    out = upgraded(**batch)
    out.loss.backward()
    dpe = upgraded.model.encoder.dynamic_position
    assert dpe.gate.grad.abs().item() > 0
    assert dpe.block[0].fc1.weight.grad.abs().sum() > 0


def test_model_from_config_is_the_paper_model(toy_tokenizer):
    model = DPEMarianMTModel(DPEMarianConfig(**tiny_kwargs(toy_tokenizer)))
    assert model.model.encoder.dynamic_position.gate.item() == 1.0
    frozen = DPEMarianMTModel(DPEMarianConfig(**tiny_kwargs(toy_tokenizer), dpe_learn_gate=False))
    assert not frozen.model.encoder.dynamic_position.gate.requires_grad


# --------------------------------------------------------------------------------------------------------
# Table 5 presets
# --------------------------------------------------------------------------------------------------------


def test_table5_presets_are_parameter_matched():
    small = dict(
        d_model=32,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        vocab_size=100,
        pad_token_id=0,
        decoder_start_token_id=0,
        eos_token_id=1,
    )
    assert set(TABLE5_PRESETS) == {"base", "8E", "10E", "DPE"}
    configs = {name: table5_preset(name, **small) for name in TABLE5_PRESETS}
    assert type(configs["8E"]) is MarianConfig and type(configs["DPE"]) is DPEMarianConfig
    assert [configs[n].encoder_layers for n in ("base", "8E", "10E", "DPE")] == [6, 8, 10, 6]
    count = {
        name: sum(p.numel() for p in get_family("dpe").generation_model_class(c).parameters())
        if name == "DPE"
        else sum(p.numel() for p in MarianMTModel(c).parameters())
        for name, c in configs.items()
    }
    layer = count["8E"] - count["base"]
    assert count["DPE"] == count["8E"] + 1  # + the gate scalar
    assert count["10E"] == count["base"] + 2 * layer
    base = table5_preset("base")
    assert (base.d_model, base.encoder_ffn_dim, base.encoder_attention_heads, base.decoder_layers) == (512, 2048, 8, 6)
    with pytest.raises(ValueError, match="12E"):
        table5_preset("12E")


# --------------------------------------------------------------------------------------------------------
# Configuration and bad input
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(dpe_layers=0), "dpe_layers"),
        (dict(dpe_layers=1.5), "dpe_layers"),
        (dict(order_loss_weight=1.5), "order_loss_weight"),
        (dict(order_loss_weight=-0.1), "order_loss_weight"),
        (dict(order_loss_lambda_side="both"), "order_loss_lambda_side"),
        (dict(order_loss_normalization="sum"), "order_loss_normalization"),
        (dict(dpe_gate_init=2.0), "dpe_gate_init"),
    ],
)
def test_invalid_config_values_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DPEMarianConfig(**kwargs)


@pytest.mark.parametrize(
    "make_positions, message",
    [
        (lambda b: reversed_ranks(b)[:, :-1], r"shape \(2, \d+\)"),
        (lambda b: reversed_ranks(b).float(), "integer tensor"),
        (lambda b: reversed_ranks(b).tolist(), "torch.LongTensor"),
        (lambda b: reversed_ranks(b).clamp(min=0) + b["input_ids"].shape[1], r"\[0, \d+\)"),
        (lambda b: torch.full_like(b["input_ids"], -1), r"\[0, \d+\) or -100"),
    ],
)
def test_bad_target_positions_raise_value_error(toy_tokenizer, make_positions, message):
    model = DPEMarianMTModel(DPEMarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    batch = dict(
        toy_tokenizer(["the cat sees the dog", "a dog"], text_target=["x", "y"], return_tensors="pt", padding=True)
    )
    with pytest.raises(ValueError, match=message) as info:
        model(**batch, target_positions=make_positions(batch))
    assert "target_positions" in str(info.value)
    with pytest.raises(ValueError, match="target_positions"):
        model.generate(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            target_positions=make_positions(batch),
            max_new_tokens=3,
        )


def test_over_long_input_is_a_clear_error(toy_tokenizer):
    model = DPEMarianMTModel(DPEMarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(input_ids=torch.full((1, 70), 5), decoder_input_ids=torch.zeros(1, 1, dtype=torch.long))


def test_dpe_block_is_made_of_marian_encoder_layers(toy_tokenizer):
    config = DPEMarianConfig(**tiny_kwargs(toy_tokenizer), dpe_layers=3)
    block = DynamicPositionEncoding(config).block
    assert len(block) == 3 and all(type(layer).__name__ == "MarianEncoderLayer" for layer in block)

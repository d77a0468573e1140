"""XL PE model family: shared family checks plus the paper-specific properties (Ding et al., Sec. 3)."""

from __future__ import annotations

import pytest
import torch
from family_tester import RegistryFamilyTests, tiny_kwargs
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import MarianConfig, MarianMTModel

from xlpe import XLPEMarianConfig, XLPEMarianMTModel
from xlpe.models.modeling_xlpe import CrossLingualPositionEncoding
from xlpe.models.reorder_predictor import (
    WRITTEN_OUT_ATTENTION_MAX_LENGTH,
    ReorderPredictor,
    dropout_fast_on_cpu,
    keep_mask,
    key_padding_bias,
    positions_from_scores,
    predictor_attention,
    reorder_loss,
    word_mean_scores,
)
from xlpe.models.sinusoid import sinusoid_table


def reversed_positions(batch):
    """Reverse the movable (non-special) tokens of each row: a valid, clearly non-monotone XL order."""
    ids, mask = batch["input_ids"], batch["attention_mask"].bool()
    rows = []
    for _row_ids, row_mask in zip(ids, mask):
        n = int(row_mask.sum())
        rows.append(list(range(n - 2, -1, -1)) + [n - 1] + list(range(n, ids.shape[1])))  # EOS keeps its place
    return torch.tensor(rows)


class TestXLPEFamily(RegistryFamilyTests):
    family_name = "xlpe"


# --------------------------------------------------------------------------------------------------------
# The XL signal is really used, and where it should not be, nothing changes
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["in", "head", "combination"])
def test_each_strategy_uses_reorder_positions(toy_tokenizer, strategy):
    torch.manual_seed(0)
    # init_std 0.3: with near-uniform attention (tiny weights) a permuted PE set averages out to the same output
    config = XLPEMarianConfig(
        **tiny_kwargs(toy_tokenizer), xl_strategy=strategy, xl_heads=0 if strategy == "in" else 2, init_std=0.3
    )
    model = XLPEMarianMTModel(config).eval()
    batch = dict(toy_tokenizer(["the cat sees the dog"], return_tensors="pt"))
    n = batch["input_ids"].shape[1]
    monotone = torch.arange(n)[None]
    with torch.no_grad():
        a = model.model.encoder(**batch, reorder_positions=monotone).last_hidden_state
        b = model.model.encoder(**batch, reorder_positions=reversed_positions(batch)).last_hidden_state
    assert (a - b).abs().max() > 1e-2


def test_head_strategy_with_tau_zero_is_exactly_vanilla_marian(toy_tokenizer):
    torch.manual_seed(0)
    xl = XLPEMarianMTModel(XLPEMarianConfig(**tiny_kwargs(toy_tokenizer), xl_strategy="head", xl_heads=0)).eval()
    vanilla = MarianMTModel(MarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    missing, unexpected = vanilla.load_state_dict(xl.state_dict(), strict=False)
    assert not unexpected and all("embed_positions" in key for key in missing)
    batch = dict(toy_tokenizer(["the cat sees the dog", "a dog"], return_tensors="pt", padding=True))
    positions = reversed_positions(batch)
    with torch.no_grad():
        expected = vanilla(**batch, decoder_input_ids=batch["input_ids"]).logits
        got = xl(**batch, decoder_input_ids=batch["input_ids"], reorder_positions=positions).logits
    assert torch.equal(expected, got)
    assert not hasattr(xl.model.encoder, "reorder_predictor")  # nothing to predict when no head uses XL


def test_head_xl_matches_explicit_two_input_attention(toy_tokenizer):
    """Eq. 9-11 computed literally (Q/K/V of tau heads from X + PE_XL, others from X + PE_abs)."""
    torch.manual_seed(0)
    model = XLPEMarianMTModel(XLPEMarianConfig(**tiny_kwargs(toy_tokenizer), xl_strategy="head", xl_heads=2)).eval()
    encoder, attention = model.model.encoder, model.model.encoder.layers[0].self_attn
    batch = dict(toy_tokenizer(["a dog chases the small cat"], return_tensors="pt"))
    positions = reversed_positions(batch)
    x = encoder.embed_tokens(batch["input_ids"]) * encoder.embed_scale
    table = sinusoid_table(64, 32)
    n = x.shape[1]
    z_abs, z_xl = x + table[:n], x + table[positions[0]]
    heads, head_dim, tau = 4, 8, 2

    def split(states):
        return states.view(1, n, heads, head_dim).transpose(1, 2)

    qkv = []
    for proj in (attention.q_proj, attention.k_proj, attention.v_proj):
        from_abs, from_xl = split(proj(z_abs)), split(proj(z_xl))
        qkv.append(torch.cat([from_xl[:, :tau], from_abs[:, tau:]], dim=1))
    weights = torch.softmax(qkv[0] @ qkv[1].transpose(-1, -2) * head_dim**-0.5, dim=-1)
    expected = attention.out_proj((weights @ qkv[2]).transpose(1, 2).reshape(1, n, 32))
    got, _ = attention(z_abs, attention_mask=None, xl_hidden_states=z_xl)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_in_xl_fusion_is_equation_7(toy_tokenizer):
    for fusion in ("diagonal", "full"):
        config = XLPEMarianConfig(**tiny_kwargs(toy_tokenizer), xl_strategy="in", xl_heads=0, xl_fusion=fusion)
        module = CrossLingualPositionEncoding(config)
        module.init_own_parameters()
        with torch.no_grad():
            module.fusion_abs.normal_()
            module.fusion_xl.normal_()
        pe_abs, pe_xl = torch.randn(5, 32), torch.randn(5, 32)
        if fusion == "diagonal":
            expected = torch.tanh(pe_abs * module.fusion_abs + pe_xl * module.fusion_xl)
        else:
            expected = torch.tanh(pe_abs @ module.fusion_abs + pe_xl @ module.fusion_xl)
        torch.testing.assert_close(module(pe_abs, pe_xl), expected)


def test_fusion_parameter_counts_for_transformer_big():
    """Paper Table 1: InXL adds +0.01M to Transformer-big (d=1024). Diagonal U, V: 2d (+1 gate)."""
    big = dict(d_model=1024, encoder_attention_heads=16, decoder_attention_heads=16)
    counts = {}
    for fusion in ("diagonal", "full"):
        module = CrossLingualPositionEncoding(XLPEMarianConfig(**big, xl_strategy="in", xl_heads=0, xl_fusion=fusion))
        counts[fusion] = sum(p.numel() for p in module.parameters())
    assert counts["diagonal"] == 2 * 1024 + 1 and counts["diagonal"] / 1e6 < 0.01
    assert counts["full"] == 2 * 1024**2 + 1  # +2.1M: not the paper's count


# --------------------------------------------------------------------------------------------------------
# Upgrade path from a stock MarianMT checkpoint
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["in", "head", "combination"])
def test_upgrade_from_stock_marian_preserves_outputs(toy_tokenizer, tmp_path, strategy):
    torch.manual_seed(0)
    stock = MarianMTModel(MarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    stock.save_pretrained(tmp_path)
    upgraded = XLPEMarianMTModel.from_pretrained(
        tmp_path, xl_strategy=strategy, xl_heads=0 if strategy == "in" else 2
    ).eval()
    assert upgraded.config.model_type == "xlpe_marian" and upgraded.config.xl_strategy == strategy
    assert upgraded.model.encoder.xl_position.gate.item() == 0.0
    assert all(torch.isfinite(p).all() for p in upgraded.parameters())
    batch = dict(toy_tokenizer(["the cat sees the dog", "a dog"], return_tensors="pt", padding=True))
    with torch.no_grad():
        assert torch.equal(
            stock(**batch, decoder_input_ids=batch["input_ids"]).logits,
            upgraded(**batch, decoder_input_ids=batch["input_ids"]).logits,
        )
        assert torch.equal(
            upgraded(**batch, decoder_input_ids=batch["input_ids"]).logits,
            upgraded(**batch, decoder_input_ids=batch["input_ids"], reorder_positions=reversed_positions(batch)).logits,
        )
    kwargs = dict(num_beams=3, max_new_tokens=8)
    assert torch.equal(stock.generate(**batch, **kwargs), upgraded.generate(**batch, **kwargs))
    # the upgraded model trains its gate: one step moves it off zero, so XL starts to matter
    upgraded.train()
    labels = toy_tokenizer(["die katze sieht den hund", "ein hund"], return_tensors="pt", padding=True)["input_ids"]
    out = upgraded(**batch, labels=labels, reorder_positions=reversed_positions(batch))
    out.loss.backward()
    assert upgraded.model.encoder.xl_position.gate.grad.abs().item() > 0


def test_model_from_config_uses_xl_signal_from_step_one(toy_tokenizer):
    model = XLPEMarianMTModel(XLPEMarianConfig(**tiny_kwargs(toy_tokenizer)))
    assert model.model.encoder.xl_position.gate.item() == 1.0


# --------------------------------------------------------------------------------------------------------
# Predicted reorderings and the predictor's loss
# --------------------------------------------------------------------------------------------------------


def draw_scored_rows(data, min_length: int = 1, max_rows: int = 4):
    """(lengths of the rows, movable mask: real tokens but the final EOS, a score per token) of a padded batch."""
    length = data.draw(st.integers(min_length, 12 if min_length == 1 else 14))
    rows = data.draw(st.integers(1, max_rows))
    lengths = [data.draw(st.integers(min_length, length)) for _ in range(rows)]
    movable = torch.tensor([[i < n - 1 for i in range(length)] for n in lengths])  # EOS at n - 1, then pad
    scores = torch.tensor(
        data.draw(st.lists(st.lists(st.floats(-5, 5), min_size=length, max_size=length), min_size=rows, max_size=rows))
    )
    return lengths, movable, scores


@settings(deadline=None, max_examples=60)
@given(st.data())
def test_positions_from_scores_is_always_a_valid_permutation(data):
    lengths, movable, scores = draw_scored_rows(data)
    length = movable.shape[1]
    positions = positions_from_scores(scores, movable)
    for row, n in enumerate(lengths):
        assert sorted(positions[row].tolist()) == list(range(length))
        assert positions[row, n - 1] == n - 1  # the fixed token keeps its place
        order = positions[row, : n - 1].argsort()
        assert all(scores[row, order[i]] <= scores[row, order[i + 1]] for i in range(n - 2))


def test_predicted_positions_follow_scores():
    scores = torch.tensor([[0.3, 0.1, 0.2, 9.0]])
    movable = torch.tensor([[True, True, True, False]])
    assert positions_from_scores(scores, movable).tolist() == [[2, 0, 1, 3]]


@settings(deadline=None, max_examples=80)
@given(st.data())
def test_word_ranking_keeps_every_word_together_and_in_order(data):
    lengths, movable, scores = draw_scored_rows(data, min_length=2, max_rows=3)
    rows, length = movable.shape
    word_start = torch.tensor(
        data.draw(st.lists(st.lists(st.booleans(), min_size=length, max_size=length), min_size=rows, max_size=rows))
    )
    positions = positions_from_scores(word_mean_scores(scores, word_start, movable), movable)
    for row, n in enumerate(lengths):
        assert sorted(positions[row].tolist()) == list(range(length)) and positions[row, n - 1] == n - 1
        starts = [k for k in range(n - 1) if k == 0 or word_start[row, k]]
        for a, b in zip(starts, starts[1:] + [n - 1]):  # a word: tokens a..b-1, placed consecutively, in order
            assert positions[row, a:b].tolist() == list(range(int(positions[row, a]), int(positions[row, a]) + b - a))


def test_model_ranks_whole_words_once_word_starts_are_set(toy_tokenizer, tmp_path):
    from xlpe.features.tokenization import word_start_flags

    torch.manual_seed(3)
    model = XLPEMarianMTModel(XLPEMarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    encoder = model.get_encoder()
    assert encoder.word_starts.flags.all()  # not set: every token is a word (per-token ranking, as before)
    flags = word_start_flags(toy_tokenizer)
    encoder.word_starts.set_from(flags)
    batch = toy_tokenizer(
        ["the children play with a red ball in the garden", "the small dog chases the cat"],
        return_tensors="pt",
        padding=True,
    )
    with torch.no_grad():
        positions = encoder(**batch).reorder_positions
    multi_piece = 0
    for row in range(2):
        ids = batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist()[:-1]  # without </s>
        starts = [k for k, token in enumerate(ids) if k == 0 or flags[token]]
        for a, b in zip(starts, starts[1:] + [len(ids)]):
            multi_piece += b - a > 1
            assert positions[row, a:b].tolist() == list(range(int(positions[row, a]), int(positions[row, a]) + b - a))
    assert multi_piece > 0  # the toy tokenizer splits words: the check above means something
    model.save_pretrained(tmp_path)
    assert torch.equal(
        XLPEMarianMTModel.from_pretrained(tmp_path).get_encoder().word_starts.flags, encoder.word_starts.flags
    )
    with pytest.raises(ValueError, match="reorder_unit"):
        XLPEMarianConfig(**tiny_kwargs(toy_tokenizer), reorder_unit="sentence")


def test_word_start_table_is_no_bool_tensor_and_old_bool_checkpoints_load(toy_tokenizer, tmp_path):
    """The table is uint8 in the state (no bool tensor: transformers' save/load tests and state-dict tools expect
    none); a checkpoint written when it was bool loads to the same flags and the same positions."""
    from safetensors.torch import load_file, save_file

    from xlpe.features.tokenization import word_start_flags

    torch.manual_seed(4)
    model = XLPEMarianMTModel(XLPEMarianConfig(**tiny_kwargs(toy_tokenizer), reorder_unit="word")).eval()
    model.get_encoder().word_starts.set_from(word_start_flags(toy_tokenizer))
    assert not any(tensor.dtype == torch.bool for tensor in model.state_dict().values())
    model.save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    state = load_file(weights)
    key = next(name for name in state if name.endswith("word_starts.flags"))
    state[key] = state[key].bool()  # what checkpoints of xlpe <= 0.5 hold
    save_file(state, weights, metadata={"format": "pt"})
    loaded = XLPEMarianMTModel.from_pretrained(tmp_path).eval()
    assert loaded.get_encoder().word_starts.flags.dtype == torch.uint8
    assert torch.equal(loaded.get_encoder().word_starts.flags, model.get_encoder().word_starts.flags)
    batch = toy_tokenizer(["the children play with a red ball in the garden"], return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(
            loaded.get_encoder()(**batch).reorder_positions, model.get_encoder()(**batch).reorder_positions
        )


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_cpu_dropout_masks_have_dropouts_distribution(p):
    """`keep_mask` (the CPU dropout mask of the predictor and of the XL encoder input): values 0 or 1/(1-p), a
    fraction p of zeros, mean 1 (what F.dropout's bernoulli mask gives), in the input's dtype, fresh each call."""
    torch.manual_seed(0)
    like = torch.empty(400, 500)
    mask = keep_mask(like, p)
    assert mask.shape == like.shape and mask.dtype == like.dtype
    values = mask.unique()
    assert len(values) == 2 and values[0] == 0 and values[1].item() == pytest.approx(1 / (1 - p))
    n = mask.numel()
    zeros = (mask == 0).float().mean().item()
    assert abs(zeros - p) < 5 * (p * (1 - p) / n) ** 0.5  # within 5 standard errors of p
    assert abs(mask.mean().item() - 1.0) < 0.01
    assert not torch.equal(mask, keep_mask(like, p))
    assert keep_mask(like.to(torch.bfloat16), p).dtype == torch.bfloat16


def test_cpu_dropout_is_dropout_in_training_and_the_identity_otherwise(monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(64, 64, requires_grad=True)
    assert dropout_fast_on_cpu(x, 0.1, training=False) is x and dropout_fast_on_cpu(x, 0.0, training=True) is x
    out = dropout_fast_on_cpu(x, 0.25, training=True)
    kept = out != 0
    torch.testing.assert_close(out[kept], x[kept] / 0.75)
    out.sum().backward()  # the gradient flows through the kept entries, scaled, and nowhere else
    torch.testing.assert_close(x.grad, kept.float() / 0.75)
    calls = []  # under torch.compile the graph's own dropout is used
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    monkeypatch.setattr(torch.nn.functional, "dropout", lambda t, p, training: calls.append(p) or t)
    assert dropout_fast_on_cpu(x, 0.25, training=True) is x and calls == [0.25]


def test_predictor_attention_is_sdpas_function_on_cpu(monkeypatch):
    """`predictor_attention` writes attention out on CPU in eager mode for short batches: the values and gradients of
    `F.scaled_dot_product_attention` with the same boolean key mask (padded rows, a one-token row, an all-pad row
    that `key_padding_bias` opens up); with dropout, a fraction p of the weights dropped and the rest scaled by
    1/(1-p); under torch.compile, and for batches longer than the threshold, SDPA itself."""
    torch.manual_seed(0)
    mask = torch.ones(4, 9, dtype=torch.bool)
    mask[1, 5:], mask[2, 1:], mask[3, :] = False, False, False
    keys = key_padding_bias(mask)
    q, k, v = (torch.randn(4, 2, 9, 8, requires_grad=True) for _ in range(3))
    got = predictor_attention(q, k, v, keys, 0.0)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keys)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    upstream = torch.randn_like(got)
    for g, w in zip(torch.autograd.grad(got, (q, k, v), upstream), torch.autograd.grad(want, (q, k, v), upstream)):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-4)
    ones = torch.ones(1, 1, 2000, 4)  # uniform weights 1/2000 and v = 1: the output is the kept share, scaled
    dropped = predictor_attention(
        torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 2000, 4), ones, torch.ones(1, 1, 1, 2000, dtype=torch.bool), 0.25
    )
    assert abs(dropped.mean().item() - 1.0) < 0.05 and not torch.equal(dropped, torch.ones_like(dropped))
    calls = []
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    monkeypatch.setattr(
        torch.nn.functional,
        "scaled_dot_product_attention",
        lambda *args, **kwargs: calls.append(kwargs["dropout_p"]) or args[0],
    )
    assert predictor_attention(q, k, v, keys, 0.1) is q and calls == [0.1]
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: False)  # eager, but longer than written out pays
    long = torch.zeros(1, 1, WRITTEN_OUT_ATTENTION_MAX_LENGTH + 1, 4)
    assert predictor_attention(long, long, long, torch.ones(1, 1, 1, long.shape[2], dtype=torch.bool), 0.0) is long
    assert calls == [0.1, 0.0]


@pytest.mark.parametrize("layers", [1, 2])
def test_predictor_layers_compute_the_transformer_encoder_function(layers):
    """The predictor runs its `nn.TransformerEncoderLayer`s through `pre_norm_layer_forward` (fewer small ops):
    the same function as the modules' own forward, in eval mode (fast path and regular path), in training mode
    without dropout, and gradients alike; padded rows, a one-token row and an all-pad row included."""
    torch.manual_seed(0)
    predictor = ReorderPredictor(d_model=32, hidden_size=16, num_layers=layers, num_heads=4, dropout=0.0)
    x = torch.randn(4, 7, 32)
    mask = torch.ones(4, 7, dtype=torch.bool)
    mask[1, 4:] = False
    mask[2, 1:] = False
    mask[3, :] = False

    def reference(inputs, rows=4):
        hidden = predictor.encoder(predictor.input_proj(inputs), src_key_padding_mask=~mask[:rows])
        return predictor.score(predictor.final_norm(hidden)).squeeze(-1)

    real = mask[:3]
    for training in (False, True):
        predictor.train(training)
        expected, actual = reference(x), predictor(x, mask)
        torch.testing.assert_close(actual[:3][real], expected[:3][real], atol=1e-5, rtol=1e-5)
        assert torch.isfinite(actual).all()  # the all-pad row: finite, and nothing reads it
        grads = torch.autograd.grad(actual[:3][real].sum(), list(predictor.parameters()))
        expected_grads = torch.autograd.grad(expected[:3][real].sum(), list(predictor.parameters()))
        for got, want in zip(grads, expected_grads):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    predictor.eval()
    with torch.no_grad():  # nn.TransformerEncoder's fused inference fast path
        torch.testing.assert_close(
            predictor(x[:3], mask[:3])[real], reference(x[:3], rows=3)[real], atol=1e-5, rtol=1e-5
        )
    assert [name for name, _ in predictor.named_parameters()] == [
        name for name, _ in ReorderPredictor(32, 16, layers, 4, 0.1).named_parameters()
    ]


def test_predictor_dropout_is_applied_in_training_only():
    torch.manual_seed(0)
    predictor = ReorderPredictor(d_model=32, hidden_size=16, num_layers=1, num_heads=4, dropout=0.5)
    x, mask = torch.randn(2, 6, 32), torch.ones(2, 6, dtype=torch.bool)
    predictor.eval()
    assert torch.equal(predictor(x, mask), predictor(x, mask))
    predictor.train()
    assert not torch.equal(predictor(x, mask), predictor(x, mask))


@pytest.mark.parametrize("kind", ["pairwise", "mse"])
def test_predictor_learns_oracle_order(toy_tokenizer, kind):
    torch.manual_seed(0)
    model = XLPEMarianMTModel(
        XLPEMarianConfig(**tiny_kwargs(toy_tokenizer), reorder_loss=kind, reorder_predictor_dropout=0.0)
    )
    batch = dict(
        toy_tokenizer(
            ["the cat sees the dog", "a dog chases the small cat"],
            text_target=["x", "y"],
            return_tensors="pt",
            padding=True,
        )
    )
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == 0, -100)
    positions = reversed_positions(batch)
    optimizer = torch.optim.Adam(model.model.encoder.reorder_predictor.parameters(), lr=3e-3)
    losses = []
    for _ in range(40):
        out = model(**batch, reorder_positions=positions)
        losses.append(out.reorder_loss.item())
        optimizer.zero_grad()
        out.reorder_loss.backward()
        optimizer.step()
    assert losses[-1] < 0.5 * losses[0]
    model.eval()
    with torch.no_grad():
        predicted = model.model.encoder(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
        ).reorder_positions
    mask = batch["attention_mask"].bool()
    assert torch.equal(predicted[mask], positions[mask])


def test_loss_is_translation_plus_weighted_reorder_loss(toy_tokenizer):
    model = XLPEMarianMTModel(XLPEMarianConfig(**tiny_kwargs(toy_tokenizer), reorder_loss_weight=0.25)).eval()
    batch = TestXLPEFamily().make_batch(toy_tokenizer)
    out = model(**batch)
    torch.testing.assert_close(out.loss, out.translation_loss + 0.25 * out.reorder_loss)
    no_positions = {k: v for k, v in batch.items() if k != "reorder_positions"}
    out = model(**no_positions)
    assert out.reorder_loss is None and torch.equal(out.loss, out.translation_loss)


def test_reorder_loss_zero_for_perfect_mse_scores():
    oracle = torch.tensor([[2, 0, 1, 3]])
    movable = torch.tensor([[True, True, True, False]])
    scores = torch.tensor([[1.0, 0.0, 0.5, 123.0]])
    assert reorder_loss(scores, oracle, movable, "mse").item() == 0.0


def test_training_with_predicted_positions(toy_tokenizer):
    model = XLPEMarianMTModel(XLPEMarianConfig(**tiny_kwargs(toy_tokenizer), xl_train_positions="predicted")).train()
    batch = TestXLPEFamily().make_batch(toy_tokenizer)
    out = model(**batch)
    assert not torch.equal(out.reorder_positions, batch["reorder_positions"])  # the untrained predictor's order
    model.eval()
    assert torch.equal(model(**batch).reorder_positions, batch["reorder_positions"])  # given ones at inference


def test_generate_uses_given_positions(toy_tokenizer):
    torch.manual_seed(0)
    model = XLPEMarianMTModel(XLPEMarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    batch = dict(toy_tokenizer(["the cat sees the dog", "a dog"], return_tensors="pt", padding=True))
    positions = reversed_positions(batch)
    encoder_out = model.get_encoder()(**batch, reorder_positions=positions)
    assert torch.equal(encoder_out.reorder_positions, positions)
    with_positions = model.generate(
        **batch,
        reorder_positions=positions,
        num_beams=3,
        max_new_tokens=6,
        output_scores=True,
        return_dict_in_generate=True,
    )
    manual = model.generate(
        **batch,
        encoder_outputs=encoder_out,
        num_beams=3,
        max_new_tokens=6,
        output_scores=True,
        return_dict_in_generate=True,
    )
    assert torch.equal(with_positions.sequences, manual.sequences)


# --------------------------------------------------------------------------------------------------------
# Configuration and bad input
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(xl_strategy="diagonal"), "xl_strategy"),
        (dict(xl_heads=-1), "xl_heads"),
        (dict(xl_heads=5, encoder_attention_heads=4, d_model=32), "xl_heads"),
        (dict(xl_strategy="in", xl_heads=2), "xl_heads"),
        (dict(xl_fusion="low-rank"), "xl_fusion"),
        (dict(reorder_loss="hinge"), "reorder_loss"),
        (dict(xl_train_positions="gold"), "xl_train_positions"),
        (dict(reorder_predictor_hidden_size=30, reorder_predictor_heads=4), "divisible"),
        (dict(reorder_predictor_ffn_size=0), "reorder_predictor_ffn_size"),
        (dict(reorder_predictor_ffn_size=2.5), "reorder_predictor_ffn_size"),
        (dict(xl_gate_init=2.0), "xl_gate_init"),
    ],
)
def test_invalid_config_values_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        XLPEMarianConfig(**kwargs)


def test_predictor_ffn_width_defaults_to_four_times_its_width_and_can_be_set(toy_tokenizer):
    """`reorder_predictor_ffn_size`: None is 4 x the predictor's width (every config saved before the field existed
    was built so); a set value shapes the predictor's feed-forward layers and survives save/load."""
    config = XLPEMarianConfig(**tiny_kwargs(toy_tokenizer), reorder_predictor_hidden_size=8, reorder_predictor_heads=2)
    assert config.reorder_predictor_ffn_size == 32
    narrow = XLPEMarianConfig(**{**config.to_dict(), "reorder_predictor_ffn_size": 12})
    layer = XLPEMarianMTModel(narrow).model.encoder.reorder_predictor.encoder.layers[0]
    assert (layer.linear1.out_features, layer.linear2.in_features) == (12, 12)
    assert XLPEMarianConfig.from_dict(narrow.to_dict()).reorder_predictor_ffn_size == 12


def test_default_tau_is_a_quarter_of_the_heads():
    assert XLPEMarianConfig(encoder_attention_heads=16).xl_heads == 4
    assert XLPEMarianConfig(encoder_attention_heads=8, d_model=64).xl_heads == 2
    assert XLPEMarianConfig(xl_strategy="in").xl_heads == 0


@pytest.mark.parametrize(
    "make_positions, message",
    [
        (lambda b: reversed_positions(b)[:, :-1], r"shape \(2, \d+\)"),
        (lambda b: reversed_positions(b).float(), "integer tensor"),
        (lambda b: reversed_positions(b).tolist(), "torch.LongTensor"),
        (lambda b: reversed_positions(b) + 100, r"\[0, \d+\)"),
        (lambda b: torch.zeros_like(b["input_ids"]), "not a permutation"),
        (lambda b: reversed_positions(b) - 1, r"\[0, \d+\)"),
    ],
)
def test_bad_reorder_positions_raise_value_error(toy_tokenizer, make_positions, message):
    model = XLPEMarianMTModel(XLPEMarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    batch = dict(
        toy_tokenizer(["the cat sees the dog", "a dog"], text_target=["x", "y"], return_tensors="pt", padding=True)
    )
    with pytest.raises(ValueError, match=message) as info:
        model(**batch, reorder_positions=make_positions(batch))
    assert "reorder_positions" in str(info.value)
    with pytest.raises(ValueError, match="reorder_positions"):
        model.generate(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            reorder_positions=make_positions(batch),
            max_new_tokens=3,
        )


def test_pad_slots_of_reorder_positions_are_ignored(toy_tokenizer):
    model = XLPEMarianMTModel(XLPEMarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    batch = dict(toy_tokenizer(["the cat sees the dog", "a dog"], return_tensors="pt", padding=True))
    positions = reversed_positions(batch)
    garbage = positions.clone()
    garbage[1, batch["attention_mask"][1] == 0] = 999
    with torch.no_grad():
        a = model.model.encoder(**batch, reorder_positions=positions).last_hidden_state
        b = model.model.encoder(**batch, reorder_positions=garbage).last_hidden_state
    assert torch.equal(a, b)


def test_over_long_input_is_a_clear_error(toy_tokenizer):
    model = XLPEMarianMTModel(XLPEMarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(input_ids=torch.full((1, 70), 5), decoder_input_ids=torch.zeros(1, 1, dtype=torch.long))


def test_fixed_token_ids_are_a_buffer_that_follows_the_model(toy_tokenizer, tmp_path):
    """The ids that never move (EOS, pad, `reorder_fixed_token_ids`) are a non-persistent long buffer made in
    `__init__`: right after `.to(dtype)`, after `from_pretrained` (meta-device loading refills it) and not in the
    state dict, so checkpoints are as before; the movable tokens it gives are the special-token-free real ones."""
    config = XLPEMarianConfig(**tiny_kwargs(toy_tokenizer), reorder_fixed_token_ids=[5])
    model = XLPEMarianMTModel(config)
    expected = sorted({config.eos_token_id, config.pad_token_id, 5})
    encoder = model.get_encoder()
    assert encoder.fixed_tokens.ids.tolist() == expected == encoder.fixed_token_ids
    assert not any("fixed_tokens" in name for name in model.state_dict())
    model.to(torch.bfloat16)
    assert encoder.fixed_tokens.ids.dtype == torch.long and encoder.fixed_tokens.ids.tolist() == expected
    model.to(torch.float32).save_pretrained(tmp_path)
    loaded = XLPEMarianMTModel.from_pretrained(tmp_path).get_encoder()
    assert loaded.fixed_tokens.ids.dtype == torch.long and loaded.fixed_tokens.ids.tolist() == expected
    ids = torch.tensor([[7, 5, 8, config.eos_token_id, config.pad_token_id]])
    mask = torch.tensor([[True, True, True, True, False]])
    assert loaded.movable_tokens(ids, mask).tolist() == [[True, False, True, False, False]]
    assert loaded.movable_tokens(ids.int(), mask).tolist() == [[True, False, True, False, False]]  # int32 ids too

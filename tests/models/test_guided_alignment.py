"""Guided alignment (Garg et al. 2019, Sec. 4; xlpe/models/guided_alignment.py) on XL PE and DPE: weight 0 is the
model without the option (bit-identical loss and logits), the captured probabilities equal the eager
cross-attention weights, the ce and mse costs against a direct computation on a hand-made alignment (one head and
the head average), gradients reach the supervised layer only with a weight > 0, a short training makes the
supervised head's argmax agree with the links, and the config rules."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from xlpe.models.guided_alignment import alignment_matrix, guided_alignment_cost
from xlpe.models.registry import get_family

FAMILIES = ("xlpe", "dpe")


def tiny(family: str, **overrides):
    fields = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    return get_family(family).tiny_config(**fields, **overrides)


def model_of(config, seed=0):
    torch.manual_seed(seed)
    return get_family(config.model_type.replace("_marian", "")).generation_model_class(config).eval()


def batch(source_length=6, target_length=5, size=2, seed=1):
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, 99, (size, source_length), generator=generator)
    labels = torch.randint(3, 99, (size, target_length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, -2:] = 0
    input_ids[1, -2:] = 1
    labels[1, -1] = -100
    # row 0: target t -> source t and t+1 (two links); row 1: target 0 -> 3, target 2 -> 0; others unaligned
    links = torch.full((size, 2 * 2 * target_length), -100)
    pairs0 = [(t, s) for t in range(target_length) for s in (t, t + 1)]
    links[0, : 2 * len(pairs0)] = torch.tensor(pairs0).view(-1)
    links[1, :4] = torch.tensor([0, 3, 2, 0])
    return dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels, alignment_links=links)


def direct_cost(probabilities, links, labels, cost):
    """The module doc's L_a with Python loops over the links and positions."""
    total, positions = 0.0, 0
    for b in range(probabilities.shape[0]):
        pairs = [tuple(p) for p in links[b].view(-1, 2).tolist() if p[0] != -100]
        for t in range(probabilities.shape[1]):
            sources = [s for tt, s in pairs if tt == t]
            if not sources or labels[b, t] == -100:
                continue
            gold = torch.zeros(probabilities.shape[2])
            gold[sources] = 1.0 / len(sources)
            p = probabilities[b, t].detach()
            ce = -(gold[sources] * p[sources].log()).sum()  # 0 log 0 = 0 off the links
            total += float(ce) if cost == "ce" else float((p - gold).pow(2).sum())
            positions += 1
    return total / positions


@pytest.mark.parametrize("family", FAMILIES)
def test_weight_zero_is_the_model_without_the_option(family):
    inputs = batch()
    plain = model_of(tiny(family))(**{k: v for k, v in inputs.items() if k != "alignment_links"})
    off = model_of(tiny(family, guided_alignment_weight=0.0))(**inputs)
    assert torch.equal(plain.loss, off.loss) and torch.equal(plain.logits, off.logits)
    assert off.guided_alignment_loss is None
    on = model_of(tiny(family, guided_alignment_weight=0.5))(**inputs)
    assert torch.equal(plain.logits, on.logits)  # the option changes the loss, never the function
    assert torch.allclose(on.loss, plain.loss + 0.5 * on.guided_alignment_loss)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("head", [None, 2])
@pytest.mark.parametrize("cost", ["ce", "mse"])
@pytest.mark.parametrize("layer", [-1, 0])
def test_cost_against_the_eager_attention_and_a_direct_computation(family, head, cost, layer):
    config = tiny(
        family,
        guided_alignment_weight=1.0,
        guided_alignment_head=head,
        guided_alignment_cost=cost,
        guided_alignment_layer=layer,
    )
    config._attn_implementation = "eager"
    inputs = batch()
    output = model_of(config)(**inputs, output_attentions=True)
    weights = output.cross_attentions[layer].float()  # [batch, heads, tgt, src], eager softmax
    probabilities = weights.mean(1) if head is None else weights[:, head]
    expected = direct_cost(probabilities, inputs["alignment_links"], inputs["labels"], cost)
    assert output.guided_alignment_loss.item() == pytest.approx(expected, rel=1e-5, abs=1e-7)


def test_alignment_matrix_and_cost_edge_cases():
    links = torch.tensor([[0, 1, 0, 2, 1, 0, -100, -100]])
    matrix = alignment_matrix(links, 2, 3)
    assert matrix.tolist() == [[[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]]]
    perfect = torch.tensor([[[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]]])
    assert guided_alignment_cost(perfect, links, None, "mse").item() == 0.0
    empty = torch.full((1, 4), -100)
    assert guided_alignment_cost(perfect, empty, None, "ce").item() == 0.0  # no supervised position: 0, not NaN
    with pytest.raises(ValueError, match=r"alignment_links.*\[0, 2\) x \[0, 3\)"):
        alignment_matrix(torch.tensor([[0, 3]]), 2, 3)


@pytest.mark.parametrize("family", FAMILIES)
def test_gradients_reach_the_supervised_layer_only_with_a_weight(family):
    inputs = batch()
    for weight in (0.0, 1.0):
        model = model_of(tiny(family, guided_alignment_weight=weight, guided_alignment_layer=0))
        model(**inputs).loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        reference = model_of(tiny(family))
        reference(**{k: v for k, v in inputs.items() if k != "alignment_links"}).loss.backward()
        name = "model.decoder.layers.0.encoder_attn.q_proj.weight"
        same = torch.equal(grads[name], dict(reference.named_parameters())[name].grad)
        assert same == (weight == 0.0)


def test_a_short_training_teaches_the_head_the_links():
    """Copy task with a diagonal alignment: the supervised head's argmax source agrees with the gold link for
    clearly more target tokens after 30 steps than at initialisation."""
    config = tiny("xlpe", guided_alignment_weight=1.0, guided_alignment_head=0)
    model = model_of(config).train()
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, 99, (16, 8), generator=generator)
    links = torch.stack([torch.arange(8), torch.arange(8)], -1).reshape(1, -1).expand(16, -1)
    inputs = dict(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), labels=input_ids.clone())

    def agreement():
        config._attn_implementation = "eager"
        with torch.no_grad():
            attention = model.eval()(**inputs, output_attentions=True).cross_attentions[-1][:, 0]
        config._attn_implementation = "sdpa"
        model.train()
        return (attention.argmax(-1) == torch.arange(8)).float().mean().item()

    before = agreement()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(30):
        optimizer.zero_grad()
        model(**inputs, alignment_links=links).loss.backward()
        optimizer.step()
    after = agreement()
    assert after > before + 0.3 and after > 0.6, (before, after)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(guided_alignment_weight=-1.0), "guided_alignment_weight"),
        (dict(guided_alignment_cost="mult"), "guided_alignment_cost"),
        (dict(guided_alignment_layer=2), r"guided_alignment_layer must be an integer in \[-2, 2\).*got 2"),
        (dict(guided_alignment_layer=-3), r"guided_alignment_layer.*got -3"),
        (dict(guided_alignment_head=4), r"guided_alignment_head must be None .* \[0, 4\).*got 4"),
        (dict(guided_alignment_head="average"), r"guided_alignment_head.*got 'average'"),
    ],
)
@pytest.mark.parametrize("family", FAMILIES)
def test_config_rules(family, overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny(family, **overrides)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_training_prepares_the_links_only_with_a_weight(family):
    from xlpe.training.model_setup import model_features

    assert "alignment_links" not in model_features(model_of(tiny(family)))
    assert "alignment_links" in model_features(model_of(tiny(family, guided_alignment_weight=0.1)))


def test_the_command_line_sets_the_fields():
    from types import SimpleNamespace

    from xlpe.training.model_setup import family_classes, family_overrides

    args = SimpleNamespace(
        guided_alignment_weight=0.3, config_overrides='guided_alignment_layer=0,guided_alignment_cost="mse"'
    )
    config_class, _ = family_classes("dpe")
    overrides = family_overrides(args, config_class, "dpe")
    assert {
        k: overrides[k] for k in ("guided_alignment_weight", "guided_alignment_layer", "guided_alignment_cost")
    } == {
        "guided_alignment_weight": 0.3,
        "guided_alignment_layer": 0,
        "guided_alignment_cost": "mse",
    }
    config_class, _ = family_classes("vanilla")
    with pytest.raises(ValueError, match="--guided_alignment_weight does not apply to --model_type vanilla"):
        family_overrides(SimpleNamespace(guided_alignment_weight=0.3, config_overrides=None), config_class, "vanilla")


def test_xlpe_train_prepares_the_links_and_logs_the_cost(tmp_path):
    """Two steps of `xlpe-train` (the built-in corpus, tiny model): the links are prepared from the alignments,
    padded by the collator, and the guided alignment cost is logged beside the family's losses."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "training"))  # test_train's tiny run arguments
    from test_train import tiny as tiny_run

    from xlpe.cli.train import main

    args = tiny_run(tmp_path, "--model_type", "dpe", "--max_steps", "2", "--do_train", "--do_eval")
    metrics = main([*args, "--guided_alignment_weight", "0.5"])
    assert metrics["eval_guided_alignment_loss"] > 0 and "eval_order_loss" in metrics, sorted(metrics)

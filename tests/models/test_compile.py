"""Compile-clean models: the training forward and a cached decode step of every family trace into ONE graph
under torch.compile (no graph break in xlpe code, so `fullgraph=True` works) and compute what eager mode
computes. The value checks of the extra inputs, which need a host sync, run in eager mode only.

dynamo runs with the "eager" backend here (tracing without inductor's code generation): the property tested is
the graph, and it stays fast on CPU."""

from __future__ import annotations

import copy

import pytest
import test_source_tags
import torch
import torch._dynamo as dynamo
from family_tester import registry_family_tests

from xlpe.models.registry import MODEL_FAMILIES
from xlpe.models.transformers_compat import cache_kwargs, output_cache

# every registered family (its tiny config and example inputs), and XL PE with source POS tags
TESTERS = {name: registry_family_tests(name) for name in MODEL_FAMILIES}
TESTERS["xlpe+pos"] = test_source_tags.TestXLPEPosFamily
SOURCES = ["the cat sees the dog", "a dog chases the small cat in the garden"]  # different lengths: padding
TARGETS = ["die katze sieht den hund", "ein hund jagt die kleine katze im garten"]


def training_and_decode_inputs(tester, model, tokenizer):
    batch = tester.make_batch(tokenizer, sources=SOURCES, targets=TARGETS)
    source = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "pos_tag_ids")}
    with torch.no_grad():
        encoder_outputs = model.eval().get_encoder()(**source)
        start = torch.full((len(SOURCES), 1), model.config.decoder_start_token_id)
        first = model(
            **model.prepare_inputs_for_generation(
                start, encoder_outputs=encoder_outputs, use_cache=True, attention_mask=source["attention_mask"]
            )
        )
        ids = torch.cat([start, first.logits[:, -1:].argmax(-1)], dim=1)
        step = model.prepare_inputs_for_generation(
            ids,
            encoder_outputs=encoder_outputs,
            use_cache=True,
            attention_mask=source["attention_mask"],
            **cache_kwargs(output_cache(first)),
        )
    return batch, step


@pytest.mark.parametrize("family", sorted(TESTERS))
def test_training_forward_and_cached_decode_step_are_one_graph(family, toy_tokenizer):
    tester = TESTERS[family]()
    model = tester.make_model(toy_tokenizer)
    batch, step = training_and_decode_inputs(tester, model, toy_tokenizer)
    for mode, inputs in (("train", batch), ("decode", step)):
        model.train(mode == "train")
        dynamo.reset()
        explained = dynamo.explain(model)(**inputs)
        reasons = [
            f"{r.reason.splitlines()[0]} @ {r.user_stack[-1].filename}:{r.user_stack[-1].lineno}"
            for r in explained.break_reasons
            if r.user_stack
        ]
        assert explained.graph_break_count == 0 and explained.graph_count == 1, f"{family} {mode}: {reasons}"


@pytest.mark.parametrize("family", sorted(TESTERS))
def test_fullgraph_compile_matches_eager(family, toy_tokenizer):
    tester = TESTERS[family]()
    model = tester.make_model(toy_tokenizer).eval()  # eval: no dropout, so the two runs are comparable
    batch, step = training_and_decode_inputs(tester, model, toy_tokenizer)
    dynamo.reset()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        eager_train, compiled_train = model(**batch), compiled(**batch)
        assert torch.allclose(eager_train.loss, compiled_train.loss, atol=1e-6)
        assert torch.allclose(eager_train.logits, compiled_train.logits, atol=1e-5)
        # the KV cache grows in place at every step: each call gets its own copy
        assert torch.allclose(model(**copy.deepcopy(step)).logits, compiled(**copy.deepcopy(step)).logits, atol=1e-5)


def test_value_checks_still_run_in_eager_mode(toy_tokenizer):
    tester = TESTERS["xlpe"]()
    model = tester.make_model(toy_tokenizer)
    batch = tester.make_batch(toy_tokenizer)
    batch["reorder_positions"] = torch.zeros_like(batch["reorder_positions"])  # not a permutation
    with pytest.raises(ValueError, match="not a permutation"):
        model(**batch)


@pytest.mark.parametrize("family", sorted(TESTERS))
def test_fullgraph_compiled_training_step_matches_eager(family, toy_tokenizer):
    """Forward AND backward traced (aot_eager: AOTAutograd builds the joint graph, as inductor would, without
    code generation): one graph, and the same loss and gradients as eager, called as the Trainer calls it (with
    `num_items_in_batch`)."""
    tester = TESTERS[family]()
    eager_model = tester.make_model(toy_tokenizer)
    compiled_model = copy.deepcopy(eager_model)
    for model in (eager_model, compiled_model):
        model.eval()  # no dropout, so that both compute the same function (train mode is traced in the test above)
    batch = tester.make_batch(toy_tokenizer, sources=SOURCES, targets=TARGETS)
    dynamo.reset()
    compiled = torch.compile(compiled_model, backend="aot_eager", fullgraph=True)
    step_tokens = (batch["labels"] != -100).sum() * 2  # the Trainer's num_items_in_batch: this batch is half a step
    eager_loss = eager_model(**batch, num_items_in_batch=step_tokens).loss
    compiled_loss = compiled(**batch, num_items_in_batch=step_tokens).loss
    torch.testing.assert_close(eager_loss, eager_model(**batch).loss / 2)
    eager_loss.backward()
    compiled_loss.backward()
    torch.testing.assert_close(compiled_loss, eager_loss, atol=1e-6, rtol=1e-5)
    compiled_grads = dict(compiled_model.named_parameters())
    for name, parameter in eager_model.named_parameters():
        if parameter.grad is not None:
            torch.testing.assert_close(compiled_grads[name].grad, parameter.grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("backend", ["sdpa", "flex_attention"])
@pytest.mark.parametrize("family", sorted(TESTERS))
def test_attention_backends_agree_with_eager(family, backend, toy_tokenizer):
    """Every attention goes through transformers' `ALL_ATTENTION_FUNCTIONS` (XL PE's HeadXL included), so each
    back-end computes what eager does: a padded batch (two lengths), logits within 1e-5."""
    tester = TESTERS[family]()
    model = tester.make_model(toy_tokenizer).eval()
    batch = tester.make_batch(toy_tokenizer, sources=SOURCES, targets=TARGETS)
    with torch.no_grad():
        model.set_attn_implementation("eager")
        eager = model(**batch).logits
        model.set_attn_implementation(backend)
        other = model(**batch).logits
    torch.testing.assert_close(other, eager, atol=1e-5, rtol=1e-4)


def test_xlpe_training_forward_compiles_once_for_repeated_shapes(toy_tokenizer):
    """XL PE writes no state inside its forward (its fixed token ids are a buffer made in `__init__`, not a dict
    filled at the first call), so steps on the same shapes reuse the first compilation: one frame, no recompile."""
    from torch._dynamo.testing import CompileCounter

    tester = TESTERS["xlpe"]()
    batch, _ = training_and_decode_inputs(tester, tester.make_model(toy_tokenizer), toy_tokenizer)
    model = tester.make_model(toy_tokenizer).train()  # never called before: the first call is the compiled one
    dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(model, backend=counter, fullgraph=True)
    for _ in range(3):
        compiled(**batch).loss.backward()
    assert counter.frame_count == 1, f"{counter.frame_count} compilations for one shape"

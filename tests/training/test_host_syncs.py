"""No host sync in a compiled training step or a compiled cached decode step of any family.

The families check their inputs in eager mode (ids in the vocabulary, right padding, positions, tag ranges: one
host sync each) and skip those checks under `torch.compile` (`torch.compiler.is_compiling()` in
`xlpe.models.extra_inputs`). A host sync inside compiled code is Python reading a tensor's value (`bool`, `int`,
`.item()`, `.tolist()`): dynamo cannot trace it and breaks the graph there, and with `fullgraph=True` it raises
instead. So on CPU: each step compiled with `fullgraph=True` (checks on, the default) traces as one graph, while a
check without the guard (the control) is caught. Where CUDA exists, the same steps run under
`torch.cuda.set_sync_debug_mode("error")`, which raises on any synchronising CUDA call (marker `gpu`).
The training report's per-step bookkeeping (`TrainingReport.count_batch`) makes no tensor from a host number.
"""

from __future__ import annotations

import copy

import pytest
import torch
from test_compile_counts import FAMILY_INPUTS, build, examples, tokenizer
from torch._dynamo.testing import CompileCounter

from xlpe.models import seq2seq_scaffold
from xlpe.models.registry import EXTRA_INPUTS, MODEL_FAMILIES, generate_inputs
from xlpe.models.transformers_compat import cache_kwargs, output_cache
from xlpe.training.collator import ExtraInputsDataCollator

FAMILIES = list(MODEL_FAMILIES)
GENERATION_INPUTS = {  # the source-side inputs generate() gets (test-time ones; the oracles are predicted)
    name: tuple(n for n in family.extra_inputs or () if n in generate_inputs() and EXTRA_INPUTS[n].side == "source")
    for name, family in MODEL_FAMILIES.items()
}


def batch_of(name: str, device="cpu") -> tuple[torch.nn.Module, dict]:
    model, bart = build(name)
    rows, batches = examples([(4, 11, 9)], bart)
    keep = {"input_ids", "attention_mask", "labels", *filter(model.config.uses_extra_input, FAMILY_INPUTS[name])}
    batch = ExtraInputsDataCollator(tokenizer(bart), label_pad_token_id=-100)(
        [{k: v for k, v in r.items() if k in keep} for r in rows]
    )
    return model.to(device), {key: value.to(device) for key, value in batch.items()}


def training_step(model, batch):
    model(**batch).loss.backward()


def decode_step_inputs(name: str, model, batch) -> dict:
    """The inputs of the second decode step (a KV cache from the first), as `generate` prepares them."""
    source = {key: batch[key] for key in ("input_ids", "attention_mask", *GENERATION_INPUTS[name]) if key in batch}
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(**source)
        start = torch.full(
            (batch["input_ids"].shape[0], 1), model.config.decoder_start_token_id, device=batch["input_ids"].device
        )
        first = model(
            **model.prepare_inputs_for_generation(
                start, encoder_outputs=encoder_outputs, use_cache=True, attention_mask=batch["attention_mask"]
            )
        )
        ids = torch.cat([start, first.logits[:, -1:].argmax(-1)], dim=1)
        return model.prepare_inputs_for_generation(
            ids,
            encoder_outputs=encoder_outputs,
            use_cache=True,
            attention_mask=batch["attention_mask"],
            **cache_kwargs(output_cache(first)),
        )


@pytest.mark.parametrize("name", FAMILIES)
def test_compiled_training_step_is_one_graph_with_the_checks_on(name):
    model, batch = batch_of(name)
    assert model.config.check_inputs  # the default: eager forwards check (and sync)
    model.train()
    counter = CompileCounter()
    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend=counter, fullgraph=True)  # a check that syncs would raise here
        compiled(**batch).loss.backward()  # (recompiles over steps: test_compile_counts.py)
    finally:
        torch._dynamo.reset()
    assert counter.frame_count == 1 and counter.op_count > 0


@pytest.mark.parametrize("name", FAMILIES)
def test_compiled_cached_decode_step_is_one_graph_with_the_checks_on(name):
    model, batch = batch_of(name)
    model.eval()
    step = decode_step_inputs(name, model, batch)
    counter = CompileCounter()
    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend=counter, fullgraph=True)
        with torch.no_grad():
            compiled_logits = compiled(**copy.deepcopy(step)).logits  # the cache grows in place: a copy per call
            eager_logits = model(**copy.deepcopy(step)).logits
    finally:
        torch._dynamo.reset()
    assert counter.frame_count == 1
    torch.testing.assert_close(compiled_logits, eager_logits)


def test_a_check_without_the_compile_guard_would_be_caught(monkeypatch):
    """The control: an input check that reads a value under compile (no `is_compiling()` guard) fails the
    full-graph compile of the training step, so the tests above do detect a sync in the checks."""

    def unguarded_check(config, input_ids=None, attention_mask=None, inputs_embeds=None):
        if bool((input_ids >= config.vocab_size).any()):  # host sync
            raise ValueError("id out of range")

    monkeypatch.setattr(seq2seq_scaffold, "check_source_inputs", unguarded_check)
    model, batch = batch_of("dpe")
    torch._dynamo.reset()
    try:
        with pytest.raises(Exception, match="(?i)data-dependent|graph break|Unsupported"):
            torch.compile(model, backend=CompileCounter(), fullgraph=True)(**batch)
    finally:
        torch._dynamo.reset()


def test_padding_counters_make_no_tensor_from_a_host_number(monkeypatch, tmp_path):
    """`TrainingReport.count_batch` adds device counts and a host int: no `torch.tensor`/`new_tensor` of a Python
    number (on CUDA a blocking host-to-device copy every step); the totals are still right."""
    from transformers import Seq2SeqTrainingArguments

    from xlpe.training.trainer import ExtraInputsSeq2SeqTrainer

    model, batch = batch_of("dpe")
    trainer = ExtraInputsSeq2SeqTrainer(
        model=model, args=Seq2SeqTrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    )
    made = []
    for name in ("tensor", "as_tensor"):
        original = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda *a, _original=original, **k: made.append(a) or _original(*a, **k))
    original_new_tensor = torch.Tensor.new_tensor
    monkeypatch.setattr(
        torch.Tensor, "new_tensor", lambda self, *a, **k: made.append(a) or original_new_tensor(self, *a, **k)
    )
    trainer.report.count_batch(batch)
    trainer.report.count_batch(batch)
    monkeypatch.undo()
    assert made == []
    real = int(batch["attention_mask"].sum() + (batch["labels"] != -100).sum())
    target = int((batch["labels"] != -100).sum())
    padded = batch["attention_mask"].numel() + batch["labels"].numel()
    assert trainer.report.pop_padding("interval") == (2 * real, 2 * padded, 2 * target)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (set_sync_debug_mode)")
@pytest.mark.parametrize("name", FAMILIES)
def test_no_cuda_sync_in_the_compiled_steps(name):
    """On a GPU: the compiled (inductor) training step and cached decode step of each family, after a warm-up
    call, run under `set_sync_debug_mode("error")` (any synchronising CUDA call raises)."""
    model, batch = batch_of(name, "cuda")
    torch._dynamo.reset()
    compiled = torch.compile(model)
    try:
        model.train()
        for mode in ("default", "error"):
            torch.cuda.set_sync_debug_mode(mode)
            compiled(**batch).loss.backward()
        torch.cuda.set_sync_debug_mode("default")
        model.eval()
        step = decode_step_inputs(name, model, batch)
        with torch.no_grad():
            for mode in ("default", "error"):
                torch.cuda.set_sync_debug_mode(mode)
                compiled(**copy.deepcopy(step))
    finally:
        torch.cuda.set_sync_debug_mode("default")
        torch._dynamo.reset()

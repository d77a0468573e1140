"""`torch.compile` under the Trainer: the compiled training step of every family over token batches of
changing shapes compiles no more often than the stock model it is compared with: once.

`xlpe-train --torch_compile` (a CUDA default) compiles the model through accelerate. Left alone, dynamo traces
the first batch with static shapes, retraces with a dynamic dimension at the first batch where that dimension
changes (once per dimension that changes later than the others) and specialises dimensions of size 1; at
Transformer-base every inductor compile costs minutes of GPU time. `ExtraInputsSeq2SeqTrainer.compute_loss` marks
the batch and length dimensions dynamic before each step; `TokenBatchSampler` makes no one-sentence batch unless
the budget forces it. The batches below are built to hit every retrace of the unmarked step: the batch size and
the lengths change at different steps, and the first batches have source length == target length, later ones not
(an equality guard between the two would retrace there).

Counts: `torch._dynamo.utils.counters["stats"]["unique_graphs"]` (graphs dynamo made: every trace, retrace and
graph-break fragment) with the `eager` back-end: recompiles are decided by dynamo's guards, which do not depend on
the back-end (aot_eager gives the same counts, slower). About 15 s per model on a loaded 2-core CPU.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    MarianConfig,
    MarianMTModel,
    PreTrainedTokenizerFast,
    Seq2SeqTrainingArguments,
)

import xlpe
from xlpe.training.collator import ExtraInputsDataCollator
from xlpe.training.sampling import TokenBatchSampler, batch_sizes
from xlpe.training.trainer import ExtraInputsSeq2SeqTrainer

VOCAB = 64
DIMS = dict(
    vocab_size=VOCAB,
    d_model=32,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=128,
    dropout=0.0,
)
MARIAN = dict(DIMS, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=None)
BART = dict(
    DIMS,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
    forced_bos_token_id=None,
    forced_eos_token_id=None,
)
# (sentences, source length, target length) of each step: S == T first, then only the lengths change, then only
# the batch size, then S != T, then a mix. A one-sentence batch is left out: torch specialises size 1 (one more
# graph for stock and families alike) and the token sampler does not make one (test below).
SHAPES = [
    (4, 10, 10),
    (4, 13, 13),
    (6, 13, 13),
    (6, 13, 9),
    (5, 17, 12),
    (3, 9, 15),
    (7, 11, 11),
    (2, 24, 20),
    (8, 6, 7),
    (4, 19, 16),
    (3, 12, 14),
    (5, 8, 8),
]
BACKEND = "eager"  # dynamo alone (module docstring)
FAMILY_INPUTS = {name: family.extra_inputs or () for name, family in xlpe.MODEL_FAMILIES.items()}
MAX_GRAPHS = 1  # every dimension that changes is dynamic from the first trace: one graph serves every shape
# (without the marking, 3 graphs here for stock Marian and XL PE alike: static, then a retrace per changed dimension)


def build(name: str):
    """(model, bart layout) of one row; tiny dims; XL PE = the combination strategy with its predictor loss."""
    torch.manual_seed(0)
    if name == "Marian":
        return MarianMTModel(MarianConfig(**MARIAN)), False
    if name == "BART":
        return BartForConditionalGeneration(BartConfig(**BART)), True
    family = xlpe.get_family(name)
    bart = issubclass(family.config_class, BartConfig)
    # the family's tiny fields; its source tagger's whole tag set (the examples' tag ids reach 47)
    config = family.tiny_config(**(BART if bart else MARIAN), pos_tags=None)
    return family.generation_model_class(config), bart


def tokenizer(bart: bool) -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, models

    pad, eos = (1, 2) if bart else (0, 1)
    word_level = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t3"))
    return PreTrainedTokenizerFast(
        tokenizer_object=word_level, pad_token=f"t{pad}", eos_token=f"t{eos}", unk_token="t3"
    )


def examples(shapes, bart: bool, seed: int = 0) -> tuple[list[dict], list[list[int]]]:
    """Examples (every family's inputs; the collator keeps the model's) and the batches of indices whose padded
    shapes are `shapes` (each batch's first example has the longest source, its last the longest target)."""
    rng = np.random.default_rng(seed)
    eos = 2 if bart else 1
    rows, batches = [], []
    for sentences, source, target in shapes:
        batch = []
        for k in range(sentences):
            s = source if k == 0 else int(rng.integers(3, source + 1))
            t = target if k == sentences - 1 else int(rng.integers(3, target + 1))
            ranks = rng.permutation(s - 1)
            batch.append(len(rows))
            rows.append(
                {
                    "input_ids": rng.integers(3, VOCAB, s - 1).tolist() + [eos],
                    "attention_mask": [1] * s,
                    "labels": rng.integers(3, VOCAB, t - 1).tolist() + [eos],
                    "reorder_positions": rng.permutation(s - 1).tolist() + [s - 1],
                    "target_positions": np.where(rng.random(s - 1) < 0.85, ranks, -100).tolist() + [-100],
                    "pos_tag_ids": rng.integers(3, 48, s).tolist(),
                    "decoder_pos_tag_ids": rng.integers(3, 48, t).tolist(),
                }
            )
        batches.append(batch)
    return rows, batches


def compiled_training_graphs(name: str, tmp_path, shapes=SHAPES) -> tuple[int, list]:
    """Graphs dynamo made while the Trainer's compiled step (`--torch_compile`, aot_eager) trained on `shapes`,
    and the (input_ids, labels) shapes the step saw."""
    model, bart = build(name)
    rows, batches = examples(shapes, bart)
    reads = getattr(model.config, "uses_extra_input", lambda input_name: True)  # stock configs: every parameter
    names = {n for n in inspect.signature(model.forward).parameters if reads(n)}
    rows = [{k: v for k, v in row.items() if k in names} for row in rows]
    read = [key for key in FAMILY_INPUTS.get(name, ()) if reads(key)]
    assert all(key in rows[0] for key in ("input_ids", "attention_mask", "labels", *read))
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / name),
        report_to="none",
        use_cpu=True,
        max_steps=len(shapes),
        torch_compile=True,
        torch_compile_backend=BACKEND,
        save_strategy="no",
        logging_steps=len(shapes),
        learning_rate=1e-4,
        disable_tqdm=True,
    )
    collator = ExtraInputsDataCollator(tokenizer(bart), label_pad_token_id=-100)
    trainer = ExtraInputsSeq2SeqTrainer(model=model, args=args, train_dataset=rows, data_collator=collator)
    trainer.get_train_dataloader = lambda: torch.utils.data.DataLoader(rows, batch_sampler=batches, collate_fn=collator)
    seen = []
    compute_loss = trainer.compute_loss

    def recording(model, inputs, *args, **kwargs):
        seen.append((tuple(inputs["input_ids"].shape), tuple(inputs["labels"].shape)))
        return compute_loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = recording
    torch._dynamo.reset()
    counters.clear()
    try:
        trainer.train()
        return counters["stats"]["unique_graphs"], seen
    finally:
        torch._dynamo.reset()


@pytest.fixture(scope="module")
def stock_graphs(tmp_path_factory):
    return {name: compiled_training_graphs(name, tmp_path_factory.mktemp("stock"))[0] for name in ("Marian", "BART")}


@pytest.mark.parametrize(
    "name, stock", [(name, "BART" if build(name)[1] else "Marian") for name in xlpe.MODEL_FAMILIES]
)
def test_compiled_training_step_compiles_no_more_than_stock(name, stock, stock_graphs, tmp_path):
    graphs, seen = compiled_training_graphs(name, tmp_path)
    assert seen == [((b, s), (b, t)) for b, s, t in SHAPES]  # the step trained on every designed shape
    # (state written inside the compiled forward, such as a dict cache, fails its guard after the first step and
    # forces one more full trace whatever the shapes; TORCH_LOGS=recompiles names the culprit)
    assert graphs <= stock_graphs[stock], (name, graphs, stock_graphs)
    assert graphs <= MAX_GRAPHS, (name, graphs)


def test_stock_models_compile_once_too(stock_graphs):
    """The bound holds for stock models under the Trainer as well (3 graphs on these shapes without the marking)."""
    assert stock_graphs == {"Marian": MAX_GRAPHS, "BART": MAX_GRAPHS}, stock_graphs


def test_inputs_are_marked_dynamic_only_when_the_trainer_compiles(tmp_path):
    model, bart = build("Marian")
    rows, _ = examples([(3, 7, 5)], bart)
    batch = ExtraInputsDataCollator(tokenizer(bart), label_pad_token_id=-100)(
        [{k: r[k] for k in ("input_ids", "labels")} for r in rows]
    )
    for compiled in (False, True):
        args = Seq2SeqTrainingArguments(
            output_dir=str(tmp_path),
            report_to="none",
            use_cpu=True,
            torch_compile=compiled,
            torch_compile_backend=BACKEND if compiled else None,
        )
        trainer = ExtraInputsSeq2SeqTrainer(model=model, args=args)
        prepared = trainer._prepare_inputs({key: value.clone() for key, value in batch.items()})
        trainer.compute_loss(trainer.model, prepared)  # marks the inputs its forward gets
        marked = {key: getattr(value, "_dynamo_weak_dynamic_indices", set()) for key, value in prepared.items()}
        assert marked == ({key: {0, 1} for key in prepared} if compiled else {key: set() for key in prepared}), marked


def test_token_batches_have_two_sentences_unless_the_budget_forces_one():
    """A one-sentence batch is left only where two sentences of its length exceed the budget or no earlier batch
    (in length order, past batches of two) has three to give; every example once per epoch, within the budget."""
    assert batch_sizes(np.array([2] * 5 + [3]), 6).tolist() == [2, 2, 2]  # the greedy cut alone: [3, 2, 1]
    assert batch_sizes(np.array([1, 1, 1, 2, 2, 3, 5]), 6).tolist() == [2, 2, 2, 1]  # greedy [3, 2, 1, 1]; 5 + 5 > 6
    rng = np.random.default_rng(0)
    for seed in range(30):
        lengths = rng.integers(2, 60, int(rng.integers(20, 400)))
        sampler = TokenBatchSampler(lengths, lengths, max_tokens=int(rng.integers(100, 600)), seed=seed)
        sizes, ordered = sampler.sizes, np.sort(lengths)
        for k in np.flatnonzero(sizes == 1).tolist():
            earlier = [int(n) for n in sizes[:k] if n != 2]
            assert 2 * ordered[np.cumsum(sizes)[k] - 1] > sampler.max_tokens or not earlier or earlier[-1] < 3, (
                seed,
                k,
            )
        assert sorted(np.concatenate(sampler.all_batches()).tolist()) == list(range(len(lengths)))
        assert all(len(b) * lengths[b].max() <= sampler.max_tokens for b in sampler.all_batches())

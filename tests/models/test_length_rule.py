"""The length rule (xlpe/models/length_rule.py): each sentence's budget of new tokens depends on it alone, every
row stays within its budget, a row's output does not depend on the rows batched with it (greedy and beam, fp32),
and the pipeline reports outputs that reached their limit and aligns the tokenizer's limit with the model's."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from conftest import save_tiny_xlpe_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xlpe.models.length_rule import (
    LengthBudgetLogitsProcessor,
    generated_lengths,
    length_budgets,
    length_rule_generate_kwargs,
    limit_warning,
)

PAD, EOS, VOCAB, LIMIT = 0, 1, 40, 24


def tiny_model(eos_bias: float = 0.0):
    """A tiny random XL PE model (position limit 24) whose EOS logit is raised by `eos_bias`, so that some rows end
    on their own before their budget and others reach it."""
    from xlpe import XLPEMarianConfig, XLPEMarianMTModel

    torch.manual_seed(0)
    config = XLPEMarianConfig(
        vocab_size=VOCAB,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=LIMIT,
        dropout=0.0,
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=PAD,
        forced_eos_token_id=EOS,
        init_std=0.3,
    )
    model = XLPEMarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias[0, EOS] += eos_bias
    return model


def right_padded(rows: list[list[int]]) -> dict:
    length = max(map(len, rows))
    ids = torch.full((len(rows), length), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
    return {"input_ids": ids, "attention_mask": ids.ne(PAD).long()}


def sentence(seed: int, length: int) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (length - 1,), generator=generator).tolist() + [EOS]


def generate_by_rule(model, batch: dict, **kwargs) -> tuple[list[list[int]], torch.Tensor]:
    """Each row's new tokens up to its first EOS (inclusive), and the budgets, with the length rule."""
    kwargs, budgets = length_rule_generate_kwargs(batch["attention_mask"], LIMIT, EOS, kwargs)
    with torch.no_grad():
        out = model.generate(**batch, **kwargs)
    lengths = generated_lengths(out, EOS, PAD)
    return [out[i, 1 : 1 + int(n)].tolist() for i, n in enumerate(lengths)], budgets


def test_budget_formula_and_cap():
    assert length_budgets(0, LIMIT) == 10 and length_budgets(3, 100) == 14 and length_budgets(5, 100) == 17
    assert length_budgets(200, 100) == 99
    lengths = torch.tensor([0, 1, 4, 9, 500])
    assert length_budgets(lengths, 272).tolist() == [10, 11, 16, 23, 271]
    assert length_budgets(lengths.numpy(), 272).tolist() == [10, 11, 16, 23, 271]
    with pytest.raises(ValueError, match="limit must be >= 2"):
        length_budgets(lengths, 1)
    with pytest.raises(ValueError, match="eos_token_id"):
        LengthBudgetLogitsProcessor(torch.tensor([3]), None)


def test_processor_forces_eos_per_row_and_shares_budgets_between_beams():
    processor = LengthBudgetLogitsProcessor(torch.tensor([2, 4]), EOS)
    scores = torch.zeros(4, 5)  # 2 sentences x 2 beams
    out = processor(torch.zeros(4, 2, dtype=torch.long), scores)  # 1 token generated: the 2nd is the last of row 0
    assert out[:2, EOS].tolist() == [0, 0] and torch.isinf(out[:2, 2]).all() and (out[2:] == 0).all()


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(2, 14), min_size=1, max_size=4),
    seed=st.integers(0, 1000),
    num_beams=st.sampled_from([1, 3]),
    eos_bias=st.sampled_from([0.0, 1.5]),
)
def test_rows_stay_within_their_budget_and_do_not_depend_on_their_neighbours(lengths, seed, num_beams, eos_bias):
    model = tiny_model(eos_bias)
    rows = [sentence(seed + i, n) for i, n in enumerate(lengths)]
    batched, budgets = generate_by_rule(model, right_padded(rows), num_beams=num_beams)
    assert budgets.tolist() == [min(n * 3 // 2 + 10, LIMIT - 1) for n in lengths]
    for i, row in enumerate(rows):
        assert len(batched[i]) <= budgets[i]
        alone, _ = generate_by_rule(model, right_padded([row]), num_beams=num_beams)
        assert batched[i] == alone[0], (i, num_beams)
    reversed_batch, _ = generate_by_rule(model, right_padded(rows[::-1]), num_beams=num_beams)
    assert reversed_batch[::-1] == batched


def test_an_explicit_cap_replaces_the_rule():
    batch = right_padded([sentence(1, 4), sentence(2, 9)])
    kwargs, budgets = length_rule_generate_kwargs(batch["attention_mask"], LIMIT, EOS, {"max_new_tokens": 5})
    assert kwargs == {"max_length": 6, "max_new_tokens": None} and budgets.tolist() == [5, 5]  # the same cap
    kwargs, budgets = length_rule_generate_kwargs(batch["attention_mask"], LIMIT, EOS, {"max_length": 7})
    assert "logits_processor" not in kwargs and budgets.tolist() == [6, 6]


def test_a_saved_max_length_raises_no_warning_and_a_saved_max_new_tokens_no_override(caplog):
    """OPUS-MT checkpoints save `max_length` 512: the rule's cap beside it must not make transformers warn at
    every call ("Both `max_new_tokens` ... and `max_length` ... seem to have been set"), and a generation config
    with its own `max_new_tokens` must not override the rule's cap."""
    import logging

    batch = right_padded([sentence(1, 4), sentence(2, 9)])
    model = tiny_model()
    plain = generate_by_rule(model, batch, num_beams=2)[0]
    model.generation_config.max_length = 512
    with caplog.at_level(logging.WARNING):
        assert generate_by_rule(model, batch, num_beams=2)[0] == plain
        assert generate_by_rule(model, batch, num_beams=2, max_new_tokens=3)[1].tolist() == [3, 3]
    assert "seem to have been set" not in caplog.text
    model.generation_config.max_new_tokens = 2  # a saved cap: the rule's budgets still decide
    assert generate_by_rule(model, batch, num_beams=2)[0] == plain


def test_generated_lengths_torch_and_numpy():
    ids = torch.tensor([[PAD, 5, 6, EOS, PAD], [PAD, 5, 6, 7, 8], [PAD, EOS, PAD, PAD, PAD]])
    assert generated_lengths(ids, EOS, PAD).tolist() == [3, 4, 1]
    assert generated_lengths(ids.numpy(), EOS, PAD).tolist() == [3, 4, 1]


def test_limit_warning_lists_the_first_numbers():
    text = limit_warning("lines are long", list(range(1, 26)), 30, "detail")
    assert text.startswith("25 of 30 lines are long (detail): line 1, 2,") and text.endswith(", 20, ... (5 more)")


@pytest.fixture(scope="module")
def pipeline(toy_tokenizer, tmp_path_factory):
    from xlpe import XLPETranslationPipeline
    from xlpe.evaluation.model_loading import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(
        str(save_tiny_xlpe_model(toy_tokenizer, tmp_path_factory.mktemp("model"), model_max_length=16))
    )
    return XLPETranslationPipeline(model=model, tokenizer=tokenizer)


TEXTS = [
    "the cat sees the dog",
    "a dog chases the small cat in the garden with the man and the child",
    "die katze",
    "children play in the park",
    "the man reads a book",
]


@pytest.mark.parametrize("num_beams", [1, 3])
def test_pipeline_translations_do_not_depend_on_the_batch(pipeline, num_beams):
    alone = [pipeline(text, num_beams=num_beams)[0]["translation_text"] for text in TEXTS]
    for order in (list(range(len(TEXTS))), [3, 1, 4, 0, 2]):
        for batch_size in (2, len(TEXTS)):
            batched = pipeline([TEXTS[i] for i in order], num_beams=num_beams, batch_size=batch_size)
            assert [r["translation_text"] for r in batched] == [alone[i] for i in order], (order, batch_size)


def test_pipeline_reports_outputs_at_the_limit_and_uses_the_models_limit(pipeline, caplog):
    assert pipeline.tokenizer.model_max_length == pipeline.model.config.max_position_embeddings == 64
    long_text = " ".join(["the small cat sees the dog"] * 3)  # more than the saved tokenizer's 16, less than 64
    with caplog.at_level(logging.WARNING):
        result = pipeline(long_text, return_limits=True)[0]
    assert "Token indices sequence length" not in caplog.text
    assert result["output_at_limit"] is True  # an untrained model never ends on its own
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="xlpe.models.pipeline_translation"):
        pipeline("the cat sees the dog", max_new_tokens=3)
    assert "reached its length limit of 3 new tokens" in caplog.text


def test_numpy_budgets_match_torch():
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]])
    assert (
        length_budgets(mask.sum(-1), LIMIT).tolist() == length_budgets(torch.from_numpy(mask).sum(-1), LIMIT).tolist()
    )

"""2PT (DPE paper Sec. 3.1, Table 2): oracle reorderings, the two-pass pipeline and its oracle variant."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import MarianConfig, MarianMTModel

from xlpe import DPEMarianConfig, DPEMarianMTModel, OracleReorderTranslator, TwoPassTranslator
from xlpe.evaluation.two_pass import (
    oracle_word_positions,
    parse_links,
    reorder_sentence,
    reorder_with_alignment,
    reordering_pairs,
    two_pass_training_pairs,
)

TINY = dict(
    d_model=32,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=64,
    dropout=0.0,
)
SOURCES = ["the cat sees the dog", "a dog chases the small cat"]
ALIGNMENTS = ["0-0 1-1 2-4 3-2 4-3", [(0, 0), (1, 1), (2, 5), (3, 2), (4, 3), (5, 4)]]
GENERATE = dict(num_beams=2, max_new_tokens=5)


def tiny_kwargs(tokenizer):
    return dict(
        TINY,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
        forced_eos_token_id=tokenizer.eos_token_id,
    )


def local_oracle(links, num_words):
    """A tiny stand-in oracle: stable sort by first linked target word; unaligned words sort by their own index."""
    first = {}
    for i, j in links:
        first[i] = min(j, first.get(i, j))
    order = sorted(range(num_words), key=lambda i: first.get(i, i))
    positions = [0] * num_words
    for new, old in enumerate(order):
        positions[old] = new
    return positions


@pytest.fixture()
def two_pass(toy_tokenizer):
    torch.manual_seed(0)
    reorderer = MarianMTModel(MarianConfig(**tiny_kwargs(toy_tokenizer))).eval()
    translator = DPEMarianMTModel(DPEMarianConfig(**tiny_kwargs(toy_tokenizer))).eval()  # any xlpe family works
    return TwoPassTranslator(reorderer, toy_tokenizer, translator, toy_tokenizer)


# --------------------------------------------------------------------------------------------------------
# Oracle reorderings (the training data of both passes)
# --------------------------------------------------------------------------------------------------------


def test_reorder_sentence_places_each_word_at_its_position():
    assert reorder_sentence(["S1", "S2", "S3", "S4"], [0, 3, 2, 1]) == ["S1", "S4", "S3", "S2"]  # paper Fig. 1
    assert reorder_sentence([], []) == []
    with pytest.raises(ValueError, match="permutation"):
        reorder_sentence(["a", "b"], [0, 0])
    with pytest.raises(ValueError, match="2 words but 3 positions"):
        reorder_sentence(["a", "b"], [0, 1, 2])


def test_parse_links_accepts_pharaoh_pairs_and_flat_lists():
    assert parse_links("0-1 2-0") == parse_links([(0, 1), (2, 0)]) == parse_links([0, 1, 2, 0]) == [(0, 1), (2, 0)]
    with pytest.raises(ValueError, match="malformed"):
        parse_links("0:1")
    with pytest.raises(ValueError, match="odd"):
        parse_links([0, 1, 2])


def test_reordering_pairs_with_a_custom_oracle():
    pairs = reordering_pairs(SOURCES, ALIGNMENTS, oracle=local_oracle)
    assert pairs == [
        ("the cat sees the dog", "the cat the dog sees"),
        ("a dog chases the small cat", "a dog the small cat chases"),
    ]
    data = two_pass_training_pairs(SOURCES, ["x", "y"], ALIGNMENTS, oracle=local_oracle)
    assert data["reorderer"] == pairs
    assert data["translator"] == [("the cat the dog sees", "x"), ("a dog the small cat chases", "y")]
    with pytest.raises(ValueError, match="2 sources but 1 alignments"):
        reordering_pairs(SOURCES, ALIGNMENTS[:1], oracle=local_oracle)


def test_oracle_rules_of_the_preparation_module():
    reordering = pytest.importorskip("xlpe.reordering")
    # btg: the XL PE oracle of the preparation step
    assert oracle_word_positions(ALIGNMENTS[0], 5, "btg") == reordering.oracle_xl_positions(
        parse_links(ALIGNMENTS[0]), 5
    )
    assert reorder_with_alignment(SOURCES[0], ALIGNMENTS[0], rule="btg") == "the cat the dog sees"
    # paper (Sec. 3.1): one-to-many -> first target word; many-to-one -> together, in source order;
    # unaligned ("c") keeps its position
    links = "0-3 1-0 1-2 3-1 4-1"
    assert reorder_with_alignment("a b c d e", links, rule="paper") == "b d c e a"
    with pytest.raises(ValueError, match="rule"):
        oracle_word_positions(links, 5, "lader")
    with pytest.raises(ValueError, match="outside the source sentence"):
        oracle_word_positions("7-0", 5, "btg")


# --------------------------------------------------------------------------------------------------------
# The two-pass pipeline (Table 2 row 3) and the oracle variant (row 4)
# --------------------------------------------------------------------------------------------------------


def test_two_pass_translates_raw_text_through_both_passes(two_pass):
    reordered = two_pass.reorder(SOURCES, **GENERATE)
    translations = two_pass(SOURCES, **GENERATE)
    assert len(translations) == 2 and all(isinstance(text, str) for text in translations)
    assert translations == two_pass.translate_reordered(reordered, **GENERATE)
    assert isinstance(two_pass(SOURCES[0], **GENERATE), str)  # one string in, one string out
    assert two_pass([], **GENERATE) == []
    with pytest.raises(ValueError, match="string"):
        two_pass(123)


def test_two_pass_save_load_roundtrip(two_pass, tmp_path):
    expected = two_pass(SOURCES, **GENERATE)
    two_pass.save_pretrained(tmp_path)
    assert (tmp_path / "reorderer" / "config.json").is_file() and (tmp_path / "translator" / "config.json").is_file()
    assert json.loads((tmp_path / "two_pass.json").read_text())["kind"] == "two_pass"
    loaded = TwoPassTranslator.from_pretrained(tmp_path)
    assert type(loaded.reorder_pipeline.model) is MarianMTModel
    assert type(loaded.translate_pipeline.model) is DPEMarianMTModel
    assert loaded(SOURCES, **GENERATE) == expected
    with pytest.raises(ValueError, match="TwoPassTranslator.from_pretrained"):
        OracleReorderTranslator.from_pretrained(tmp_path)


def test_oracle_variant_translates_alignment_reordered_sources(two_pass, tmp_path):
    oracle = OracleReorderTranslator(
        two_pass.translate_pipeline.model, two_pass.translate_pipeline.tokenizer, oracle=local_oracle
    )
    reordered = oracle.reorder(SOURCES, ALIGNMENTS)
    assert reordered == [pair[1] for pair in reordering_pairs(SOURCES, ALIGNMENTS, oracle=local_oracle)]
    translations = oracle(SOURCES, ALIGNMENTS, **GENERATE)
    assert translations == two_pass.translate_reordered(reordered, **GENERATE)
    assert isinstance(oracle(SOURCES[0], ALIGNMENTS[0], **GENERATE), str)
    variant = two_pass.oracle_variant()  # same translator, the recorded rule
    assert (
        variant.rule == two_pass.rule == "btg" and variant.translate_pipeline.model is two_pass.translate_pipeline.model
    )
    rule_based = OracleReorderTranslator(
        two_pass.translate_pipeline.model, two_pass.translate_pipeline.tokenizer, rule="paper"
    )
    rule_based.save_pretrained(tmp_path)
    loaded = OracleReorderTranslator.from_pretrained(tmp_path)
    assert loaded.rule == "paper" and not (tmp_path / "reorderer").exists()
    texts = ["a b c d e"]
    assert loaded(texts, ["0-3 1-0 1-2 3-1 4-1"], **GENERATE) == rule_based(texts, ["0-3 1-0 1-2 3-1 4-1"], **GENERATE)
    with pytest.raises(ValueError, match="OracleReorderTranslator.from_pretrained"):
        TwoPassTranslator.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="not a saved 2PT directory"):
        TwoPassTranslator.from_pretrained(tmp_path / "translator")

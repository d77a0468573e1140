"""mvPE + POS model family: shared family checks plus the paper's properties (Sec. III-IV, Eq. 8-11), the
decoder tags of generated tokens, the raw-text pipeline and bad input."""

from __future__ import annotations

import gzip
import json
import math

import pytest
import torch
from conftest import SHARED_DIR
from family_tester import RegistryFamilyTests
from torch.nn import functional as F

import xlpe.models.configuration_mvpe_pos as configuration
from xlpe import (
    MvPEPosConfig,
    MvPEPosForConditionalGeneration,
    XLPETranslationPipeline,
    mvpe_objective,
)
from xlpe.models.configuration_mvpe_pos import JIEBA_TAGS, PTB_TAGS, choose_pe_step
from xlpe.models.modeling_mvpe_pos import shift_tags_right, token_windows
from xlpe.models.pos_tagging_hub import RawTextTagger, tag_to_id_map
from xlpe.models.sinusoid import sinusoid_table

NLTK_DATA = SHARED_DIR / "data" / "nltk_data"
TINY = {
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "max_position_embeddings": 64,
    "dropout": 0.0,
    "pos_dim": 8,
    "decoder_tagger_hidden_size": 32,
}


def tiny_kwargs(tokenizer, **overrides):
    return {
        **TINY,
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": None,
        "eos_token_id": tokenizer.eos_token_id,
        "decoder_start_token_id": tokenizer.pad_token_id,
        "forced_eos_token_id": tokenizer.eos_token_id,
        "nltk_data": str(NLTK_DATA),
        **overrides,
    }


def fake_tags(ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """A deterministic stand-in for tagger output: a PTB tag id per token, <special> on </s>, <pad> on pads."""
    tags = 3 + ids % len(PTB_TAGS)
    tags = torch.where(ids == 1, torch.full_like(ids, 2), tags)  # </s> (id 1 in the toy tokenizer)
    return tags.masked_fill(~mask.bool(), 0) if mask is not None else tags


def make_model(tokenizer, seed=0, **overrides):
    torch.manual_seed(seed)
    return MvPEPosForConditionalGeneration(MvPEPosConfig(**tiny_kwargs(tokenizer, **overrides))).eval()


def make_batch(tokenizer, sources=("the cat sees the dog", "a dog"), targets=("die katze sieht den hund", "ein hund")):
    batch = dict(tokenizer(list(sources), text_target=list(targets), return_tensors="pt", padding=True))
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
    batch["pos_tag_ids"] = fake_tags(batch["input_ids"], batch["attention_mask"])
    batch["decoder_pos_tag_ids"] = fake_tags(batch["labels"].clamp_min(0), batch["labels"] != -100)
    return batch


class TestMvPEPosFamily(RegistryFamilyTests):
    family_name = "mvpe_pos"

    # the pipeline tags raw text with NLTK: these two need ../shared/data/nltk_data
    def test_in_memory_pipeline(self, toy_tokenizer, shared_dir):
        super().test_in_memory_pipeline(toy_tokenizer)

    def test_fresh_process_remote_code_and_pipeline(self, toy_tokenizer, tmp_path, shared_dir):
        super().test_fresh_process_remote_code_and_pipeline(toy_tokenizer, tmp_path)


# --------------------------------------------------------------------------------------------------------
# mvPE (Eq. 8-10)
# --------------------------------------------------------------------------------------------------------


def vaswani_sinusoid(positions: torch.Tensor, dim: int, base: float) -> torch.Tensor:
    """Eq. 5-6 written out (float64), in the Marian layout: sin(p / base^(2i/d)) then cos(p / base^(2i/d))."""
    i = torch.arange(dim // 2, dtype=torch.float64)
    angles = positions.double()[:, None] / base ** (2 * i / dim)
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


@pytest.mark.parametrize("base", [64.0, 10000.0])
def test_step_one_is_the_vanilla_sinusoid_and_step_k_reads_position_p_times_k(toy_tokenizer, base):
    for step in (1, 3.5):
        model = make_model(toy_tokenizer, pe_step=step, pe_base=base)
        table = model.model.encoder.embed_inputs.positions.table
        expected = vaswani_sinusoid(torch.arange(64) * step, 24, base).float()  # Eq. 9-10: PE(p*k)
        torch.testing.assert_close(table, expected, rtol=0, atol=1e-6)
        assert torch.equal(table, model.model.decoder.embed_inputs.positions.table)
    vanilla = make_model(toy_tokenizer, pe_step=1, pe_base=base).model.encoder.embed_inputs.positions.table
    assert torch.equal(vanilla, sinusoid_table(64, 24, base))


def test_mvpe_objective_is_equation_8_summed_pairwise():
    length, dim, base = 12, 8, 50.0
    for step in (1.0, 2.0, 7.5):
        table = sinusoid_table(length, dim, base, step, dtype=torch.float64)  # row p = PE(p*k)
        brute = sum(
            torch.linalg.vector_norm(table[i] - table[j]).item() for i in range(1, length) for j in range(i + 1, length)
        )
        assert mvpe_objective(step, length, dim, base) == pytest.approx(brute, rel=1e-10)
    curve = mvpe_objective(torch.tensor([1.0, 2.0, 7.5]), length, dim, base)
    assert curve.shape == (3,) and curve[2].item() == pytest.approx(mvpe_objective(7.5, length, dim, base))
    assert mvpe_objective(3, 20, 8) == pytest.approx(mvpe_objective(3, 20, 8, base=20.0))  # base defaults to L
    with pytest.raises(ValueError, match="even"):
        mvpe_objective(1, 10, 7)


def test_auto_step_is_deterministic_lands_on_the_plateau_and_is_stored(toy_tokenizer, tmp_path, monkeypatch):
    choose_pe_step.cache_clear()
    kwargs = tiny_kwargs(toy_tokenizer, pe_step="auto", pe_step_search_max=400)
    first, second = MvPEPosConfig(**kwargs), (choose_pe_step.cache_clear(), MvPEPosConfig(**kwargs))[1]
    k = first.pe_step
    assert isinstance(k, float) and k == second.pe_step
    values = mvpe_objective(torch.arange(1, 401), 64, 24, 64.0)  # L = max_position_embeddings, d = d_model - pos_dim
    plateau = values[200:].median()
    index = int(k) - 1
    assert values[index] >= 0.99 * plateau and bool((values[:index] < 0.99 * plateau).all())
    assert values[index] > 1.05 * values[0]  # k = 1 is well below the plateau: the step matters
    # a saved model never recomputes k, even if the rule would now give another value
    MvPEPosConfig(**kwargs).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["pe_step"] == k
    monkeypatch.setattr(configuration, "choose_pe_step", lambda *a, **kw: pytest.fail("recomputed k on load"))
    assert MvPEPosConfig.from_pretrained(tmp_path).pe_step == k


def test_auto_step_with_base_10000_rises_then_plateaus_within_1000_steps():
    """Fig. 3's shape with the paper's d_emb = 300 and the vanilla base: f grows over the first hundreds of
    steps, then stays within 1% of its plateau."""
    k = choose_pe_step(100, 300, 10000.0, 1000, 0.01)
    values = mvpe_objective(torch.arange(1, 1001), 100, 300, 10000.0)
    assert 50 < k < 1000 and values[int(k) - 1] > 1.3 * values[0]


# --------------------------------------------------------------------------------------------------------
# POS tags concatenated to the input (Eq. 11)
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sides", ["both", "encoder", "decoder", "none"])
@pytest.mark.parametrize("tied", [True, False])
def test_concatenation_widths_and_output_projection(toy_tokenizer, sides, tied):
    model = make_model(toy_tokenizer, pos_tag_sides=sides, tie_word_embeddings=tied, pe_step=2)
    encoder, decoder = model.model.encoder, model.model.decoder
    enc_width, dec_width = (24 if sides in ("both", side) else 32 for side in ("encoder", "decoder"))
    assert encoder.embed_tokens.weight.shape[1] == enc_width and decoder.embed_tokens.weight.shape[1] == dec_width
    ids = torch.tensor([[5, 9, 12, 1]])
    tags = torch.tensor([[3, 17, 40, 2]])
    words = encoder.embed_tokens(ids)
    augmented = encoder.embed_inputs(words, 0, tags)
    assert augmented.shape == (1, 4, 32)  # (d_model - pos_dim) + pos_dim
    torch.testing.assert_close(augmented[..., :enc_width], words + sinusoid_table(64, enc_width, 64.0, 2.0)[:4])
    if sides in ("both", "encoder"):
        torch.testing.assert_close(augmented[..., enc_width:], sinusoid_table(48, 8, 64.0, 2.0)[tags])  # TagPE(t)
    # output layer: tied -> lm_head is the (narrow) word embedding behind a d_model -> d_w projection
    if tied:
        assert model.lm_head.weight.data_ptr() == decoder.embed_tokens.weight.data_ptr()
        assert (model.output_projection is None) == (dec_width == 32)
    else:
        assert model.lm_head.weight.shape == (len(toy_tokenizer), 32) and model.output_projection is None
    assert model(**make_batch(toy_tokenizer)).logits.shape[-1] == len(toy_tokenizer)


def test_changing_tags_changes_the_encoder_output(toy_tokenizer):
    model = make_model(toy_tokenizer)
    batch = make_batch(toy_tokenizer)
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    other = batch["pos_tag_ids"].clone()
    other[0, :3] = torch.tensor([10, 20, 30])
    with torch.no_grad():
        a = model.model.encoder(**inputs, pos_tag_ids=batch["pos_tag_ids"]).last_hidden_state
        b = model.model.encoder(**inputs, pos_tag_ids=other).last_hidden_state
        again = model.model.encoder(**inputs, pos_tag_ids=batch["pos_tag_ids"]).last_hidden_state
    assert (a[0] - b[0]).abs().max() > 1e-3 and torch.equal(a[1], b[1]) and torch.equal(a, again)
    untagged = make_model(toy_tokenizer, pos_tag_sides="decoder")  # the encoder then ignores source tags
    with torch.no_grad():
        assert torch.equal(
            untagged.model.encoder(**inputs, pos_tag_ids=batch["pos_tag_ids"]).last_hidden_state,
            untagged.model.encoder(**inputs, pos_tag_ids=other).last_hidden_state,
        )


def test_learned_tag_embedding_ablation(toy_tokenizer):
    sinusoid = make_model(toy_tokenizer)
    learned = make_model(toy_tokenizer, pos_tag_encoding="learned")
    assert not any("tags" in name for name in sinusoid.state_dict())  # a fixed function, rebuilt on load
    assert "model.encoder.embed_inputs.tags.table.weight" in learned.state_dict()
    out = learned(**make_batch(toy_tokenizer))
    out.loss.backward()
    assert learned.model.encoder.embed_inputs.tags.table.weight.grad.abs().sum() > 0


# --------------------------------------------------------------------------------------------------------
# Decoder tags: teacher forcing, the hypothesis tagger, generation with beams
# --------------------------------------------------------------------------------------------------------


def test_loss_is_translation_plus_weighted_tag_loss_and_gold_tags_are_shifted(toy_tokenizer):
    for mode in ("predicted", "gold"):
        model = make_model(toy_tokenizer, tag_loss_weight=0.25, decoder_tags_in_training=mode)
        batch = make_batch(toy_tokenizer)
        out = model(**batch)
        torch.testing.assert_close(out.loss, out.translation_loss + 0.25 * out.tag_loss)
        gold_inputs = shift_tags_right(batch["decoder_pos_tag_ids"])
        assert gold_inputs[0, 0] == 2 and torch.equal(gold_inputs[:, 1:], batch["decoder_pos_tag_ids"][:, :-1])
        expected = gold_inputs if mode == "gold" else out.tag_logits.argmax(-1)
        assert torch.equal(out.decoder_input_pos_tag_ids, expected)
    without = {k: v for k, v in batch.items() if k != "decoder_pos_tag_ids"}
    out = model(**without)
    assert out.tag_loss is None and torch.equal(out.loss, out.translation_loss)


def test_token_windows_are_causal():
    windows = token_windows(torch.tensor([[7, 8, 9]]), 3, fill_id=0)
    assert windows.tolist() == [[[0, 0, 7], [0, 7, 8], [7, 8, 9]]]


def test_beam_search_scores_equal_teacher_forcing_with_the_hypothesis_tags(toy_tokenizer):
    """If a beam ever used another beam's tags, its score would differ from re-scoring its final hypothesis."""
    model = make_model(toy_tokenizer, init_std=0.3)
    batch = make_batch(toy_tokenizer)
    source = {k: batch[k] for k in ("input_ids", "attention_mask", "pos_tag_ids")}
    out = model.generate(
        **source,
        num_beams=4,
        num_return_sequences=2,
        max_new_tokens=8,
        length_penalty=0.0,
        forced_eos_token_id=None,
        output_scores=True,
        return_dict_in_generate=True,
    )
    sequences = out.sequences
    expanded = {k: v.repeat_interleave(2, dim=0) for k, v in source.items()}
    with torch.no_grad():
        rescored = model(**expanded, decoder_input_ids=sequences[:, :-1])
        all_unk = model(
            **expanded,
            decoder_input_ids=sequences[:, :-1],
            decoder_input_pos_tag_ids=torch.ones_like(sequences[:, :-1]),
        )
    assert (rescored.logits - all_unk.logits).abs().max() > 1e-3  # decoder tags do change the predictions
    log_probs = F.log_softmax(rescored.logits, dim=-1).gather(-1, sequences[:, 1:, None])[..., 0]
    ended = (sequences[:, 1:] == toy_tokenizer.eos_token_id).long().cumsum(-1)
    real = (ended == 0) | ((ended == 1) & (sequences[:, 1:] == toy_tokenizer.eos_token_id))
    torch.testing.assert_close((log_probs * real).sum(-1), out.sequences_scores, rtol=1e-4, atol=1e-4)
    without_cache = model.generate(
        **source,
        num_beams=4,
        num_return_sequences=2,
        max_new_tokens=8,
        length_penalty=0.0,
        forced_eos_token_id=None,
        use_cache=False,
    )  # every step re-tags the whole hypothesis
    assert torch.equal(without_cache, sequences)


def test_generation_tags_each_token_of_the_running_hypothesis(toy_tokenizer):
    """Train the tagger on a token -> tag function, then check every tag generate() feeds the decoder."""
    model = make_model(toy_tokenizer, decoder_tagger_window=2)
    batch = make_batch(
        toy_tokenizer,
        sources=["the cat sees the dog", "a dog chases the small cat"],
        targets=["die katze sieht den hund", "ein hund jagt die kleine katze"],
    )
    vocab = torch.arange(len(toy_tokenizer))
    lexicon = 3 + vocab % 7  # the "real tagger" of this test
    lexicon[toy_tokenizer.pad_token_id] = 2  # the start token is special
    torch.manual_seed(0)  # decoder inputs: the start token, then any tokens
    train_ids = torch.cat(
        [torch.zeros(128, 1, dtype=torch.long), torch.randint(1, len(toy_tokenizer), (128, 5))], dim=1
    )
    optimizer = torch.optim.Adam(model.model.decoder.hypothesis_tagger.parameters(), lr=1e-2)
    for _ in range(100):
        logits = model.model.decoder.tag_logits(train_ids)
        optimizer.zero_grad()
        F.cross_entropy(logits.flatten(0, 1), lexicon[train_ids].flatten()).backward()
        optimizer.step()
    seen = []

    def spy(module, args, kwargs):
        seen.append((kwargs["input_ids"].clone(), kwargs["pos_tag_ids"].clone()))

    handle = model.model.decoder.register_forward_pre_hook(spy, with_kwargs=True)
    try:
        generated = model.generate(
            **{k: batch[k] for k in ("input_ids", "attention_mask", "pos_tag_ids")},
            decoder_pos_tag_ids=batch["decoder_pos_tag_ids"],  # gold: must be ignored
            num_beams=3,
            max_new_tokens=6,
        )
    finally:
        handle.remove()
    assert generated.shape[0] == 2 and len(seen) > 2
    for token_ids, tags in seen:
        assert torch.equal(tags, lexicon[token_ids])


def test_hypothesis_tagger_accuracy_on_reference_translations(shared_dir):
    """Sub-word tags of English reference translations (Multi30k test 2016): the jointly trained tagger's
    tags vs NLTK's, after training on a slice (docs/mvpe_pos.md has the full-data numbers)."""
    from xlpe.features.tagging import get_tagger, subword_tag_ids
    from xlpe.features.tokenization import train_joint_tokenizer

    def read(name, n):
        with gzip.open(shared_dir / "data" / "multi30k" / "raw" / name, "rt", encoding="utf-8") as handle:
            return [" ".join(next(handle).split()) for _ in range(n)]

    train, test = read("train.en.gz", 3000), read("test_2016_flickr.en.gz", 300)
    tokenizer = train_joint_tokenizer(train, vocab_size=2000)
    tagger = get_tagger("nltk-en", nltk_data=str(shared_dir / "data" / "nltk_data"))

    def features(sentences):
        encoded = tokenizer(sentences, padding=True, return_tensors="pt")
        word_tags = tagger.tag_ids([s.split() for s in sentences])
        tags = [
            subword_tag_ids(w, encoded.word_ids(i)) + [0] * encoded["input_ids"].shape[1]
            for i, w in enumerate(word_tags)
        ]
        labels = encoded["input_ids"].masked_fill(encoded["attention_mask"] == 0, -100)
        gold = torch.tensor([row[: labels.shape[1]] for row in tags]).masked_fill(labels == -100, 0)
        return labels, gold

    torch.manual_seed(0)
    config = MvPEPosConfig(
        d_model=64,
        pos_dim=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        vocab_size=len(tokenizer),
        pe_step=1,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        bos_token_id=None,
        decoder_tagger_hidden_size=128,
    )
    model = MvPEPosForConditionalGeneration(config)
    parameters = [*model.model.decoder.hypothesis_tagger.parameters(), model.model.shared.weight]
    optimizer = torch.optim.Adam(parameters, lr=3e-3)
    labels, gold = features(train)
    for _epoch in range(4):
        for batch in torch.randperm(len(train)).split(100):
            decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels[batch])
            _, _, loss = model.model.decoder_input_tags(decoder_input_ids, decoder_pos_tag_ids=gold[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    labels, gold = features(test)
    with torch.no_grad():  # exactly what generation would feed the decoder, had it generated the reference
        predicted = model.model.decoder.tag_logits(model.prepare_decoder_input_ids_from_labels(labels)).argmax(-1)
    target = shift_tags_right(gold)
    words = target > 2  # real tokens (not pad, not </s> or the start token)
    accuracy = (predicted[words] == target[words]).float().mean().item()
    print(f"hypothesis tagger accuracy vs NLTK on {len(test)} reference translations: {accuracy:.3f}")
    assert accuracy > 0.8


# --------------------------------------------------------------------------------------------------------
# The pipeline: raw text -> tags -> translation
# --------------------------------------------------------------------------------------------------------


def test_pipeline_tags_raw_english_with_nltk_like_the_training_features(toy_tokenizer, shared_dir):
    from xlpe.features.tagging import get_tagger, subword_tag_ids

    model = make_model(toy_tokenizer, nltk_data=str(shared_dir / "data" / "nltk_data"))
    texts = ["The cat sees the dog.", "A small dog chases the cat in the garden"]
    encoded = toy_tokenizer(texts, return_tensors="pt", padding=True)
    tag_ids = model.prepare_pipeline_inputs(texts, toy_tokenizer, encoded)["pos_tag_ids"]
    assert tag_ids.shape == encoded["input_ids"].shape
    reference = get_tagger("nltk-en", nltk_data=str(shared_dir / "data" / "nltk_data"))  # what xlpe-prepare uses
    for row, text in enumerate(texts):
        word_ids = encoded.word_ids(row)
        expected = subword_tag_ids(reference.tag_ids([text.split()])[0], word_ids)
        real = encoded["attention_mask"][row].bool()
        assert tag_ids[row][real].tolist() == expected[: int(real.sum())]
        assert (tag_ids[row][~real] == 0).all()
    assert tag_ids[0, 0].item() == 3 + PTB_TAGS.index("DT")  # "The"
    translator = XLPETranslationPipeline(model=model, tokenizer=toy_tokenizer)
    result = translator(texts, num_beams=2, max_new_tokens=5)
    assert len(result) == 2 and all(isinstance(item["translation_text"], str) for item in result)


def test_unknown_tags_map_to_unk_and_are_counted(toy_tokenizer, shared_dir):
    tagger = RawTextTagger("nltk-en", ["DT", "NN"], str(shared_dir / "data" / "nltk_data"))
    encoded = toy_tokenizer(["the cat sees the dog"], return_tensors="pt")
    tag_ids = tagger.token_tag_ids(["the cat sees the dog"], encoded)[0].tolist()
    words = [tag_ids[i] for i, w in enumerate(encoded.word_ids(0)) if w is not None]
    assert set(words) <= {1, 3, 4} and 1 in words and tag_ids[-1] == 2
    assert tagger.unknown_tags["VBZ"] >= 1 and "DT" not in tagger.unknown_tags
    with pytest.raises(ValueError, match="fast tokenizer"):
        tagger.token_tag_ids(["the cat"], {"input_ids": torch.tensor([[5, 6]])})


def test_jieba_tags_raw_chinese_by_character_offsets(toy_tokenizer):
    pytest.importorskip("jieba")
    tagger = RawTextTagger("jieba-zh", list(JIEBA_TAGS))
    text = "我爱北京"
    encoded = toy_tokenizer([text], return_tensors="pt")
    tag_ids = tagger.token_tag_ids([text], encoded)[0].tolist()
    assert tag_ids[0] == 3 + JIEBA_TAGS.index("r") and tag_ids[-1] == 2  # 我/r ... </s>


def test_tag_sets_and_id_convention_match_xlpe_tagging():
    from xlpe.features import tagging

    assert PTB_TAGS == tagging.PTB_TAGS and JIEBA_TAGS == tagging.JIEBA_TAGS
    vocabulary = tagging.builtin_vocabulary("ptb")
    config = MvPEPosConfig(d_model=32, pos_dim=8, max_position_embeddings=16, pe_step=1, pos_tags=vocabulary.to_list())
    assert config.pos_tags == list(PTB_TAGS) and config.num_tag_ids("encoder") == len(vocabulary)
    assert tag_to_id_map(config.pos_tags) == vocabulary.tag_to_id  # the pipeline's ids = the training features'
    assert MvPEPosConfig(
        d_model=32, pos_dim=8, max_position_embeddings=16, pe_step=1, pos_tagger="jieba-zh"
    ).pos_tags == list(JIEBA_TAGS)


# --------------------------------------------------------------------------------------------------------
# Configuration and bad input
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"pe_step": 0.5}, "pe_step"),
        ({"pe_step": "plateau"}, "pe_step"),
        ({"pe_base": 1.0}, "pe_base"),
        ({"pos_dim": 32}, "pos_dim"),
        ({"pos_tag_sides": "source"}, "pos_tag_sides"),
        ({"pos_tag_encoding": "onehot"}, "pos_tag_encoding"),
        ({"pos_tags": ["NN", "NN"]}, "pos_tags"),
        ({"pos_tags": ["NN", "<unk>"]}, "pos_tags"),
        ({"decoder_pos_tags": []}, "decoder_pos_tags"),
        ({"pos_tagger": "spacy:en_core_web_sm"}, "pos_tags must be given"),
        ({"decoder_tags_in_training": "oracle"}, "decoder_tags_in_training"),
        ({"decoder_tagger_window": 0}, "decoder_tagger_window"),
        ({"tag_loss_weight": -1.0}, "tag_loss_weight"),
        (
            {"d_model": 34, "pos_dim": 9, "encoder_attention_heads": 2, "decoder_attention_heads": 2},
            "pe_step",
        ),  # odd width
    ],
)
def test_invalid_config_values_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MvPEPosConfig(**{"d_model": 32, "pos_dim": 8, "max_position_embeddings": 64, **kwargs})


@pytest.mark.parametrize(
    "name, make_tags, message",
    [
        ("pos_tag_ids", lambda b: b["pos_tag_ids"][:, :-1], r"shape \(2, \d+\)"),
        ("pos_tag_ids", lambda b: b["pos_tag_ids"].float(), "integer tensor"),
        ("pos_tag_ids", lambda b: b["pos_tag_ids"].tolist(), "torch.LongTensor"),
        ("pos_tag_ids", lambda b: b["pos_tag_ids"] + 100, r"\[0, 48\)"),
        ("pos_tag_ids", lambda b: b["pos_tag_ids"] - 5, r"\[0, 48\)"),
        ("decoder_pos_tag_ids", lambda b: b["decoder_pos_tag_ids"][:, 1:], r"shape \(2, \d+\)"),
        ("decoder_pos_tag_ids", lambda b: b["decoder_pos_tag_ids"] + 48, r"\[0, 48\)"),
    ],
)
def test_bad_tag_ids_raise_value_error_naming_them(toy_tokenizer, name, make_tags, message):
    model = make_model(toy_tokenizer)
    batch = make_batch(toy_tokenizer)
    batch[name] = make_tags(batch)
    with pytest.raises(ValueError, match=message) as info:
        model(**batch)
    assert name in str(info.value)
    if name == "pos_tag_ids":
        with pytest.raises(ValueError, match=name):
            model.generate(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                pos_tag_ids=batch[name],
                max_new_tokens=3,
            )


def test_pad_slots_of_tag_ids_are_ignored_and_missing_tags_are_unknown(toy_tokenizer):
    model = make_model(toy_tokenizer)
    batch = make_batch(toy_tokenizer)
    garbage = batch["pos_tag_ids"].clone()
    garbage[batch["attention_mask"] == 0] = 999
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    with torch.no_grad():
        a = model.model.encoder(**inputs, pos_tag_ids=batch["pos_tag_ids"]).last_hidden_state
        b = model.model.encoder(**inputs, pos_tag_ids=garbage).last_hidden_state
        untagged = model.model.encoder(**inputs).last_hidden_state
        all_unk = model.model.encoder(**inputs, pos_tag_ids=torch.ones_like(garbage)).last_hidden_state
    assert torch.equal(a, b) and torch.equal(untagged, all_unk)


def test_over_long_input_is_a_clear_error(toy_tokenizer):
    model = make_model(toy_tokenizer)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(input_ids=torch.full((1, 70), 5), decoder_input_ids=torch.zeros(1, 1, dtype=torch.long))


def test_sdpa_matches_eager_in_every_tag_configuration(toy_tokenizer):
    batch = make_batch(toy_tokenizer)
    for sides in ("encoder", "none"):
        eager = make_model(toy_tokenizer, pos_tag_sides=sides, attn_implementation="eager")
        sdpa = make_model(toy_tokenizer, pos_tag_sides=sides, attn_implementation="sdpa")
        sdpa.load_state_dict(eager.state_dict())
        with torch.no_grad():
            torch.testing.assert_close(eager(**batch).logits, sdpa(**batch).logits, rtol=1e-4, atol=1e-5)
    assert math.isfinite(eager(**batch).loss.item())

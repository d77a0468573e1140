"""Source POS tags on the Marian-based families (XL PE + POS, DPE + POS; source_tags.py): the whole family
test suite with tags on, the tags really used and checked, the config rules, and what xlpe-train makes of it."""

from __future__ import annotations

import json

import pytest
import test_modeling_dpe
import test_modeling_xlpe
import torch
from conftest import SHARED_DIR
from family_tester import tiny_kwargs
from test_modeling_mvpe_pos import fake_tags

from xlpe import DPEMarianConfig, XLPEMarianConfig, XLPEMarianMTModel
from xlpe.models.tag_sets import PTB_TAGS
from xlpe.training.model_setup import model_features, untrainable_decoder_tags

NLTK_DATA = str(SHARED_DIR / "data" / "nltk_data")
TAGGED = {"pos_tagger": "nltk-en", "nltk_data": NLTK_DATA}


class TaggedFamily:
    """Mixed in before a family's tests: every family test with source tags on."""

    def make_config(self, tokenizer, **overrides):
        return super().make_config(tokenizer, **{**TAGGED, **overrides})

    def extra_inputs(self, batch):
        return {
            **super().extra_inputs(batch),
            "pos_tag_ids": fake_tags(batch["input_ids"], batch.get("attention_mask")),
        }

    # the pipeline tags raw text with NLTK: these two need ../shared/data/nltk_data
    def test_in_memory_pipeline(self, toy_tokenizer, shared_dir):
        super().test_in_memory_pipeline(toy_tokenizer)

    def test_fresh_process_remote_code_and_pipeline(self, toy_tokenizer, tmp_path, shared_dir):
        super().test_fresh_process_remote_code_and_pipeline(toy_tokenizer, tmp_path)


class TestXLPEPosFamily(TaggedFamily, test_modeling_xlpe.TestXLPEFamily):
    """XL PE + POS (Combination, the default strategy)."""


class TestDPEPosFamily(TaggedFamily, test_modeling_dpe.TestDPEFamily):
    """DPE + POS."""


def source(tokenizer, texts=("the cat sees the dog", "a dog chases the small cat in the garden")):
    batch = dict(tokenizer(list(texts), return_tensors="pt", padding=True))
    return batch, fake_tags(batch["input_ids"], batch["attention_mask"])


# --------------------------------------------------------------------------------------------------------
# The tags are used, where they should be, and checked
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tester", [TestXLPEPosFamily, TestDPEPosFamily], ids=["xlpe", "dpe"])
def test_tags_change_the_encoding_and_pad_slots_do_not(tester, toy_tokenizer):
    model = tester().make_model(toy_tokenizer, init_std=0.3)
    batch, tags = source(toy_tokenizer)
    encoder = model.get_encoder()
    with torch.no_grad():
        tagged = encoder(**batch, pos_tag_ids=tags).last_hidden_state
        other = encoder(**batch, pos_tag_ids=torch.where(batch["attention_mask"].bool(), 3, 0)).last_hidden_state
        pads = tags.masked_fill(~batch["attention_mask"].bool(), 7)  # any value on pad slots
        padded = encoder(**batch, pos_tag_ids=pads).last_hidden_state
    real = batch["attention_mask"].bool()
    assert (tagged - other)[real].abs().max() > 1e-2
    assert torch.allclose(tagged, padded)


def test_the_tag_table_starts_like_the_word_embeddings(toy_tokenizer):
    model = TestXLPEPosFamily().make_model(toy_tokenizer, init_std=0.02)
    table = model.get_encoder().source_tags.table.weight
    assert table.shape == (3 + len(PTB_TAGS), 32) and torch.all(table[0] == 0)
    assert 0.01 < float(table[1:].detach().std()) < 0.03  # N(0, init_std), then scaled by embed_scale as the words are


def test_a_model_without_a_tagger_ignores_tags_and_has_no_table(toy_tokenizer):
    model = test_modeling_xlpe.TestXLPEFamily().make_model(toy_tokenizer)
    batch, tags = source(toy_tokenizer)
    assert model.get_encoder().source_tags is None and not model.config.uses_extra_input("pos_tag_ids")
    with torch.no_grad():
        plain = model.get_encoder()(**batch).last_hidden_state
        given = model.get_encoder()(**batch, pos_tag_ids=tags).last_hidden_state
    assert torch.equal(plain, given)
    assert "pos_tag_ids" not in model_features(model) and "pos_tag_ids" in model_features(
        TestXLPEPosFamily().make_model(toy_tokenizer)
    )


def test_out_of_range_tags_are_a_value_error_naming_the_argument(toy_tokenizer):
    model = TestXLPEPosFamily().make_model(toy_tokenizer)
    batch, tags = source(toy_tokenizer)
    tags[1, 2] = 3 + len(PTB_TAGS)
    with pytest.raises(ValueError, match=r"`pos_tag_ids` values must lie in \[0, 48\).*row 1, token 2"):
        model(**batch, pos_tag_ids=tags)
    with pytest.raises(ValueError, match="pos_tag_ids.*shape"):
        model(**batch, pos_tag_ids=tags[:, :2])


def test_missing_tags_mean_unknown_tags(toy_tokenizer):
    model = TestXLPEPosFamily().make_model(toy_tokenizer, init_std=0.3)
    batch, _ = source(toy_tokenizer)
    unknown = torch.ones_like(batch["input_ids"]).masked_fill(~batch["attention_mask"].bool(), 0)
    with torch.no_grad():
        assert torch.allclose(
            model.get_encoder()(**batch).last_hidden_state,
            model.get_encoder()(**batch, pos_tag_ids=unknown).last_hidden_state,
        )


def test_generate_reads_the_tags_and_cache_changes_nothing(toy_tokenizer):
    model = TestXLPEPosFamily().make_model(toy_tokenizer, init_std=0.3)
    batch, tags = source(toy_tokenizer)
    options = dict(num_beams=2, max_new_tokens=6, do_sample=False)
    cached = model.generate(**batch, pos_tag_ids=tags, **options)
    assert torch.equal(cached, model.generate(**batch, pos_tag_ids=tags, use_cache=False, **options))
    with torch.no_grad():
        scores = [model(**batch, pos_tag_ids=t, decoder_input_ids=cached).logits for t in (tags, torch.ones_like(tags))]
    assert (scores[0] - scores[1]).abs().max() > 1e-3


# --------------------------------------------------------------------------------------------------------
# Config rules
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("config_class", [XLPEMarianConfig, DPEMarianConfig])
def test_config_fills_the_taggers_tag_set_and_rejects_what_cannot_work(config_class):
    assert config_class().pos_tagger is None and config_class().pos_tags is None
    config = config_class(pos_tagger="nltk-en")
    assert config.pos_tags == list(PTB_TAGS) and config.num_source_tag_ids() == 3 + len(PTB_TAGS)
    assert config_class(pos_tagger="mine", pos_tags=["<pad>", "<unk>", "<special>", "A", "B"]).pos_tags == ["A", "B"]
    with pytest.raises(ValueError, match="pos_tagger is None"):
        config_class(pos_tags=["A"])
    with pytest.raises(ValueError, match="no built-in tag set"):
        config_class(pos_tagger="spacy:de_core_news_sm")
    with pytest.raises(ValueError, match="distinct"):
        config_class(pos_tagger="mine", pos_tags=["A", "A"])
    with pytest.raises(ValueError, match="pos_tagger must be a tagger name"):
        config_class(pos_tagger="")


def test_tags_stack_with_every_xl_strategy_and_the_position_options(toy_tokenizer):
    batch, tags = source(toy_tokenizer)
    for overrides in (
        {"xl_strategy": "in", "xl_heads": 0},
        {"xl_strategy": "head"},
        {"relative_attention_max_distance": 4},
        {"xl_strategy": "none", "directional_attention": True},
    ):
        model = XLPEMarianMTModel(XLPEMarianConfig(**tiny_kwargs(toy_tokenizer), **TAGGED, **overrides)).eval()
        labels = toy_tokenizer(text_target=["die katze", "der hund jagt"], return_tensors="pt", padding=True)[
            "input_ids"
        ]
        assert torch.isfinite(model(**batch, pos_tag_ids=tags, labels=labels).loss), overrides


# --------------------------------------------------------------------------------------------------------
# xlpe-train: mvPE+POS without a target tagger
# --------------------------------------------------------------------------------------------------------


def test_mvpe_without_a_target_tagger_tags_the_encoder_only():
    from xlpe import MvPEPosConfig

    taggers = {"source": object(), "target": None}
    assert untrainable_decoder_tags(MvPEPosConfig, taggers, {}) == {"pos_tag_sides": "encoder"}
    assert untrainable_decoder_tags(MvPEPosConfig, taggers, {"pos_tag_sides": "none"}) == {}
    assert untrainable_decoder_tags(MvPEPosConfig, {"source": object(), "target": object()}, {}) == {}
    assert untrainable_decoder_tags(XLPEMarianConfig, taggers, {}) == {}
    with pytest.raises(ValueError, match="--target_tagger"):
        untrainable_decoder_tags(MvPEPosConfig, taggers, {"pos_tag_sides": "both"})


def test_a_prepared_dataset_tagged_with_another_tag_set_is_refused():
    from xlpe.training.data import check_tag_vocabulary
    from xlpe.training.errors import UsageError

    config = XLPEMarianConfig(**TAGGED)
    same = {"tag_vocabularies": {"source": ["<pad>", "<unk>", "<special>", *PTB_TAGS]}}
    check_tag_vocabulary("prep", "train", same, config, ["reorder_positions", "pos_tag_ids"])
    other = {"tag_vocabularies": {"source": ["<pad>", "<unk>", "<special>", "n", "v"]}}
    with pytest.raises(UsageError, match=r"prep \[train\] was tagged with another tag set \(2 tags"):
        check_tag_vocabulary("prep", "train", other, config, ["reorder_positions", "pos_tag_ids"])
    check_tag_vocabulary("prep", "train", other, config, ["reorder_positions"])  # tags not read: no check


def test_taggers_are_resolved_only_for_a_model_that_reads_tags():
    from types import SimpleNamespace

    from xlpe import MvPEPosConfig
    from xlpe.training.data import resolve_taggers

    args = SimpleNamespace(
        source_tagger=None, target_tagger=None, nltk_data=NLTK_DATA, uses_builtin_corpus=lambda: False
    )
    assert resolve_taggers(args, XLPEMarianConfig) == {}  # no tagger asked for: XL PE without tags
    assert resolve_taggers(args, MvPEPosConfig, {"pos_tag_sides": "none"}) == {}  # mvPE alone needs no tagger
    assert resolve_taggers(args, XLPEMarianConfig, {"pos_tagger": "nltk-en"})["source_spec"] == "nltk-en"
    assert resolve_taggers(args, MvPEPosConfig)["source_spec"] == "nltk-en"  # mvPE+POS: its default tagger


# --------------------------------------------------------------------------------------------------------
# A trained tagger file ("perceptron:<file>", xlpe-tagger) travels inside the checkpoint
# --------------------------------------------------------------------------------------------------------


@pytest.fixture
def toy_tagger_file(tmp_path_factory):
    """A perceptron tagger trained on toy English sentences in the toy tokenizer's words."""
    from xlpe.features.tagger_training import save_tagger, train_perceptron_tagger

    nouns, verbs = ("cat", "dog", "garden"), ("sees", "chases")
    sentences = [
        [("the", "DT"), (a, "NN"), (v, "VBZ"), ("a", "DT"), (b, "NN")] for a in nouns for v in verbs for b in nouns
    ]
    path = tmp_path_factory.mktemp("tagger") / "toy-en.json"
    save_tagger(train_perceptron_tagger(sentences * 3, iterations=3), path)
    return path


class FileTagged(test_modeling_xlpe.TestXLPEFamily):
    """XL PE with a trained tagger file (no "Test" in the name: not collected; the tests below use it)."""

    tagger_file = None

    def make_config(self, tokenizer, **overrides):
        tags = dict(pos_tagger=f"perceptron:{self.tagger_file}", pos_tags=["DT", "NN", "VBZ"])
        return super().make_config(tokenizer, **tags, **overrides)


def test_save_pretrained_ships_the_tagger_file_and_a_moved_checkpoint_still_tags(
    toy_tokenizer, toy_tagger_file, tmp_path, monkeypatch
):
    import shutil

    from xlpe import XLPETranslationPipeline

    tester = FileTagged()
    tester.tagger_file = toy_tagger_file
    model = tester.make_model(toy_tokenizer)
    model.save_pretrained(tmp_path / "first")
    toy_tokenizer.save_pretrained(tmp_path / "first")
    assert (tmp_path / "first" / "pos_tagger.json").read_bytes() == toy_tagger_file.read_bytes()
    saved = json.loads((tmp_path / "first" / "config.json").read_text())
    assert saved["pos_tagger"] == "perceptron:pos_tagger.json"
    assert model.config.pos_tagger == f"perceptron:{toy_tagger_file}"  # the model in memory keeps its own
    shutil.move(tmp_path / "first", tmp_path / "moved")  # nothing outside the checkpoint is needed any more
    toy_tagger_file.unlink()
    monkeypatch.chdir(tmp_path)
    loaded = XLPEMarianMTModel.from_pretrained(tmp_path / "moved").eval()
    texts = ["the dog sees a cat", "a garden"]
    encoded = toy_tokenizer(texts, return_tensors="pt", padding=True)
    tags = loaded.prepare_pipeline_inputs(texts, toy_tokenizer, encoded)["pos_tag_ids"]
    words = {3: "DT", 4: "NN", 5: "VBZ"}  # ids after <pad>, <unk>, <special>
    first_tokens = [t for t, w in zip(tags[0].tolist(), encoded.encodings[0].word_ids) if w is not None]
    assert set(first_tokens) <= set(words) and {words[t] for t in first_tokens} == {"DT", "NN", "VBZ"}
    translator = XLPETranslationPipeline(model=loaded, tokenizer=toy_tokenizer)
    assert isinstance(translator("the cat sees a dog", max_new_tokens=4)[0]["translation_text"], str)
    loaded.save_pretrained(tmp_path / "again")  # re-saving a loaded model copies the file from its own directory
    assert (tmp_path / "again" / "pos_tagger.json").is_file()
    shutil.rmtree(
        tmp_path / "moved"
    )  # the directory it came from is gone (a rotated-away checkpoint): saving still works
    loaded.save_pretrained(tmp_path / "later")
    assert (tmp_path / "later" / "pos_tagger.json").read_bytes() == (
        tmp_path / "again" / "pos_tagger.json"
    ).read_bytes()
    from xlpe.training.push import check_upload_folder

    assert not any("POS tagger" in problem for problem in check_upload_folder(tmp_path / "again"))
    (tmp_path / "again" / "pos_tagger.json").unlink()  # xlpe-push refuses a folder without it
    problems = " ".join(check_upload_folder(tmp_path / "again"))
    assert "the POS tagger file of pos_tagger='perceptron:pos_tagger.json' is missing" in problems


def test_a_checkpoint_with_a_tagger_file_works_in_a_fresh_process_with_remote_code(
    toy_tokenizer, toy_tagger_file, tmp_path
):
    tester = FileTagged()
    tester.tagger_file = toy_tagger_file
    tester.test_fresh_process_remote_code_and_pipeline(toy_tokenizer, tmp_path)
    assert (tmp_path / "pos_tagger.json").is_file()


def test_xlpe_train_finds_the_tagger_file_of_a_checkpoint(toy_tokenizer, toy_tagger_file, tmp_path):
    from types import SimpleNamespace

    from xlpe.training.data import resolve_taggers
    from xlpe.training.model_setup import target_config

    tester = FileTagged()
    tester.tagger_file = toy_tagger_file
    tester.make_model(toy_tokenizer).save_pretrained(tmp_path / "ckpt")
    config = target_config(
        SimpleNamespace(
            model_name_or_path=str(tmp_path / "ckpt"),
            model_type=None,
            cache_dir=None,
            model_revision="main",
            token=None,
            trust_remote_code=False,
        ),
        None,
    )
    args = SimpleNamespace(source_tagger=None, target_tagger=None, nltk_data=None, uses_builtin_corpus=lambda: False)
    taggers = resolve_taggers(args, config)
    assert taggers["source_spec"] == "perceptron:pos_tagger.json"
    assert taggers["source"].tag([["the", "cat", "sees"]]) == [["DT", "NN", "VBZ"]]

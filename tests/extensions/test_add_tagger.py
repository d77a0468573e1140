"""Adding a POS tagger is one class and one registration (CONTRIBUTING.md, "Adding a POS tagger"): a dummy tagger
registered through the registry alone (xlpe.models.taggers.register_tagger; nothing else of xlpe is touched) is
accepted by preparation, listed in the CLI help, fills a config's tag set, and tags raw text in a saved model's
translation pipeline; the registration is undone afterwards."""

from __future__ import annotations

import json

import pytest
import torch
from family_tester import tiny_kwargs

from xlpe.models.taggers import WordTagger, find_tagger, register_tagger, taggers_for_language, unregister_tagger

NAME = "vowel-xx"


class VowelTagger(WordTagger):
    """The whole tagger: "V" for a word that starts with a vowel, "C" for any other word."""

    tags = ("V", "C")

    def tag_words(self, words):
        return ["V" if word[:1].lower() in "aeiou" else "C" for word in words]


@pytest.fixture
def vowel_tagger():
    assert find_tagger(NAME) is None
    register_tagger(NAME, VowelTagger, languages=("xx",), description="a test tagger")  # the one registration
    try:
        yield NAME
    finally:
        unregister_tagger(NAME)
    assert find_tagger(NAME) is None


def expected_ids(text: str) -> list[int]:
    return [3 if word[0] in "aeiou" else 4 for word in text.split()]  # ids 3.. follow the tag set's order


def test_preparation_tags_the_source_with_the_registered_tagger(vowel_tagger, toy_tokenizer):
    from xlpe.features.prepare import prepare_dataset
    from xlpe.features.tagging import get_tagger

    assert get_tagger(vowel_tagger).tag([["a", "cat"], []]) == [["V", "C"], []]
    sources, targets = ["the cat sees a dog", "a dog chases the small cat"], ["die katze", "ein hund"]
    dataset, report = prepare_dataset(
        sources,
        targets,
        toy_tokenizer,
        aligner=lambda s, t: [[] for _ in s],
        features=["pos_tag_ids"],
        source_tagger=vowel_tagger,
        num_proc=1,
    )
    assert report["tag_vocabularies"]["source"] == ["<pad>", "<unk>", "<special>", "V", "C"]
    for row, text in zip(dataset, sources):
        encoded = toy_tokenizer(text)
        words = expected_ids(text)
        assert row["pos_tag_ids"] == [2 if w is None else words[w] for w in encoded.word_ids()]


def test_the_cli_lists_it_and_configs_take_its_tag_set(vowel_tagger, capsys):
    from xlpe import MvPEPosConfig, XLPEMarianConfig
    from xlpe.cli import prepare, tagger

    help_text = " ".join(prepare._parser().format_help().split())
    assert f"perceptron:<file> | {vowel_tagger} (the tagger registry" in help_text  # --source_tagger's help
    assert tagger.main(["list"]) == 0
    listed = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert listed[vowel_tagger]["languages"] == ["xx"] and listed[vowel_tagger]["tags"] == 2
    assert taggers_for_language("xx") == [vowel_tagger] and taggers_for_language("en") == ["nltk-en"]
    assert XLPEMarianConfig(pos_tagger=vowel_tagger).pos_tags == ["V", "C"]
    assert MvPEPosConfig(
        d_model=32, pos_dim=8, max_position_embeddings=16, pe_step=1, pos_tagger=vowel_tagger
    ).pos_tags == ["V", "C"]


def test_a_saved_model_tags_raw_text_with_it(vowel_tagger, toy_tokenizer, tmp_path):
    from xlpe import XLPEMarianConfig, XLPEMarianMTModel, XLPETranslationPipeline

    torch.manual_seed(0)
    XLPEMarianMTModel(XLPEMarianConfig(**tiny_kwargs(toy_tokenizer), pos_tagger=vowel_tagger)).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["pos_tags"] == ["V", "C"]
    model = XLPEMarianMTModel.from_pretrained(tmp_path).eval()
    texts = ["the cat sees a dog", "a dog"]
    encoded = toy_tokenizer(texts, return_tensors="pt", padding=True)
    tag_ids = model.prepare_pipeline_inputs(texts, toy_tokenizer, encoded)["pos_tag_ids"]
    for row, text in enumerate(texts):
        words = expected_ids(text)
        real = encoded["attention_mask"][row].bool()
        expected = [2 if w is None else words[w] for w in encoded.word_ids(row)][: int(real.sum())]
        assert tag_ids[row][real].tolist() == expected and (tag_ids[row][~real] == 0).all()
    result = XLPETranslationPipeline(model=model, tokenizer=toy_tokenizer)(texts, num_beams=2, max_new_tokens=4)
    assert len(result) == 2 and all(isinstance(item["translation_text"], str) for item in result)


def test_without_the_registration_the_pipeline_says_what_is_missing(toy_tokenizer, tmp_path):
    from xlpe import XLPEMarianConfig, XLPEMarianMTModel

    config = XLPEMarianConfig(**tiny_kwargs(toy_tokenizer), pos_tagger=NAME, pos_tags=["V", "C"])  # loads anywhere
    model = XLPEMarianMTModel(config)
    encoded = toy_tokenizer(["a cat"], return_tensors="pt")
    with pytest.raises(ValueError, match=f"unknown pos_tagger '{NAME}'.*register_tagger"):
        model.prepare_pipeline_inputs(["a cat"], toy_tokenizer, encoded)


def test_an_installed_package_registers_its_tagger_through_an_entry_point(monkeypatch):
    """How a fresh process (the CLI, a saved model's pipeline) finds a tagger that is not built in."""
    import importlib.metadata
    import sys
    import types

    import xlpe.models.taggers as taggers

    plugin = types.ModuleType("xlpe_tagger_plugin_for_test")
    plugin.register = lambda: register_tagger(NAME, VowelTagger)
    monkeypatch.setitem(sys.modules, plugin.__name__, plugin)
    point = importlib.metadata.EntryPoint("vowel", f"{plugin.__name__}:register", taggers.ENTRY_POINT_GROUP)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [point] if group == point.group else [])
    monkeypatch.setattr(taggers, "_plugins_loaded", False)
    try:
        entry, argument = find_tagger(NAME)
        assert entry.tags == ("V", "C") and argument is None
        assert taggers.load_word_tagger(NAME).tag_text("an ox ran") == [(0, 2, "V"), (3, 5, "V"), (6, 9, "C")]
    finally:
        unregister_tagger(NAME)


def test_a_tagger_class_registered_the_older_way_reaches_the_pipeline_too():
    from xlpe.features.tagging import TAGGERS, Tagger, TagVocabulary, get_tagger
    from xlpe.features.tagging import register_tagger as register_preparation_tagger
    from xlpe.models.pos_tagging_hub import load_tagger

    class CaseTagger(Tagger):
        def __init__(self):
            self.vocabulary = TagVocabulary(["UP", "LOW"])

        def tag(self, sentences):
            return [["UP" if w.isupper() else "LOW" for w in words] for words in sentences]

    register_preparation_tagger("case-xx", CaseTagger)
    try:
        assert isinstance(get_tagger("case-xx"), CaseTagger) and "case-xx" in TAGGERS
        assert load_tagger("case-xx")("A  b") == [(0, 1, "UP"), (3, 4, "LOW")]
    finally:
        TAGGERS.pop("case-xx")
    assert find_tagger("case-xx") is None and "case-xx" not in TAGGERS

"""The built-in taggers tag as the recorded expected values say: preparation (`get_tagger`: pre-split
words and `tag_sentence`) and a saved model's pipeline (`load_tagger`: raw text -> character spans). The expected
values are recorded outputs, kept as a regression guard; so are config dicts saved by an earlier release
(old_source_tag_configs.json, commit f5f5496), which load and save unchanged."""

from __future__ import annotations

import pytest
from conftest import SHARED_DIR

from xlpe.features.tagging import PTB_TAGS, get_tagger
from xlpe.models.pos_tagging_hub import load_tagger

NLTK_DATA = str(SHARED_DIR / "data" / "nltk_data")
UD_GERMAN_DEV = SHARED_DIR / "data" / "ud_german_gsd" / "de_gsd-ud-dev.conllu.gz"

EN = [
    "The cat sees the dog .",
    "use the red color to color the book cover .",
    "A  small dog, chasing   cats in the garden!",
    "I can't believe it's 3.5 km.",
]
ZH = ["我爱北京天安门", "今天 天气 很 好 。", "北京大学生物系的学生在实验室工作", "他说：“我们明天去上海。”"]
ZH_WORDS = [["北京大学生物系"], ["我", "爱", "北京", "天安门"], ["今天", "天气", "很好", "。"]]
DE = ["Der Hund läuft schnell .", "Die kleine Katze schläft im Garten."]

EN_TAG = [
    ["DT", "NN", "VBZ", "DT", "NN", "."],
    ["IN", "DT", "JJ", "NN", "TO", "VB", "DT", "NN", "NN", "."],
    ["DT", "JJ", "NN", "VBG", "NNS", "IN", "DT", "NN"],
    ["PRP", "VBP", "VB", "NN", "CD", "NN"],
]
EN_SENTENCE = [
    [["The", "cat", "sees", "the", "dog", "."], ["DT", "NN", "VBZ", "DT", "NN", "."]],
    [
        ["use", "the", "red", "color", "to", "color", "the", "book", "cover", "."],
        ["IN", "DT", "JJ", "NN", "TO", "VB", "DT", "NN", "NN", "."],
    ],
    [
        ["A", "small", "dog,", "chasing", "cats", "in", "the", "garden!"],
        ["DT", "JJ", "NN", "VBG", "NNS", "IN", "DT", "NN"],
    ],
    [["I", "can't", "believe", "it's", "3.5", "km."], ["PRP", "VBP", "VB", "NN", "CD", "NN"]],
]
EN_SPANS = [
    [[0, 3, "DT"], [4, 7, "NN"], [8, 12, "VBZ"], [13, 16, "DT"], [17, 20, "NN"], [21, 22, "."]],
    [
        [0, 3, "IN"],
        [4, 7, "DT"],
        [8, 11, "JJ"],
        [12, 17, "NN"],
        [18, 20, "TO"],
        [21, 26, "VB"],
        [27, 30, "DT"],
        [31, 35, "NN"],
        [36, 41, "NN"],
        [42, 43, "."],
    ],
    [
        [0, 1, "DT"],
        [3, 8, "JJ"],
        [9, 13, "NN"],
        [14, 21, "VBG"],
        [24, 28, "NNS"],
        [29, 31, "IN"],
        [32, 35, "DT"],
        [36, 43, "NN"],
    ],
    [[0, 1, "PRP"], [2, 7, "VBP"], [8, 15, "VB"], [16, 20, "NN"], [21, 24, "CD"], [25, 28, "NN"]],
]
ZH_TAG = [["ns"], ["t", "n", "zg", "a", "x"], ["vn"], ["x"], ["n"], ["r", "v", "ns", "ns"], ["t", "n", "a", "x"]]
ZH_SENTENCE = [
    [["我", "爱", "北京", "天安门"], ["r", "v", "ns", "ns"]],
    [["今天", "天气", "很", "好", "。"], ["t", "n", "zg", "a", "x"]],
    [["北京大学", "生物系", "的", "学生", "在", "实验室", "工作"], ["nt", "n", "uj", "n", "p", "n", "vn"]],
    [
        ["他", "说", "：", "“", "我们", "明天", "去", "上海", "。", "”"],
        ["r", "v", "x", "x", "r", "t", "v", "ns", "x", "x"],
    ],
]
ZH_SPANS = [
    [[0, 1, "r"], [1, 2, "v"], [2, 4, "ns"], [4, 7, "ns"]],
    [[0, 2, "t"], [3, 5, "n"], [6, 7, "zg"], [8, 9, "a"], [10, 11, "x"]],
    [[0, 4, "nt"], [4, 7, "n"], [7, 8, "uj"], [8, 10, "n"], [10, 11, "p"], [11, 14, "n"], [14, 16, "vn"]],
    [
        [0, 1, "r"],
        [1, 2, "v"],
        [2, 3, "x"],
        [3, 4, "x"],
        [4, 6, "r"],
        [6, 8, "t"],
        [8, 9, "v"],
        [9, 11, "ns"],
        [11, 12, "x"],
        [12, 13, "x"],
    ],
]
DE_TAG = [["DET", "NOUN", "VERB", "ADJ", "NOUN"], ["DET", "DET", "NOUN", "VERB", "ADJ", "NOUN"]]
DE_SENTENCE = [
    [["Der", "Hund", "läuft", "schnell", "."], ["DET", "NOUN", "VERB", "ADJ", "NOUN"]],
    [["Die", "kleine", "Katze", "schläft", "im", "Garten."], ["DET", "DET", "NOUN", "VERB", "ADJ", "NOUN"]],
]
DE_SPANS = [
    [[0, 3, "DET"], [4, 8, "NOUN"], [9, 14, "VERB"], [15, 22, "ADJ"], [23, 24, "NOUN"]],
    [[0, 3, "DET"], [4, 10, "DET"], [11, 16, "NOUN"], [17, 24, "VERB"], [25, 27, "ADJ"], [28, 35, "NOUN"]],
]


def as_lists(value):
    return [list(map(as_lists, v)) if isinstance(v, (list, tuple)) else v for v in value]


def check(tagger, hub, texts, words, expected_tag, expected_sentence, expected_spans):
    assert tagger.tag(words) == expected_tag
    assert as_lists([tagger.tag_sentence(text) for text in texts]) == expected_sentence
    assert as_lists([hub(text) for text in texts]) == expected_spans


def test_nltk_english_tags_unchanged():
    if not (SHARED_DIR / "data" / "nltk_data").is_dir():
        pytest.skip("no nltk_data in the shared data")
    tagger, hub = get_tagger("nltk-en", nltk_data=NLTK_DATA), load_tagger("nltk-en", NLTK_DATA)
    check(tagger, hub, EN, [s.split() for s in EN], EN_TAG, EN_SENTENCE, EN_SPANS)


def test_jieba_chinese_tags_unchanged():
    pytest.importorskip("jieba")
    tagger, hub = get_tagger("jieba-zh"), load_tagger("jieba-zh")
    check(tagger, hub, ZH, [s.split() for s in ZH] + ZH_WORDS, ZH_TAG, ZH_SENTENCE, ZH_SPANS)


def test_trained_perceptron_file_tags_unchanged(tmp_path):
    pytest.importorskip("nltk")
    if not UD_GERMAN_DEV.is_file():
        pytest.skip(f"{UD_GERMAN_DEV} not found")
    from xlpe.features.tagger_training import read_treebanks, save_tagger, train_perceptron_tagger

    sentences = read_treebanks([UD_GERMAN_DEV], "upos", False)[:300]
    save_tagger(train_perceptron_tagger(sentences, 2, 0), tmp_path / "de.json")
    name = f"perceptron:{tmp_path / 'de.json'}"
    check(get_tagger(name), load_tagger(name), DE, [s.split() for s in DE], DE_TAG, DE_SENTENCE, DE_SPANS)


# position-option fields added after these configs were saved, with the default they load with: a saved model is not
# an upgrade (zero_init_added_tables) and has no RoPE warm start (rotary_warm_start_steps)
ADDED_SINCE = {
    "zero_init_added_tables": False,
    "rotary_warm_start_steps": 0,
    "alibi_attention": False,
    "alibi_attention_sides": "both",
    "guided_alignment_weight": 0.0,
    "guided_alignment_layer": -1,
    "guided_alignment_head": None,
    "guided_alignment_cost": "ce",
}


def test_configs_saved_before_the_registry_load_and_save_as_before():
    """Config dicts saved by the code before the registry (MvPEPosConfig declared its own source-tag fields then;
    now SourceTagsConfigMixin's): they load, and save to the same dict; new configs equal them too."""
    import json
    from pathlib import Path

    from xlpe import MvPEPosConfig, XLPEMarianConfig

    saved = json.loads((Path(__file__).parent / "old_source_tag_configs.json").read_text(encoding="utf-8"))
    made = {
        "mvpe_default": MvPEPosConfig(d_model=32, pos_dim=8, max_position_embeddings=16, pe_step=1),
        "mvpe_jieba": MvPEPosConfig(
            d_model=32,
            pos_dim=8,
            max_position_embeddings=16,
            pe_step=1,
            pos_tagger="jieba-zh",
            decoder_pos_tags=["<pad>", "<unk>", "<special>", "A", "B"],
        ),
        # (the predictor's dropout default when it was saved; 0.0 since 2026-11-28, saved configs keep theirs)
        "xlpe_nltk": XLPEMarianConfig(pos_tagger="nltk-en", reorder_predictor_dropout=0.1),
    }
    for name, old in saved.items():
        config_class = MvPEPosConfig if name.startswith("mvpe") else XLPEMarianConfig
        loaded = config_class.from_dict(old).to_dict()
        new = made[name].to_dict()
        if config_class is XLPEMarianConfig:  # a field added since (2026-11-28): the FFN width those were built with
            assert "reorder_predictor_ffn_size" not in old
            assert loaded["reorder_predictor_ffn_size"] == 4 * old["reorder_predictor_hidden_size"]
        if config_class is XLPEMarianConfig:  # fields added since: a saved config loads with their defaults
            for key, default in ADDED_SINCE.items():
                assert key not in old and loaded[key] == default, key
        for key in ("transformers_version", "reorder_predictor_ffn_size", *ADDED_SINCE):
            loaded.pop(key, None), new.pop(key, None), old.pop(key, None)
        assert json.loads(json.dumps(loaded, default=str)) == old == json.loads(json.dumps(new, default=str)), name
    assert saved["mvpe_default"]["pos_tagger"] == "nltk-en" and saved["mvpe_default"]["pos_tags"] == list(PTB_TAGS)

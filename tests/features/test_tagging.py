"""POS taggers (mvPE+POS Sec. IV) and the tag vocabulary stored with a model."""

from __future__ import annotations

import importlib.util
import itertools

import numpy as np
import pytest
from conftest import SHARED_DIR
from hypothesis import given, settings
from hypothesis import strategies as st

from xlpe.features.tagging import (
    JIEBA_TAGS,
    PTB_TAGS,
    SPECIAL_TAG_ID,
    TAGGERS,
    UNK_TAG_ID,
    JiebaTagger,
    NLTKPerceptronTagger,
    Tagger,
    TagVocabulary,
    builtin_vocabulary,
    get_tagger,
    register_tagger,
    subword_tag_ids,
    subword_tag_ids_flat,
)

SHARED_DATA = SHARED_DIR / "data"
NLTK_DATA = SHARED_DATA / "nltk_data"
ZH_GOLD = SHARED_DATA / "word_alignment_gold" / "zhen_tsinghua" / "zhen.src"


def test_tag_vocabulary_ids_and_round_trip():
    vocab = TagVocabulary(["NN", "VB"])
    assert vocab.to_list() == ["<pad>", "<unk>", "<special>", "NN", "VB"]
    assert TagVocabulary.from_list(vocab.to_list()) == vocab
    assert vocab.encode(["VB", "NN", "XYZ", "XYZ", "JJ"]) == [4, 3, UNK_TAG_ID, UNK_TAG_ID, UNK_TAG_ID]
    assert vocab.unknown_tags == {"XYZ": 2, "JJ": 1}
    assert vocab.decode([3, 2, 0]) == ["NN", "<special>", "<pad>"]
    with pytest.raises(ValueError, match="duplicate tags"):
        TagVocabulary(["NN", "NN"])
    with pytest.raises(ValueError, match="reserved tags must come first"):
        TagVocabulary.from_list(["NN", "<pad>"])


def test_builtin_vocabularies_are_stable():
    ptb = builtin_vocabulary("ptb")
    assert len(PTB_TAGS) == 45 and len(ptb) == 48
    assert ptb.tag_to_id["#"] == 3 and ptb.tag_to_id["NN"] == 22 and ptb.tag_to_id["``"] == 47
    jieba_vocab = builtin_vocabulary("jieba")
    assert len(jieba_vocab) == len(JIEBA_TAGS) + 3 and jieba_vocab.tag_to_id["a"] == 3
    with pytest.raises(ValueError, match="unknown tag set"):
        builtin_vocabulary("stts")


def test_subword_tag_ids():
    # word 1 has two pieces; </s> is special
    assert subword_tag_ids([5, 7, 9], [0, 1, 1, 2, None]) == [5, 7, 7, 9, SPECIAL_TAG_ID]


@st.composite
def tagged_sentence(draw):
    tags = draw(st.lists(st.integers(0, 50), max_size=8))
    word_ids = [w for w in range(len(tags)) for _ in range(draw(st.integers(0, 3)))]
    for _ in range(draw(st.integers(0, 2))):
        word_ids.insert(draw(st.integers(0, len(word_ids))), None)
    return tags, word_ids


@settings(deadline=None, max_examples=300)
@given(st.lists(tagged_sentence(), max_size=6))
def test_flat_subword_tag_ids_equal_the_per_sentence_ones(sentences):
    tags = np.array([t for ts, _ in sentences for t in ts], dtype=np.int64)
    tag_offsets = np.r_[0, np.cumsum([len(ts) for ts, _ in sentences], dtype=np.int64)]
    word_ids = np.array([-1 if w is None else w for _, ids in sentences for w in ids], dtype=np.int64)
    token_offsets = np.r_[0, np.cumsum([len(ids) for _, ids in sentences], dtype=np.int64)]
    result = subword_tag_ids_flat(tags, tag_offsets, word_ids, token_offsets)
    expected = [subword_tag_ids(ts, ids) for ts, ids in sentences]
    assert [result[a:b].tolist() for a, b in itertools.pairwise(token_offsets)] == expected
    if len(word_ids) and (word_ids >= 0).any():  # a word without a tag: an error, as per sentence
        with pytest.raises(IndexError):
            subword_tag_ids_flat(tags[:0], np.zeros(len(sentences) + 1, dtype=np.int64), word_ids, token_offsets)


@pytest.fixture(scope="module")
def nltk_tagger():
    if not NLTK_DATA.is_dir():
        pytest.skip(f"{NLTK_DATA} not found")
    return get_tagger("nltk-en", nltk_data=NLTK_DATA)


def test_nltk_tagger_tags_like_the_paper(nltk_tagger):
    # mvPE+POS Table II: "color" is a noun, then a verb
    words, tags = nltk_tagger.tag_sentence("use the red color to color the book cover .")
    assert words[3] == words[5] == "color"
    assert (tags[3], tags[5]) == ("NN", "VB")
    assert tags[1:4] == ["DT", "JJ", "NN"] and tags[-1] == "."
    batch = nltk_tagger.tag([["the", "dog", "barks"], [], ["a", "cat"]])
    assert [len(t) for t in batch] == [3, 0, 2]
    ids = nltk_tagger.tag_ids([["the", "dog", "barks"]])[0]
    assert UNK_TAG_ID not in ids and nltk_tagger.vocabulary.decode(ids) == batch[0]


def test_nltk_tagger_explains_missing_data(tmp_path, monkeypatch):
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    monkeypatch.delenv("XLPE_NLTK_DATA", raising=False)
    with pytest.raises(LookupError, match=r"nltk\.download\('averaged_perceptron_tagger_eng'\)"):
        NLTKPerceptronTagger()


def test_jieba_tags_presegmented_words():
    if not ZH_GOLD.is_file():
        pytest.skip(f"{ZH_GOLD} not found")
    tagger = get_tagger("jieba-zh")
    assert isinstance(tagger, JiebaTagger)
    sentences = [line.split(" ") for line in ZH_GOLD.read_text(encoding="utf-8").splitlines()[:50]]
    tags = tagger.tag(sentences)
    assert [len(t) for t in tags] == [len(s) for s in sentences]  # one tag per given word, never re-cut
    ids = [tagger.vocabulary.encode(t) for t in tags]
    assert all(UNK_TAG_ID not in row for row in ids)
    # raw text: jieba segments itself; the words cover the text without its spaces
    text = "".join(sentences[0])
    words, raw_tags = tagger.tag_sentence(text)
    assert "".join(words) == text and len(raw_tags) == len(words)
    # an out-of-dictionary compound takes the tag of its last piece
    assert tagger.tag([["北京大学生物系"]])[0][0] in JIEBA_TAGS


def test_registry():
    with pytest.raises(ValueError, match="unknown tagger 'xx'"):
        get_tagger("xx")

    class UpperTagger(Tagger):
        def __init__(self):
            self.vocabulary = TagVocabulary(["UP", "LOW"])

        def tag(self, sentences):
            return [["UP" if w.isupper() else "LOW" for w in words] for words in sentences]

    register_tagger("case", UpperTagger)
    try:
        tagger = get_tagger("case")
        assert tagger.tag_sentence("A b") == (["A", "b"], ["UP", "LOW"])
        assert get_tagger(tagger) is tagger
    finally:
        TAGGERS.pop("case")


@pytest.mark.skipif(importlib.util.find_spec("spacy") is not None, reason="spaCy is installed")
def test_spacy_tagger_needs_spacy():
    with pytest.raises(ImportError, match="pip install spacy"):
        get_tagger("spacy:en_core_web_sm")

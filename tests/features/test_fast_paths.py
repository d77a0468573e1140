"""The corpus-scale fast paths give exactly what the plain code gives:

* `tokenize_batch`'s word-piece cache (each distinct word tokenised once) vs one tokenizer call per batch;
* `eflomal_files.write_text` (Arrow) vs eflomal's own `to_eflomal_text_file`: byte-identical binary input;
* `eflomal_files.IndexedPriors.write` vs eflomal's `read_priors` + `to_eflomal_priors_file`: byte-identical priors;
* `eflomal_files.read_links` vs reading the Pharaoh lines one by one.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import eflomal
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xlpe.features import eflomal_files
from xlpe.features.tokenization import tokenize_batch, train_joint_tokenizer

WORDS = [
    "the",
    "The",
    "cat",
    "Katze",
    "größer",
    "naïve",
    "</s>",
    "<unk>",
    "x",
    "ЖЖ",
    "日本語",
    "a-b",
    "12",
    "é",
    "ÉCOLE",
]
words = st.lists(st.sampled_from(WORDS) | st.text(alphabet="abcXYZéß-", min_size=1, max_size=6), min_size=0, max_size=9)
_TOKENIZER = []


def tokenizer():
    if not _TOKENIZER:
        corpus = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))] * 4
        _TOKENIZER.append(train_joint_tokenizer(corpus, vocab_size=80, model="unigram"))
    return _TOKENIZER[0]


@settings(max_examples=60, deadline=None)
@given(st.lists(words, min_size=1, max_size=6), st.booleans())
def test_word_cache_gives_the_ids_of_one_tokenizer_call(sentences, target):
    texts = [" ".join(s) for s in sentences]
    cached = tokenize_batch(tokenizer(), texts, target=target)
    plain = tokenize_batch(tokenizer(), texts, target=target, word_cache=False)
    for field in ("ids", "word_ids", "offsets", "num_words"):
        np.testing.assert_array_equal(getattr(cached, field), getattr(plain, field), err_msg=field)


@settings(max_examples=40, deadline=None)
@given(st.lists(words, min_size=1, max_size=8))
def test_eflomal_text_file_is_byte_identical_to_eflomals_own(sentences):
    texts = [" ".join(s) for s in sentences]
    with tempfile.TemporaryDirectory() as folder:
        ours, theirs = Path(folder) / "ours", Path(folder) / "theirs"
        with open(ours, "wb") as file:
            eflomal_files.write_text(texts, file)
        with open(theirs, "w") as file:  # eflomal writes through the file descriptor
            eflomal.to_eflomal_text_file(io.StringIO("".join(t + "\n" for t in texts)), file)
        assert ours.read_bytes() == theirs.read_bytes()


PRIOR_WORDS = WORDS + ["CAT", "THE", "<NULL>", "absent", "Größer"]  # case variants sum; words outside the text drop
prior_word = st.sampled_from(PRIOR_WORDS)
alpha = st.sampled_from([0.5, 1.0, 1e-7, 3.25, 123456.0, 2.0 / 3.0])
prior_lines = st.lists(
    st.tuples(st.just("LEX"), prior_word, prior_word, alpha)
    | st.tuples(st.sampled_from(["FERF", "FERR"]), prior_word.filter(lambda w: w != "<NULL>"), st.integers(0, 4), alpha)
    | st.tuples(st.sampled_from(["HMMF", "HMMR"]), st.integers(-5, 5), alpha),  # a repeated jump: the last one counts
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(st.lists(words, min_size=1, max_size=6), st.lists(words, min_size=1, max_size=6), prior_lines)
def test_priors_file_is_byte_identical_to_eflomals_own(sources, targets, lines):
    texts = [" ".join(s) for s in sources], [" ".join(t) for t in targets]
    with tempfile.TemporaryDirectory() as folder:
        priors = Path(folder) / "priors.txt"
        priors.write_text("".join("\t".join(map(str, line)) + "\n" for line in lines), encoding="utf-8")
        vocabularies, indexes = [], []
        for side, sentences in zip(("source", "target"), texts):
            with open(Path(folder) / side, "wb") as file:
                vocabularies.append(eflomal_files.write_text(sentences, file))
            with open(Path(folder) / f"{side}.theirs", "w") as file:
                indexes.append(eflomal.to_eflomal_text_file(io.StringIO("".join(t + "\n" for t in sentences)), file)[0])
        ours, theirs = io.StringIO(), io.StringIO()
        eflomal_files.IndexedPriors(priors).write(*vocabularies, ours)
        with open(priors, encoding="utf-8") as file:
            eflomal.to_eflomal_priors_file(eflomal.read_priors(file), *indexes, theirs)
        assert ours.getvalue() == theirs.getvalue()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=6), min_size=1, max_size=8))
def test_links_reader_gives_every_line_s_links_in_order(per_line):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "links"
        path.write_text("".join(" ".join(f"{i}-{j}" for i, j in links) + "\n" for links in per_line), encoding="utf-8")
        line, pairs = eflomal_files.read_links(path, len(per_line))
        expected = [(k, i, j) for k, links in enumerate(per_line) for i, j in links]
        assert list(zip(line.tolist(), pairs[:, 0].tolist(), pairs[:, 1].tolist())) == expected
        with pytest.raises(RuntimeError, match="expected"):
            eflomal_files.read_links(path, len(per_line) + 1)

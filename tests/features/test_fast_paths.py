"""The corpus-scale fast paths (issue 16) give exactly what the plain code gives:

* `tokenize_batch`'s word-piece cache (each distinct word tokenised once) vs one tokenizer call per batch;
* `eflomal_files.write_text` (Arrow) vs eflomal's own `to_eflomal_text_file`: byte-identical binary input.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import eflomal
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from xlpe.features import eflomal_files
from xlpe.features.tokenization import tokenize_batch, train_joint_tokenizer

WORDS = ["the", "The", "cat", "Katze", "größer", "naïve", "</s>", "<unk>", "x", "ЖЖ", "日本語", "a-b", "12", "é", "ÉCOLE"]
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

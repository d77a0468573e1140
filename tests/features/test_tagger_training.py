"""A trained POS tagger for languages with no built-in one (tagger_training.py, `xlpe-tagger`, "perceptron:<file>"):
CoNLL-U reading in whitespace words, deterministic training, the tagger file, the CLI, and the real UD German
treebank of the shared data."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from conftest import SHARED_DIR
from hypothesis import given, settings
from hypothesis import strategies as st

from xlpe.cli.tagger import main as tagger_main
from xlpe.features.example_features import PrepareOptions
from xlpe.features.tagger_training import (
    read_conllu,
    read_treebanks,
    save_tagger,
    tagging_accuracy,
    train_perceptron_tagger,
)
from xlpe.features.tagging import PerceptronFileTagger, get_tagger
from xlpe.models.pos_tagging_hub import RawTextTagger, read_tagger_file, resolve_tagger_file

UD_GERMAN = SHARED_DIR / "data" / "ud_german_gsd"

# a toy grammar: determiner, (adjective), noun, verb, final punctuation glued to the verb
DETERMINERS, ADJECTIVES = ("der", "die", "ein", "eine"), ("kleine", "große", "rote")
NOUNS, VERBS = ("Hund", "Katze", "Mann", "Frau", "Ball"), ("läuft", "springt", "schläft", "lacht")


def toy_sentences(count: int, seed: int = 0) -> list[list[tuple[str, str, bool]]]:
    """(form, UPOS, space after) tokens of `count` toy sentences."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(count):
        tokens = [(rng.choice(DETERMINERS), "DET", True)]
        if rng.random() < 0.5:
            tokens.append((rng.choice(ADJECTIVES), "ADJ", True))
        tokens += [(rng.choice(NOUNS), "NOUN", True), (rng.choice(VERBS), "VERB", False), (".", "PUNCT", True)]
        sentences.append(tokens)
    return sentences


def conllu_text(sentences, contraction: bool = False) -> str:
    """CoNLL-U of toy sentences (XPOS = the UPOS lowercased); `contraction` adds a multi-word token "zum"."""
    lines = []
    for number, tokens in enumerate(sentences):
        lines += [f"# sent_id = {number}", "# text = ..."]
        index = 1
        if contraction:
            lines += [
                "1-2\tzum\t_\t_\t_\t_\t_\t_\t_\t_",
                "1\tzu\tzu\tADP\tappr\t_\t0\tcase\t_\t_",
                "2\tdem\tder\tDET\tart\t_\t0\tdet\t_\t_",
            ]
            index = 3
        for form, tag, space in tokens:
            misc = "_" if space else "SpaceAfter=No"
            lines.append(f"{index}\t{form}\t{form.lower()}\t{tag}\t{tag.lower()}\t_\t0\tdep\t_\t{misc}")
            index += 1
        lines.append("")
    return "\n".join(lines) + "\n"


@pytest.fixture
def toy_treebank(tmp_path):
    path = tmp_path / "toy.conllu"
    path.write_text(conllu_text(toy_sentences(60)), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------------------
# Reading CoNLL-U in whitespace words
# --------------------------------------------------------------------------------------------------------


def test_tokens_glued_by_space_after_no_form_one_word_tagged_by_its_first_non_punctuation_token(tmp_path):
    path = tmp_path / "t.conllu"
    path.write_text(
        conllu_text(
            [
                [("der", "DET", True), ("Hund", "NOUN", True), ("läuft", "VERB", False), (".", "PUNCT", True)],
                [("(", "PUNCT", False), ("!", "PUNCT", True)],
            ]
        ),
        encoding="utf-8",
    )
    assert read_conllu(path) == [[("der", "DET"), ("Hund", "NOUN"), ("läuft.", "VERB")], [("(!", "PUNCT")]]
    assert read_conllu(path, "xpos", lowercase=True)[0] == [("der", "det"), ("hund", "noun"), ("läuft.", "verb")]


def test_a_multi_word_token_is_read_as_its_surface_form_with_its_first_words_tag(tmp_path):
    path = tmp_path / "t.conllu"
    path.write_text(conllu_text([[("Haus", "NOUN", True)]], contraction=True), encoding="utf-8")
    assert read_conllu(path) == [[("zum", "ADP"), ("Haus", "NOUN")]]


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["a", "b", "Xy", ".", ","]), st.sampled_from(["NOUN", "PUNCT", "VERB"]), st.booleans()
            ),
            min_size=1,
            max_size=8,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_reading_keeps_the_sentence_text_and_count(tmp_path_factory, sentences):
    """Property: the words of a sentence are its text split on whitespace (glued tokens joined), one sentence each."""
    path = tmp_path_factory.mktemp("conllu") / "t.conllu"
    path.write_text(conllu_text(sentences), encoding="utf-8")
    read = read_conllu(path)
    assert len(read) == len(sentences)
    for words, tokens in zip(read, sentences):
        text = "".join(form + (" " if space else "") for form, _, space in tokens)
        assert [word for word, _ in words] == text.split()


@pytest.mark.parametrize(
    "line, problem",
    [
        ("1\tword\tword\tNOUN", "expected 10"),
        ("x\tw\tw\tNOUN\tn\t_\t0\td\t_\t_", "bad token id"),
        ("1\tw\tw\t_\tn\t_\t0\td\t_\t_", "empty form or upos"),
    ],
)
def test_a_malformed_line_is_a_value_error_naming_file_and_line(tmp_path, line, problem):
    path = tmp_path / "bad.conllu"
    path.write_text("# comment\n" + line + "\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"bad.conllu:2: {problem}"):
        read_conllu(path)
    with pytest.raises(ValueError, match="column must be one of"):
        read_conllu(path, "lemma")
    with pytest.raises(FileNotFoundError, match="no such CoNLL-U file"):
        read_treebanks([tmp_path / "missing.conllu"])


# --------------------------------------------------------------------------------------------------------
# Training, the tagger file, "perceptron:<file>"
# --------------------------------------------------------------------------------------------------------


def test_training_is_deterministic_per_seed_and_learns_the_toy_grammar(toy_treebank, tmp_path):
    sentences = read_conllu(toy_treebank)
    state = random.getstate()
    first, second = (train_perceptron_tagger(sentences, iterations=3, seed=1) for _ in range(2))
    assert random.getstate() == state  # the global random state is restored
    assert first.model.weights == second.model.weights
    held_out = read_conllu(toy_treebank)  # the same grammar: a working tagger is near perfect on it
    assert tagging_accuracy(first, held_out)["accuracy"] > 0.97
    with pytest.raises(ValueError, match="no training sentences"):
        train_perceptron_tagger([])
    with pytest.raises(ValueError, match="iterations must be a positive integer"):
        train_perceptron_tagger(sentences, iterations=0)


def test_the_tagger_file_round_trips_and_tags_whitespace_words(toy_treebank, tmp_path):
    tagger = train_perceptron_tagger(read_conllu(toy_treebank), iterations=3)
    path = tmp_path / "de.json"
    save_tagger(tagger, path, details={"note": "toy"})
    data = read_tagger_file(str(path))
    assert data["tags"] == ["ADJ", "DET", "NOUN", "VERB"]  # (the glued "." is never a word of its own)
    assert data["details"] == {"note": "toy"}
    loaded = get_tagger(f"perceptron:{path}")
    assert isinstance(loaded, PerceptronFileTagger)
    assert loaded.vocabulary.to_list()[3:] == data["tags"]
    words = ["die", "große", "Katze", "schläft."]
    assert loaded.tag([words, []]) == [[t for _, t in tagger.tag(words)], []] == [["DET", "ADJ", "NOUN", "VERB"], []]
    raw = RawTextTagger(f"perceptron:{path}", data["tags"])  # the pipeline's side: spans of whitespace words
    assert raw._tag_text("  die große Katze  schläft.") == [
        (2, 5, "DET"),
        (6, 11, "ADJ"),
        (12, 17, "NOUN"),
        (19, 27, "VERB"),
    ]


def test_a_lowercased_tagger_lowercases_what_it_tags(toy_treebank, tmp_path):
    sentences = read_conllu(toy_treebank, lowercase=True)
    path = tmp_path / "lower.json"
    save_tagger(train_perceptron_tagger(sentences, iterations=3), path, lowercase=True)
    assert get_tagger(f"perceptron:{path}").tag([["DIE", "KATZE", "LACHT."]]) == [["DET", "NOUN", "VERB"]]


def test_bad_tagger_files_and_names_are_clear_errors(tmp_path):
    (tmp_path / "not.json").write_text("{", encoding="utf-8")
    (tmp_path / "other.json").write_text(json.dumps({"format": "something"}), encoding="utf-8")
    with pytest.raises(ValueError, match="not.json: not a tagger file .invalid JSON"):
        read_tagger_file(str(tmp_path / "not.json"))
    with pytest.raises(ValueError, match="format 'something'"):
        read_tagger_file(str(tmp_path / "other.json"))
    with pytest.raises(FileNotFoundError, match="'gone.json' not found .as a path nor in the model at"):
        resolve_tagger_file("gone.json", str(tmp_path))
    with pytest.raises(ValueError, match="needs a file name"):
        resolve_tagger_file("")


def test_retraining_into_the_same_file_changes_the_preparation_cache_key(toy_treebank, tmp_path):
    path = tmp_path / "de.json"
    sentences = read_conllu(toy_treebank)
    keys = []
    for iterations in (1, 4):
        save_tagger(train_perceptron_tagger(sentences, iterations=iterations), path)
        keys.append(
            PrepareOptions(features=["pos_tag_ids"], source_tagger=f"perceptron:{path}").describe()["source_tagger"]
        )
    assert keys[0] != keys[1] and all(key.startswith(f"perceptron:{path}@sha256:") for key in keys)


# --------------------------------------------------------------------------------------------------------
# xlpe-tagger
# --------------------------------------------------------------------------------------------------------


def test_cli_train_evaluate_and_tag(toy_treebank, tmp_path, capsys):
    output = tmp_path / "de.json"
    assert (
        tagger_main(
            [
                "train",
                "--conllu",
                str(toy_treebank),
                "--output",
                str(output),
                "--iterations",
                "3",
                "--dev",
                str(toy_treebank),
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["sentences"] == 60 and summary["tags"] == 4 and summary["dev"]["accuracy"] > 0.97
    assert tagger_main(["evaluate", "--tagger", str(output), "--conllu", str(toy_treebank)]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == summary["dev"]["accuracy"]
    text = tmp_path / "in.txt"
    text.write_text("der Hund läuft.\n\neine rote Katze springt.\n", encoding="utf-8")
    assert tagger_main(["tag", "--tagger", str(output), "--input", str(text)]) == 0
    assert capsys.readouterr().out.splitlines() == ["DET NOUN VERB", "", "DET ADJ NOUN VERB"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--conllu", "missing.conllu", "--output", "t.json"], "--conllu missing.conllu: no such file"),
        (["train", "--conllu", "{bank}", "--output", "t.json", "--iterations", "0"], "--iterations must be at least 1"),
        (["evaluate", "--tagger", "{bank}", "--conllu", "{bank}"], "not a tagger file"),
        (["train", "--conllu", "{bad}", "--output", "t.json"], "bad.conllu:1: expected 10"),
    ],
)
def test_cli_user_errors_are_one_line_and_exit_2(argv, message, toy_treebank, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.conllu").write_text("1\tx\n", encoding="utf-8")
    argv = [a.format(bank=toy_treebank, bad=tmp_path / "bad.conllu") for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        tagger_main(argv)
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in error and len(error.strip().splitlines()) == 1


# --------------------------------------------------------------------------------------------------------
# The real treebank: UD German-GSD (shared data; dev + test only)
# --------------------------------------------------------------------------------------------------------


@pytest.mark.skipif(not UD_GERMAN.is_dir(), reason="needs ../shared/data/ud_german_gsd")
def test_a_german_tagger_from_ud_german_gsd_tags_held_out_sentences(tmp_path):
    train = read_conllu(UD_GERMAN / "de_gsd-ud-test.conllu.gz")
    dev = read_conllu(UD_GERMAN / "de_gsd-ud-dev.conllu.gz")
    assert (len(train), len(dev)) == (977, 799)
    words = list(itertools.chain.from_iterable(train))
    assert any(word.endswith(".") and len(word) > 1 for word, _ in words)  # punctuation glued to its word
    tagger = train_perceptron_tagger(train, iterations=5)
    accuracy = tagging_accuracy(tagger, dev)
    assert accuracy["words"] == 10653 and 0.84 < accuracy["accuracy"] < 0.95  # measured: 0.863 (docs/mvpe_pos.md)

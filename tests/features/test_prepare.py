"""`xlpe-prepare`: Multi30k integration, bad inputs, caching, Hub/local datasets, CLI, slow tokenizers."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from conftest import SHARED_DIR

from xlpe.cli.prepare import main
from xlpe.features.alignment import read_text_lines
from xlpe.features.prepare import prepare_dataset, prepare_hf_dataset, tokenize_with_word_ids
from xlpe.features.reordering import (
    IGNORE_INDEX,
    is_btg_reachable,
    oracle_xl_positions_batch,
    project_positions_to_subwords,
)
from xlpe.features.tagging import SPECIAL_TAG_ID, UNK_TAG_ID
from xlpe.features.tokenization import train_joint_tokenizer

SHARED_DATA = SHARED_DIR / "data"
MULTI30K = SHARED_DATA / "multi30k" / "raw"
NLTK_DATA = SHARED_DATA / "nltk_data"
FAST_EFLOMAL = dict(n_iterations=(4, 4, 8), n_samplers=1)  # test speed; the defaults iterate far longer


def write_lines(path: Path, lines) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def pharaoh_pairs(line: str) -> list[tuple[int, int]]:
    return [tuple(map(int, link.split("-"))) for link in line.split()]


@pytest.fixture(scope="module")
def corpus():
    if not MULTI30K.is_dir() or not NLTK_DATA.is_dir():
        pytest.skip(f"{MULTI30K} or {NLTK_DATA} not found")
    return read_text_lines(MULTI30K / "train.en.gz")[:300], read_text_lines(MULTI30K / "train.de.gz")[:300]


@pytest.fixture(scope="module")
def tokenizer(corpus):
    english, german = corpus
    return train_joint_tokenizer(english + german, vocab_size=1000)


@pytest.fixture(scope="module")
def prepared(corpus, tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("multi30k")
    english, german = corpus
    return prepare_dataset(
        write_lines(folder / "train.en", english),
        write_lines(folder / "train.de", german),
        tokenizer,
        source_tagger="nltk-en",
        nltk_data=NLTK_DATA,
        eflomal_options=FAST_EFLOMAL,
        num_proc=2,
        keep_text=True,
    )


# ---------------------------------------------------------------- integration on Multi30k


def test_multi30k_features(prepared, tokenizer):
    data, report = prepared
    assert set(data.column_names) == {
        "input_ids",
        "attention_mask",
        "labels",
        "reorder_positions",
        "target_positions",
        "pos_tag_ids",
        "line",
        "source_text",
        "target_text",
        "word_alignment",
    }
    assert report["pairs_read"] == 300 == report["pairs_kept"] + report["pairs_skipped_total"]
    assert report["pairs_kept"] == len(data) > 290
    assert 0.0 < report["unaligned_ratio"] < 0.4
    assert 0.5 < report["mean_kendall_tau"] <= 1.0  # en-de captions: mostly monotone
    assert report["unknown_tags"]["source"]["count"] == 0
    assert report["tag_vocabularies"]["source"][:3] == ["<pad>", "<unk>", "<special>"]
    for row in data:
        n = len(row["input_ids"])
        assert row["input_ids"][-1] == tokenizer.eos_token_id and row["labels"][-1] == tokenizer.eos_token_id
        assert len(row["attention_mask"]) == len(row["reorder_positions"]) == len(row["target_positions"]) == n
        assert len(row["pos_tag_ids"]) == n
        assert sorted(row["reorder_positions"]) == list(range(n)) and row["reorder_positions"][-1] == n - 1
        assert is_btg_reachable(row["reorder_positions"])
        supervised = [p for p in row["target_positions"] if p != IGNORE_INDEX]
        assert sorted(supervised) == list(range(len(supervised))) and row["target_positions"][-1] == IGNORE_INDEX
        assert row["pos_tag_ids"][-1] == SPECIAL_TAG_ID and min(row["pos_tag_ids"][:-1]) > SPECIAL_TAG_ID


def test_multi30k_features_follow_the_alignment(prepared, tokenizer):
    """The columns are the oracle of the stored alignment, projected through the tokenizer's word ids."""
    data, report = prepared
    rows = data.select(range(100))
    links = [pharaoh_pairs(line) for line in rows["word_alignment"]]
    lengths = [len(text.split()) for text in rows["source_text"]]
    oracle = oracle_xl_positions_batch(links, lengths)
    _, word_ids = tokenize_with_word_ids(tokenizer, rows["source_text"])
    for k, row in enumerate(rows):
        expected = project_positions_to_subwords(oracle[k], [None if w < 0 else w for w in word_ids[k]])
        assert row["reorder_positions"] == expected
    all_links = [pharaoh_pairs(line) for line in data["word_alignment"]]
    full = oracle_xl_positions_batch(all_links, [len(t.split()) for t in data["source_text"]])
    assert report["btg_repairs"] == int(full.repaired.sum())
    assert report["unaligned_source_words"] == int(full.unaligned_words.sum())


def test_decoder_tags_with_given_alignments(prepared, corpus, tokenizer):
    data, _ = prepared
    rows = data.select(range(40))
    flipped = [[(j, i) for i, j in pharaoh_pairs(line)] for line in rows["word_alignment"]]  # de -> en
    result, report = prepare_dataset(
        rows["target_text"],
        rows["source_text"],
        tokenizer,
        alignments=flipped,
        target_tagger="nltk-en",
        features=["reorder_positions", "target_positions", "decoder_pos_tag_ids"],
        nltk_data=NLTK_DATA,
        dpe_unaligned="keep",
    )
    assert report["alignments"] == "<alignments>" and len(result) == 40
    for row, _english in zip(result, rows["source_text"]):
        assert len(row["decoder_pos_tag_ids"]) == len(row["labels"])
        assert row["decoder_pos_tag_ids"][-1] == SPECIAL_TAG_ID and UNK_TAG_ID not in row["decoder_pos_tag_ids"]
        # DPE "keep": every word token is supervised, only </s> is not
        assert IGNORE_INDEX not in row["target_positions"][:-1] and row["target_positions"][-1] == IGNORE_INDEX
    first = result[0]["decoder_pos_tag_ids"]
    assert report["tag_vocabularies"]["target"][first[0]] == "CD"  # "Two young, White males ..."


def test_num_proc_and_noise(prepared, tokenizer):
    data, _ = prepared
    rows = data.select(range(60))
    links = [pharaoh_pairs(line) for line in rows["word_alignment"]]
    args = (rows["source_text"], rows["target_text"], tokenizer)
    one, _ = prepare_dataset(*args, alignments=links, num_proc=1, batch_size=16)
    two, _ = prepare_dataset(*args, alignments=links, num_proc=2, batch_size=16)
    assert one.to_dict() == two.to_dict()
    assert one["reorder_positions"] == rows["reorder_positions"]
    noisy, report = prepare_dataset(*args, alignments=links, noise_ratio=0.5, seed=1)
    again, _ = prepare_dataset(*args, alignments=links, noise_ratio=0.5, seed=1)
    assert noisy["reorder_positions"] == again["reorder_positions"]  # seeded
    changed = 0
    for clean, dirty in zip(one["reorder_positions"], noisy["reorder_positions"]):
        assert sorted(dirty) == list(range(len(clean))) and dirty[-1] == clean[-1]
        changed += clean != dirty
    assert changed > 40 and report["options"]["noise_ratio"] == 0.5
    assert noisy["target_positions"] == one["target_positions"]  # the attack touches reorder indices only


def test_cache(corpus, tokenizer, tmp_path):
    english, german = corpus
    options = dict(features=["reorder_positions"], eflomal_options=FAST_EFLOMAL, cache_dir=tmp_path)
    first, first_report = prepare_dataset(english[:50], german[:50], tokenizer, **options)
    second, second_report = prepare_dataset(english[:50], german[:50], tokenizer, **options)
    assert not first_report["cache_hit"] and second_report["cache_hit"]
    assert first.to_dict() == second.to_dict()
    assert first_report["fingerprint"] == second_report["fingerprint"]
    _, other = prepare_dataset(english[:50], german[:50], tokenizer, **{**options, "unaligned": "left"})
    assert not other["cache_hit"] and other["fingerprint"] != first_report["fingerprint"]


# ---------------------------------------------------------------- bad input


def test_line_count_mismatch_names_both_files(tmp_path, toy_tokenizer):
    source = write_lines(tmp_path / "a.en", ["one", "two", "three"])
    target = write_lines(tmp_path / "a.de", ["eins", "zwei"])
    with pytest.raises(ValueError, match=rf"{source} has 3 lines, {target} has 2 lines"):
        prepare_dataset(source, target, toy_tokenizer)


def test_bad_alignment_files(tmp_path, toy_tokenizer):
    source = write_lines(tmp_path / "a.en", ["a b", "c d e"])
    target = write_lines(tmp_path / "a.de", ["x y", "z"])
    malformed = write_lines(tmp_path / "bad.align", ["0-0 1-1", "0-0 2_0"])
    with pytest.raises(ValueError, match=rf"{malformed}:2: malformed alignment link '2_0'"):
        prepare_dataset(source, target, toy_tokenizer, alignments=malformed)
    outside = write_lines(tmp_path / "outside.align", ["0-0 1-1", "0-0 2-1"])
    with pytest.raises(ValueError, match=rf"{outside}:2: link 2-1 is outside .* j < 1 target words"):
        prepare_dataset(source, target, toy_tokenizer, alignments=outside)
    short = write_lines(tmp_path / "short.align", ["0-0"])
    with pytest.raises(ValueError, match=rf"{short} has 1 lines, {source} has 2"):
        prepare_dataset(source, target, toy_tokenizer, alignments=short)
    with pytest.raises(ValueError, match=r"<alignments>:1: link 5-0 is outside"):
        prepare_dataset(["a b"], ["x"], toy_tokenizer, alignments=[[(5, 0)]])


def test_undecodable_bytes(tmp_path, toy_tokenizer):
    source = write_lines(tmp_path / "a.en", ["a b", "c d"])
    target = tmp_path / "a.de"
    target.write_bytes(b"x y\nz \xc3\x28\n")
    with pytest.raises(ValueError, match=rf"{target}:2: invalid UTF-8"):
        prepare_dataset(source, target, toy_tokenizer)


def test_empty_and_overlong_pairs_are_skipped_and_counted(toy_tokenizer):
    sources = ["a man", "", "a dog", "word " * 30, "qxqzjvkw wvjzqxkq zqxjvw", "a cat runs", "   "]
    targets = ["ein mann", "leer", " \t ", "wort", "ein", "eine katze " * 10, ""]
    links = [[(0, 0), (1, 1)], [], [], [], [], [], []]
    data, report = prepare_dataset(sources, targets, toy_tokenizer, alignments=links, max_length=12)
    assert report["pairs_skipped"] == {
        "empty_source": 2,
        "empty_target": 1,
        "source_too_long": 2,
        "target_too_long": 1,
    }
    # "word " * 30: 30 words > 12; the rare-letter line: 3 words but more than 12 sub-word tokens
    assert report["pairs_read"] == 7 == report["pairs_kept"] + report["pairs_skipped_total"]
    assert len(data) == report["pairs_kept"] == 1
    assert data[0]["reorder_positions"] == list(range(len(data[0]["input_ids"])))


def test_word_ids_follow_whitespace_words_when_normalisation_splits_them(toy_tokenizer):
    # NFKC turns "¨" into " ̈" (a space + combining mark), so the tokenizer's own word_ids() see an extra word;
    # the character offsets still put every piece into the right whitespace word
    texts = ["the ¨cat sees", "the cat¨ sees", "¨ the cat", "the dog"]
    input_ids, word_ids = tokenize_with_word_ids(toy_tokenizer, texts)
    assert input_ids == toy_tokenizer(texts)["input_ids"]
    for text, ids in zip(texts, word_ids):
        words = [w for w in ids if w >= 0]
        assert words == sorted(words) and set(words) == set(range(len(text.split()))) and ids[-1] == -1
    assert max(w for w in toy_tokenizer(texts[0]).word_ids() if w is not None) == 3  # the tokenizer: 4 words


def test_tag_features_need_taggers(toy_tokenizer):
    with pytest.raises(ValueError, match="pos_tag_ids needs source_tagger"):
        prepare_dataset(["a"], ["b"], toy_tokenizer, features=["pos_tag_ids"])
    with pytest.raises(ValueError, match="unknown features"):
        prepare_dataset(["a"], ["b"], toy_tokenizer, features=["xl"])


# ---------------------------------------------------------------- datasets: Hub layout, local directories


def test_local_datasets(corpus, tokenizer, tmp_path):
    import datasets

    english, german = corpus
    folder = tmp_path / "hub_layout"  # a dataset repository layout, loaded with load_dataset like a Hub id
    folder.mkdir()
    for split, rows in (("train", range(0, 40)), ("validation", range(40, 50))):
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as handle:
            for k in rows:
                handle.write(json.dumps({"translation": {"en": english[k], "de": german[k]}}) + "\n")
    data, reports = prepare_hf_dataset(
        str(folder),
        tokenizer,
        source_lang="en",
        target_lang="de",
        features=["reorder_positions"],
        eflomal_options=FAST_EFLOMAL,
    )
    assert set(data) == {"train", "validation"} and len(data["train"]) == 40 and len(data["validation"]) == 10
    assert reports["validation"]["source"].endswith("[validation]:en")
    saved = tmp_path / "saved"  # a save_to_disk directory with one column per language
    datasets.Dataset.from_dict({"de": german[:20], "en": english[:20]}).save_to_disk(str(saved))
    data, reports = prepare_hf_dataset(
        str(saved),
        tokenizer,
        source_lang="de",
        target_lang="en",
        features=["target_positions"],
        eflomal_options=FAST_EFLOMAL,
    )
    assert list(data) == ["train"] and reports["train"]["pairs_kept"] == 20
    with pytest.raises(ValueError, match="no 'translation' column and no columns 'fr'"):
        prepare_hf_dataset(str(saved), tokenizer, source_lang="fr", target_lang="en")


# ---------------------------------------------------------------- command line


def test_cli(corpus, tokenizer, tmp_path, capsys):
    import datasets
    from transformers import AutoTokenizer

    english, german = corpus
    tokenizer.save_pretrained(tmp_path / "tok")
    source = write_lines(tmp_path / "s.en", english[:30])
    target = write_lines(tmp_path / "s.de", german[:30])
    output = tmp_path / "out"
    argv = [
        "--source",
        str(source),
        "--target",
        str(target),
        "--tokenizer",
        str(tmp_path / "tok"),
        "--output",
        str(output),
        "--source-tagger",
        "nltk-en",
        "--nltk-data",
        str(NLTK_DATA),
    ]
    assert main(argv) == 0
    report = json.loads((output / "report.json").read_text())["train"]
    data = datasets.load_from_disk(str(output))["train"]  # one DatasetDict, whatever splits were given
    assert len(data) == report["pairs_kept"] == 30
    assert {"reorder_positions", "target_positions", "pos_tag_ids"} <= set(data.column_names)
    assert report["tokenizer"]["origin"] == str(tmp_path / "tok")  # the given tokenizer, copied beside the features
    assert AutoTokenizer.from_pretrained(output / "tokenizer").get_vocab() == tokenizer.get_vocab()
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"en": english[:20], "de": german[:20]}).save_to_disk(str(saved))
    argv = [
        "--dataset",
        str(saved),
        "--source-lang",
        "en",
        "--target-lang",
        "de",
        "--tokenizer",
        str(tmp_path / "tok"),
        "--output",
        str(tmp_path / "out_dict"),
        "--features",
        "reorder_positions",
        "--eflomal-options",
        json.dumps({"n_iterations": [4, 4, 8], "n_samplers": 1}),
    ]
    assert main(argv) == 0
    assert len(datasets.load_from_disk(str(tmp_path / "out_dict"))["train"]) == 20
    assert json.loads((tmp_path / "out_dict" / "report.json").read_text())["train"]["pairs_kept"] == 20
    short = write_lines(tmp_path / "short.de", german[:29])
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "--source",
                str(source),
                "--target",
                str(short),
                "--tokenizer",
                str(tmp_path / "tok"),
                "--output",
                str(tmp_path / "out2"),
            ]
        )
    assert exit_info.value.code == 2
    assert f"{source} has 30 lines, {short} has 29 lines" in capsys.readouterr().err


# ---------------------------------------------------------------- tokenizers without word_ids()


def test_slow_sentencepiece_tokenizer_word_by_word(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    from transformers import MarianTokenizer

    sentences = ["the cat sees the dog", "a dog chases the small cat", "die katze sieht den hund"] * 10
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        vocab_size=30,
        model_type="unigram",
        pad_id=-1,
        eos_id=-1,
        bos_id=-1,
        unk_id=0,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    for name in ("source.spm", "target.spm"):
        (tmp_path / name).write_bytes(model.getvalue())
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / "source.spm"))
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    for piece in map(processor.id_to_piece, range(processor.get_piece_size())):
        vocab.setdefault(piece, len(vocab))
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    slow = MarianTokenizer(str(tmp_path / "source.spm"), str(tmp_path / "target.spm"), str(tmp_path / "vocab.json"))
    assert not slow.is_fast
    data, _ = prepare_dataset(
        ["the small cat sees", "a dog"], ["die katze", "den hund"], slow, alignments=[[(2, 1), (1, 1)], [(1, 1)]]
    )
    assert data["input_ids"] == slow(["the small cat sees", "a dog"])["input_ids"]  # word by word == whole
    assert data["labels"] == slow(text_target=["die katze", "den hund"])["input_ids"]
    for row in data:
        assert sorted(row["reorder_positions"]) == list(range(len(row["input_ids"])))

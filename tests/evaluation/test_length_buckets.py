"""BLEU/chrF by source length (xlpe/evaluation/length_buckets.py, `xlpe-evaluate bleu --length_buckets`): bucket
names and edges, each bucket scored as its own corpus with its signature, known scores on made-up data (perfect
short sentences, wrong long ones), empty buckets and empty sources counted, bad edges and a missing --source
refused by name."""

from __future__ import annotations

import json

import pytest

from xlpe.cli.evaluate import main
from xlpe.evaluation.length_buckets import bucket_index, bucket_names, length_bucket_scores, parse_edges
from xlpe.evaluation.metrics import corpus_bleu_chrf


def sentence(words: int, word: str = "w") -> str:
    return " ".join(f"{word}{i}" for i in range(words))


def made_up():
    """Short sources (<= 10 words) translated perfectly, 11-20-word ones with no word right, one 60-word source
    (its hypothesis equals its reference), an empty source line."""
    sources = [sentence(3), sentence(10), sentence(11), sentence(20), sentence(60), ""]
    references = [sentence(4, "r"), sentence(9, "s"), sentence(12, "t"), sentence(15, "u"), sentence(30, "v"), "x"]
    hypotheses = [references[0], references[1], " ".join(["q"] * 12), " ".join(["z"] * 15), references[4], "x"]
    return sources, hypotheses, references


def test_bucket_names_and_edges():
    assert bucket_names((10, 20, 30, 40, 50)) == ["1-10", "11-20", "21-30", "31-40", "41-50", "51+"]
    assert bucket_names((1, 5)) == ["1", "2-5", "6+"]
    edges = (10, 20)
    assert [bucket_index(n, edges) for n in (1, 10, 11, 20, 21, 500)] == [0, 0, 1, 1, 2, 2]
    assert parse_edges("5, 15,25") == (5, 15, 25)


@pytest.mark.parametrize("text", ["10,5", "0,10", "10,10", "ten", ""])
def test_bad_edges_are_refused_by_name(text):
    with pytest.raises(ValueError, match="--length_buckets"):
        parse_edges(text)


def test_known_bucket_scores_and_signatures():
    sources, hypotheses, references = made_up()
    result = length_bucket_scores(sources, hypotheses, references)
    buckets = {bucket["name"]: bucket for bucket in result["buckets"]}
    assert list(buckets) == ["1-10", "11-20", "21-30", "31-40", "41-50", "51+"]
    assert [b["sentences"] for b in result["buckets"]] == [2, 2, 0, 0, 0, 1]
    assert result["empty_sources"] == 1  # the empty source line: in no bucket, counted
    assert buckets["1-10"]["bleu"]["score"] == pytest.approx(100.0) and buckets["1-10"]["chrf"]["score"] == 100.0
    assert buckets["11-20"]["bleu"]["score"] == 0.0 and buckets["11-20"]["chrf"]["score"] == 0.0
    assert buckets["51+"]["bleu"]["score"] == pytest.approx(100.0) and buckets["51+"]["max"] is None
    assert buckets["21-30"]["bleu"] is None and buckets["21-30"]["chrf"] is None  # empty: no score
    # each bucket is its own corpus, scored as corpus_bleu_chrf scores it (same signature)
    direct = corpus_bleu_chrf(hypotheses[2:4], references[2:4])
    assert buckets["11-20"]["bleu"] == direct["bleu"] and buckets["11-20"]["chrf"] == direct["chrf"]
    assert (
        "nrefs:1" in buckets["1-10"]["bleu"]["signature"] and "nc:6|nw:0" in buckets["1-10"]["chrf"]["signature"]
    )  # chrF2


def test_unspaced_scripts_count_characters():
    """A Chinese source of 12 characters (one whitespace run) is 12 units long: bucket 11-20, not 1-10."""
    chinese = "我们明天早上八点在车站见面"[:12]
    result = length_bucket_scores([chinese, "ein kurzer Satz"], ["a b c d", "e f g"], ["a b c d", "x y z"], edges=(10,))
    assert [b["sentences"] for b in result["buckets"]] == [1, 1]
    assert result["buckets"][1]["bleu"]["score"] == pytest.approx(100.0)  # the Chinese source's pair, alone
    assert result["buckets"][0]["bleu"]["score"] == 0.0


def test_several_reference_streams_are_split_alike():
    sources, hypotheses, references = made_up()
    other = [line.upper() for line in references]
    result = length_bucket_scores(sources, hypotheses, [references, other], edges=(10,))
    assert [b["name"] for b in result["buckets"]] == ["1-10", "11+"]
    assert "nrefs:2" in result["buckets"][0]["bleu"]["signature"]
    assert result["buckets"][0]["bleu"]["score"] == pytest.approx(100.0)


def test_cli_writes_the_buckets_to_the_json(tmp_path, capsys):
    sources, hypotheses, references = made_up()
    for name, lines in (("src", sources), ("hyp", hypotheses), ("ref", references)):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    argv = ["bleu", "--hyp", str(tmp_path / "hyp"), "--ref", str(tmp_path / "ref"), "--source", str(tmp_path / "src")]
    assert main([*argv, "--length_buckets", "--output", str(tmp_path / "out.json")]) == 0
    written = json.loads((tmp_path / "out.json").read_text())
    assert written == json.loads(capsys.readouterr().out)
    assert [b["name"] for b in written["length_buckets"]["buckets"]][-1] == "51+"
    assert written["bleu"]["score"] < 100.0  # the corpus score beside the buckets
    assert main([*argv, "--length_buckets", "10"]) == 0
    assert [b["sentences"] for b in json.loads(capsys.readouterr().out)["length_buckets"]["buckets"]] == [2, 3]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--length_buckets"], "--length_buckets needs --source"),
        (["--length_buckets", "20,10", "--source", "SRC"], "strictly increasing"),
        (["--length_buckets", "--source", "SHORT"], "line counts differ"),
    ],
)
def test_cli_bad_bucket_inputs_are_one_line_errors(tmp_path, capsys, extra, message):
    sources, hypotheses, references = made_up()
    for name, lines in (("SRC", sources), ("SHORT", sources[:2]), ("hyp", hypotheses), ("ref", references)):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    extra = [str(tmp_path / item) if item in ("SRC", "SHORT") else item for item in extra]
    argv = ["bleu", "--hyp", str(tmp_path / "hyp"), "--ref", str(tmp_path / "ref"), *extra]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("xlpe-evaluate: error:") and message in error and "\n" not in error

"""xlpe-evaluate: BLEU/chrF + significance, the mvPE paper's metrics, perplexity, compare-mt, attention
alignments + AER on the real gold sets, reordering quality, plots and the command line. Offline, tiny models."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import sacrebleu
import torch

from xlpe import XLPEMarianConfig, XLPEMarianMTModel
from xlpe.cli.evaluate import main as evaluate_main
from xlpe.evaluation import alignment_quality as aq
from xlpe.evaluation import metrics as ev
from xlpe.evaluation import plots
from xlpe.features.reordering import SOURCE_ORDER_MARGIN, fuzzy_reordering_score, kendall_tau

TINY = dict(
    d_model=32,
    encoder_layers=2,
    decoder_layers=3,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=64,
    dropout=0.0,
)
SOURCES = ["the cat sees the dog", "a dog chases the small cat", "the man reads a book in the garden"]
TARGETS = ["die katze sieht den hund", "ein hund jagt die kleine katze", "der mann liest ein buch im garten"]
GOLD_COUNTS = {  # PROVENANCE.md of each folder: sentence pairs, sure links, possible-only links
    "enfr_hansards": (447, 4038, 13400),
    "roen_wpt05": (248, 6198, 0),
    "jaen_kftt": (582, 13562, 0),
    "zhen_tsinghua": (450, 11238, 178),
}


@pytest.fixture(scope="module")
def tiny_model(toy_tokenizer):
    torch.manual_seed(0)
    special = dict(
        pad_token_id=toy_tokenizer.pad_token_id,
        eos_token_id=toy_tokenizer.eos_token_id,
        decoder_start_token_id=toy_tokenizer.pad_token_id,
    )
    config = XLPEMarianConfig(**TINY, vocab_size=len(toy_tokenizer), **special)
    return XLPEMarianMTModel(config).eval()


def synthetic_corpus(n=80, seed=0):
    """References, a clearly worse system (random words) and a clearly better one (reference minus a word)."""
    rng = random.Random(seed)
    words = "the a cat dog sees chases small big red ball man book reads garden in with".split()
    refs = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 12))) for _ in range(n)]
    bad = [" ".join(rng.choice(words) for _ in range(len(r.split()))) for r in refs]
    good = [" ".join(r.split()[:-1]) if i % 3 == 0 else r for i, r in enumerate(refs)]
    return refs, bad, good


# ---------------------------------------------------------------------------------------------------------
# BLEU / chrF / significance
# ---------------------------------------------------------------------------------------------------------


def test_bleu_chrf_equal_sacrebleu_and_carry_signatures():
    refs, bad, _ = synthetic_corpus()
    result = ev.corpus_bleu_chrf(bad, refs)
    assert result["bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(bad, [refs]).score)
    assert result["chrf"]["score"] == pytest.approx(sacrebleu.corpus_chrf(bad, [refs]).score)
    assert result["bleu"]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert "nc:6|nw:0" in result["chrf"]["signature"]
    two_refs = ev.corpus_bleu_chrf(bad, [refs, refs])
    assert two_refs["bleu"]["signature"].startswith("nrefs:2")
    with pytest.raises(ValueError, match="reference stream"):
        ev.corpus_bleu_chrf(bad, refs[:-1])


@pytest.mark.parametrize("test,n", [("bs", 200), ("ar", 300)])
def test_significance_identical_is_not_and_clearly_better_is(test, n):
    refs, bad, good = synthetic_corpus()
    same = ev.paired_significance(bad, bad, refs, test=test, n_samples=n)
    better = ev.paired_significance(good, bad, refs, test=test, n_samples=n)
    for name in ("BLEU", "chrF2"):
        assert same["metrics"][name]["delta"] == 0 and same["metrics"][name]["p_value"] == 1.0
        assert not same["metrics"][name]["significant"]
        assert better["metrics"][name]["delta"] > 20
        assert better["metrics"][name]["p_value"] < 0.01 and better["metrics"][name]["significant"]
        assert f"{test}:{n}" in better["metrics"][name]["signature"]
    json.dumps(better)  # plain floats only
    with pytest.raises(ValueError, match="test must be"):
        ev.paired_significance(good, bad, refs, test="t-test")


# ---------------------------------------------------------------------------------------------------------
# The mvPE paper's metrics
# ---------------------------------------------------------------------------------------------------------


def test_bleu_1_to_4_are_cumulative():
    hyp, ref = ["the cat sat on a mat today"], ["the cat sat on the mat"]
    scores = ev.bleu_1_to_4(hyp, ref)
    # the hypothesis is longer than the reference: brevity penalty 1
    assert scores["bleu-1"]["score"] == pytest.approx(5 / 7)  # 5 of 7 unigrams match
    assert scores["bleu-2"]["score"] == pytest.approx(math.sqrt(5 / 7 * 3 / 6))  # the cat / cat sat / sat on
    values = [scores[f"bleu-{n}"]["score"] for n in range(1, 5)]
    assert values == sorted(values, reverse=True)
    assert "version:" in scores["bleu-4"]["signature"]


def test_rouge_on_hand_examples_and_non_ascii_words():
    scores = ev.rouge_scores(["a b c"], ["a b d"])
    assert scores["rouge1"] == pytest.approx({"f": 2 / 3, "p": 2 / 3, "r": 2 / 3})
    assert scores["rouge2"]["f"] == pytest.approx(1 / 2)
    assert scores["rougeL"]["f"] == pytest.approx(2 / 3)
    # rouge-score's default tokenizer drops non-ASCII words; whitespace tokens keep them.
    assert ev.rouge_scores(["über größe"], ["über größe"])["rouge1"]["f"] == 1.0
    assert ev.rouge_scores(["猫 看 狗"], ["猫 看 鸟"])["rouge1"]["f"] == pytest.approx(2 / 3)


def test_length_ratio_counts_tokens():
    assert ev.length_ratio(["a b", "c"], ["a b c", "d"]) == {"ratio": 0.75, "out": 3, "ref": 4}
    # Chinese and Japanese in characters, segmented or not; a Latin word in them is one unit
    assert ev.length_ratio(["我们的 国家"], ["我们的国家很大"]) == {"ratio": 5 / 7, "out": 5, "ref": 7}
    assert ev.length_ratio(["iPhoneを買った"], ["新しいiPhoneを買った"])["ref"] == 8


def test_perplexity_is_exp_of_mean_token_nll(tiny_model, toy_tokenizer):
    batch = next(ev.text_batches(toy_tokenizer, SOURCES, TARGETS, batch_size=8))
    with torch.no_grad():
        loss = tiny_model(**batch).loss
    whole = ev.perplexity(tiny_model, [batch])
    assert whole["perplexity"] == pytest.approx(math.exp(float(loss)), rel=1e-5)
    assert whole["tokens"] == int((batch["labels"] != -100).sum())
    split = ev.perplexity(tiny_model, ev.text_batches(toy_tokenizer, SOURCES, TARGETS, batch_size=2))
    assert split["perplexity"] == pytest.approx(whole["perplexity"], rel=1e-5)  # token-weighted, not per batch


def test_compare_mt_report_through_the_cli(tmp_path, capsys):
    refs, bad, good = synthetic_corpus()
    for name, lines in (("ref", refs), ("base", bad), ("xl", good)):
        (tmp_path / f"{name}.txt").write_text("\n".join(lines) + "\n")
    report = run_cli(
        capsys,
        "compare-mt",
        "--ref",
        tmp_path / "ref.txt",
        "--output_dir",
        tmp_path / "cmt",
        "--hyp",
        f"baseline={tmp_path / 'base.txt'}",
        f"xlpe={tmp_path / 'xl.txt'}",
    )
    assert (tmp_path / "cmt" / "index.html").is_file()
    text = (tmp_path / "cmt" / "report.txt").read_text()
    assert "word fmeas by frequency bucket" in text and "bucket type: length" in text
    words, lengths = report["word_f1_by_frequency"], report["sentence_bleu_by_length"]
    assert len(words["buckets"]) == len(words["f1"]["xlpe"]) == len(words["reference_words"])
    assert sum(words["reference_words"]) == sum(len(r.split()) for r in refs)
    assert len(lengths["buckets"]) == len(lengths["bleu"]["baseline"]) and sum(lengths["sentences"]) == len(refs)
    assert report["bleu"]["xlpe"] > report["bleu"]["baseline"]
    assert max(words["f1"]["xlpe"]) > max(words["f1"]["baseline"])


# ---------------------------------------------------------------------------------------------------------
# Gold alignments and AER
# ---------------------------------------------------------------------------------------------------------


def test_talp_parsing_and_aer_formula():
    gold = aq.parse_talp_line("1-1 2-2 3p2")
    assert gold.sure == {(0, 0), (1, 1)} and gold.possible == {(0, 0), (1, 1), (2, 1)}
    result = aq.alignment_error_rate([{(0, 0), (2, 1), (2, 2)}], [gold])
    assert result["aer"] == pytest.approx(1 - (1 + 2) / (3 + 2))
    assert result["precision"] == pytest.approx(2 / 3) and result["recall"] == pytest.approx(1 / 2)
    assert aq.alignment_error_rate([gold.sure], [gold])["aer"] == 0.0
    assert aq.alignment_error_rate([gold.possible], [gold])["aer"] == 0.0  # P-only links cost precision nothing
    assert aq.alignment_error_rate([set()], [gold])["aer"] == 1.0
    with pytest.raises(ValueError, match="1-based"):
        aq.parse_talp_line("0-1")
    assert aq.format_links({(1, 0), (0, 2)}, one_based=True) == "1-3 2-1"


@pytest.mark.parametrize("pair", sorted(GOLD_COUNTS))
def test_gold_sets_read_fully_and_match_provenance(shared_dir, pair):
    test_set = aq.load_alignment_test_set(shared_dir / "data" / "word_alignment_gold" / pair)
    sentences, sure, possible_only = GOLD_COUNTS[pair]
    assert len(test_set.sources) == len(test_set.targets) == len(test_set.gold) == sentences
    assert sum(len(g.sure) for g in test_set.gold) == sure
    assert sum(len(g.possible - g.sure) for g in test_set.gold) == possible_only
    assert all(g.sure <= g.possible for g in test_set.gold)
    assert all(token for sentence in test_set.sources + test_set.targets for token in sentence)  # no empty tokens
    if pair == "jaen_kftt":  # U+3000 is a token there (PROVENANCE): split on ASCII space only
        assert "\u3000" in test_set.sources[350]


def test_diagonal_alignment_aer_on_hansards(shared_dir):
    test_set = aq.load_alignment_test_set(shared_dir / "data" / "word_alignment_gold" / "enfr_hansards")
    diagonal = [aq.diagonal_alignment(len(s), len(t)) for s, t in zip(test_set.sources, test_set.targets)]
    anti = [{(len(s) - 1 - i, j) for i, j in links} for s, links in zip(test_set.sources, diagonal)]
    result = aq.alignment_error_rate(diagonal, test_set.gold)
    assert result["predicted_links"] == sum(len(t) for t in test_set.targets)  # one link per target word
    assert 0.3 < result["aer"] < 0.7  # en-fr is largely monotone
    assert aq.alignment_error_rate(anti, test_set.gold)["aer"] > result["aer"] + 0.3
    flipped = test_set.reversed()
    swapped = [{(j, i) for i, j in links} for links in diagonal]
    assert aq.alignment_error_rate(swapped, flipped.gold) == result


# ---------------------------------------------------------------------------------------------------------
# Alignments from attention
# ---------------------------------------------------------------------------------------------------------


def test_word_links_project_sub_words():
    # source tokens: w0 w0 w1 </s>; target tokens: v0 v1 v1 </s>
    attention = np.array([[0.1, 0.5, 0.3, 0.1], [0.2, 0.2, 0.5, 0.1], [0.45, 0.0, 0.4, 0.15], [0, 0, 0, 1.0]])
    src, tgt = [0, 0, 1, None], [0, 1, 1, None]
    assert aq._word_links(attention, src, tgt, "any_subword") == {(0, 0), (1, 1), (0, 1)}
    assert aq._word_links(attention, src, tgt, "word_attention") == {(0, 0), (1, 1)}  # v1: w0 0.85 < w1 0.9


def test_attention_alignments_use_penultimate_layer_and_are_batch_invariant(tiny_model, toy_tokenizer):
    sources, targets = [s.split() for s in SOURCES], [t.split() for t in TARGETS]
    one_by_one = aq.attention_alignments(tiny_model, toy_tokenizer, sources, targets, batch_size=1)
    batched = aq.attention_alignments(tiny_model, toy_tokenizer, sources, targets, batch_size=3)
    assert one_by_one == batched
    assert tiny_model.config._attn_implementation == "sdpa"  # restored after the eager pass
    by_word = aq.attention_alignments(tiny_model, toy_tokenizer, sources, targets, projection="word_attention")
    for links, words, src in zip(by_word, targets, sources):
        assert sorted(j for _, j in links) == list(range(len(words)))  # exactly one link per target word
        assert all(0 <= i < len(src) for i, _ in links)
    # Manual recomputation from the penultimate layer (index 1 of 3).
    src_ids, src_words = aq.encode_words(toy_tokenizer, sources[0])
    tgt_ids, tgt_words = aq.encode_words(toy_tokenizer, targets[0], target=True)
    tiny_model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = tiny_model(input_ids=torch.tensor([src_ids]), labels=torch.tensor([tgt_ids]), output_attentions=True)
    finally:
        tiny_model.set_attn_implementation("sdpa")
    attention = out.cross_attentions[1][0].mean(0).numpy()
    assert one_by_one[0] == aq._word_links(attention, src_words, tgt_words, "any_subword")
    other_layer = aq.attention_alignments(tiny_model, toy_tokenizer, sources[:1], targets[:1], layer=2)
    last_layer = out.cross_attentions[2][0].mean(0).numpy()
    assert other_layer[0] == aq._word_links(last_layer, src_words, tgt_words, "any_subword")


# ---------------------------------------------------------------------------------------------------------
# Reordering quality
# ---------------------------------------------------------------------------------------------------------


def test_reordering_quality_scores():
    rng = np.random.default_rng(0)
    perm = rng.permutation(9).tolist()
    same = aq.reordering_quality([perm], [perm])
    assert same["kendall_tau"] == 1.0 and same["fuzzy_reordering_score"] == 1.0 and same["exact_match"] == 1.0
    reverse = aq.reordering_quality([[4, 3, 2, 1, 0]], [[0, 1, 2, 3, 4]])
    assert reverse["kendall_tau"] == -1.0 and reverse["kendall_tau_normalized"] == 0.0
    assert reverse["fuzzy_reordering_score"] == 0.0
    other = rng.permutation(9).tolist()
    assert aq.reordering_quality([other], [perm])["kendall_tau"] == pytest.approx(kendall_tau(other, perm))
    assert aq.reordering_quality([[10, 30, 20]], [[0, 2, 1]])["exact_match"] == 1.0  # compared by rank
    both = aq.reordering_quality(
        [perm, [4, 3, 2, 1, 0], [0]], [perm, [0, 1, 2, 3, 4], [0]], min_items=2, per_sentence=True
    )
    assert both["per_sentence"] == {
        "kendall_tau": [1.0, -1.0],
        "fuzzy_reordering_score": [1.0, 0.0],
        "exact_match": [1, 0],
    }
    assert both["kendall_tau"] == 0.0 and both["sentences_left_out"] == 1


def test_reordering_quality_reports_the_monotone_baseline():
    # the identity order against a reversed oracle: every pair discordant (tau -1); against "0 2 1": one pair of
    # three discordant (tau 1/3); the one-word sentence is left out (min_items 2) for both
    oracle = [[3, 2, 1, 0], [0, 2, 1], [0]]
    scored = aq.reordering_quality(oracle, oracle, min_items=2, monotone_baseline=True)
    baseline = scored["monotone_baseline"]
    assert baseline["kendall_tau"] == pytest.approx((-1 + 1 / 3) / 2)
    assert baseline["kendall_tau_normalized"] == pytest.approx((baseline["kendall_tau"] + 1) / 2)
    assert baseline["fuzzy_reordering_score"] == pytest.approx(
        (fuzzy_reordering_score([0, 1, 2, 3], [3, 2, 1, 0]) + fuzzy_reordering_score([0, 1, 2], [0, 2, 1])) / 2
    )
    assert baseline["exact_match"] == 0.0 and scored["kendall_tau"] == 1.0 and scored["beats_source_order"] is True
    identity = aq.reordering_quality([[0, 1, 2, 3], [0, 1, 2]], oracle[:2], monotone_baseline=True)
    assert identity["kendall_tau"] == identity["monotone_baseline"]["kendall_tau"]  # the baseline is the identity
    assert identity["beats_source_order"] is False
    assert "monotone_baseline" not in aq.reordering_quality(oracle, oracle)  # only when asked


def test_model_reorderings_against_oracle(tiny_model, toy_tokenizer):
    sources = [s.split() for s in SOURCES]
    monotone = [[(i, i) for i in range(len(s))] for s in sources]
    predicted, oracle = aq.predicted_and_oracle_reorderings(tiny_model, toy_tokenizer, sources, monotone)
    for pred, ref, src in zip(predicted, oracle, sources):
        _, word_ids = aq.encode_words(toy_tokenizer, src)
        word_tokens = [k for k, w in enumerate(word_ids) if w is not None]
        assert ref == word_tokens  # monotone alignment: the oracle keeps every token in place
        assert sorted(pred) == word_tokens  # the predictor permutes the word tokens only
    quality = aq.reordering_quality(predicted, oracle)
    assert -1.0 <= quality["kendall_tau"] <= 1.0 and quality["sentences"] == 3


# ---------------------------------------------------------------------------------------------------------
# Plots and the command line
# ---------------------------------------------------------------------------------------------------------


def assert_png(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_plots_write_png(tmp_path):
    assert_png(plots.plot_tau_sweep({0: 27.1, 1: 27.4, 2: 27.6, 4: 27.9, 8: 27.5, 16: 27.0}, tmp_path / "tau.png"))
    noise = {"XL PE": {0.0: 28.1, 0.05: 27.9, 0.1: 27.6, 0.2: 27.0}}
    assert_png(plots.plot_noise_curve(noise, tmp_path / "noise.png", baseline=27.4))
    log = [{"epoch": 1.0, "eval_loss": 4.0}, {"epoch": 1.0, "loss": 5.0}, {"epoch": 2.0, "eval_loss": 3.5}]
    state = {"log_history": log}
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    history = plots.perplexity_history(tmp_path / "trainer_state.json")
    assert history == pytest.approx({1.0: math.exp(4.0), 2.0: math.exp(3.5)})
    curves = {"mvPE": history, "vanilla": {1: 70.0, 2: 40.0}}
    assert_png(plots.plot_perplexity_per_epoch(curves, tmp_path / "ppl.png"))


def run_cli(capsys, *argv):
    assert evaluate_main([str(a) for a in argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_bleu_alignment_reordering_plot(tmp_path, capsys, shared_dir):
    refs, bad, good = synthetic_corpus(20)
    for name, lines in (("ref", refs), ("hyp", good), ("base", bad)):
        (tmp_path / f"{name}.txt").write_text("\n".join(lines) + "\n")
    bleu = run_cli(
        capsys,
        "bleu",
        "--hyp",
        tmp_path / "hyp.txt",
        "--ref",
        tmp_path / "ref.txt",
        "--dataset_name",
        "Toy",
        "--dataset_type",
        "toy",
        "--output",
        tmp_path / "bleu.json",
    )
    assert bleu["dataset_name"] == "Toy" and "signature" in bleu["bleu"]
    assert json.loads((tmp_path / "bleu.json").read_text()) == bleu
    sig = run_cli(
        capsys,
        "significance",
        "--hyp",
        tmp_path / "hyp.txt",
        "--baseline",
        tmp_path / "base.txt",
        "--ref",
        tmp_path / "ref.txt",
        "--n_samples",
        "100",
    )
    assert sig["bs"]["metrics"]["BLEU"]["significant"]

    gold_dir = shared_dir / "data" / "word_alignment_gold" / "roen_wpt05"
    test_set = aq.load_alignment_test_set(gold_dir)
    links = [aq.diagonal_alignment(len(s), len(t)) for s, t in zip(test_set.sources, test_set.targets)]
    (tmp_path / "links.txt").write_text("".join(aq.format_links(x) + "\n" for x in links))
    aer = run_cli(capsys, "alignment", "--gold_dir", gold_dir, "--links", tmp_path / "links.txt")
    assert aer["sentences"] == 248 and aer["aer"] == pytest.approx(aer["diagonal_baseline"]["aer"])

    (tmp_path / "pred.txt").write_text("0 1 2 3\n1 0 2\n")
    (tmp_path / "oracle.txt").write_text("0 1 2 3\n0 1 2\n")
    order = run_cli(capsys, "reordering", "--pred", tmp_path / "pred.txt", "--oracle", tmp_path / "oracle.txt")
    assert order["sentences"] == 2 and order["exact_match"] == 0.5
    # beside every score, the source order's: here the identity is the oracle itself (tau 1), so it is not beaten
    assert order["kendall_tau"] == pytest.approx((1 + 1 / 3) / 2) and order["beats_source_order"] is False
    assert order["monotone_baseline"] == {
        "kendall_tau": 1.0,
        "kendall_tau_normalized": 1.0,
        "fuzzy_reordering_score": 1.0,
        "exact_match": 1.0,
    }

    (tmp_path / "tau.json").write_text(json.dumps({"0": 27.0, "4": 27.6, "8": 27.2}))
    plot = run_cli(capsys, "plot", "tau", "--input", tmp_path / "tau.json", "--output", tmp_path / "tau.png")
    assert plot["png"].endswith("tau.png")
    assert_png(tmp_path / "tau.png")


def test_cli_with_a_saved_model(tiny_model, toy_tokenizer, tmp_path, capsys, shared_dir):
    tiny_model.save_pretrained(tmp_path / "model")
    toy_tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "src.txt").write_text("\n".join(SOURCES) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(TARGETS) + "\n")
    monotone = [" ".join(f"{i}-{i}" for i in range(len(s.split()))) for s in SOURCES]
    (tmp_path / "links.txt").write_text("\n".join(monotone) + "\n")
    metrics = run_cli(
        capsys,
        "mvpe-metrics",
        "--hyp",
        tmp_path / "ref.txt",
        "--ref",
        tmp_path / "ref.txt",
        "--model",
        tmp_path / "model",
        "--source",
        tmp_path / "src.txt",
    )
    assert metrics["bleu-4"]["score"] == pytest.approx(1.0) and metrics["rouge"]["rougeL"]["f"] == 1.0
    expected = ev.perplexity(tiny_model, ev.text_batches(toy_tokenizer, SOURCES, TARGETS))
    assert metrics["perplexity"]["perplexity"] == pytest.approx(expected["perplexity"], rel=1e-5)
    gold_dir = shared_dir / "data" / "word_alignment_gold" / "enfr_hansards"
    aer = run_cli(
        capsys,
        "alignment",
        "--gold_dir",
        gold_dir,
        "--model",
        tmp_path / "model",
        "--limit",
        4,
        "--write_links",
        tmp_path / "pred.txt",
    )
    assert aer["sentences"] == 4 and 0.0 <= aer["aer"] <= 1.0
    assert len((tmp_path / "pred.txt").read_text().splitlines()) == 4
    order = run_cli(
        capsys,
        "reordering",
        "--model",
        tmp_path / "model",
        "--source",
        tmp_path / "src.txt",
        "--links",
        tmp_path / "links.txt",
    )
    assert order["sentences"] == 3 and -1.0 <= order["kendall_tau"] <= 1.0
    assert order["monotone_baseline"]["kendall_tau"] == 1.0  # monotone links: the source order is the oracle's
    assert order["beats_source_order"] is (order["kendall_tau"] >= 1.0 + SOURCE_ORDER_MARGIN)

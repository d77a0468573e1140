"""Training the standalone reorderer on prepared features, and jackknifed (k-fold) predicted positions."""

from __future__ import annotations

import json
import re

import pytest
from conftest import TOY_SENTENCES
from hypothesis import given, settings
from hypothesis import strategies as st

from xlpe.features.prepare import prepare_dataset
from xlpe.training.reorderer import (
    ReordererTraining,
    build_reorderer,
    jackknife_positions,
    mix_positions,
    train_reorderer,
)

TINY = dict(d_model=32, ffn_dim=64, pair_dim=16, token_layers=1, word_layers=0)


@pytest.fixture(scope="module")
def reversed_corpus(toy_tokenizer):
    sources = TOY_SENTENCES * 3
    targets = [" ".join(reversed(s.split())) for s in sources]
    links = [[(i, len(s.split()) - 1 - i) for i in range(len(s.split()))] for s in sources]
    dataset, _ = prepare_dataset(sources, targets, toy_tokenizer, alignments=links, features=["reorder_positions"])
    return dataset


def test_jackknifed_positions_cover_every_example_with_a_valid_order(reversed_corpus, toy_tokenizer, tmp_path):
    options = ReordererTraining(epochs=1, batch_size=8, extra={"disable_tqdm": True})
    predicted = jackknife_positions(reversed_corpus, toy_tokenizer, 3, options, tmp_path, **TINY)
    assert len(predicted) == len(reversed_corpus)
    for positions, ids in zip(predicted, reversed_corpus["input_ids"]):
        assert sorted(positions) == list(range(len(ids))) and positions[-1] == len(ids) - 1  # EOS stays
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fold-0", "fold-1", "fold-2"]
    report = json.loads((tmp_path / "fold-0" / "reorderer_training.json").read_text())
    assert report["train_pairs"] == len(reversed_corpus) - len(reversed_corpus) // 3  # trained without its fold
    with pytest.raises(ValueError, match="folds must be >= 2"):
        jackknife_positions(reversed_corpus, toy_tokenizer, 1, options, tmp_path)
    # the same seed gives the same positions in the same process (each fold's initial weights drawn from its own seed)
    assert jackknife_positions(reversed_corpus, toy_tokenizer, 3, options, tmp_path / "again", **TINY) == predicted


def test_jackknife_fold_checkpoints_made_otherwise_are_refused_before_any_training(
    reversed_corpus, toy_tokenizer, tmp_path
):
    """A resume into a work dir whose folds were trained with other folds, seed, data or options would give
    examples positions from a reorderer trained on them: each fold-K records what made it, checked first."""
    from xlpe.features.artefacts import ArtefactMismatch

    options = ReordererTraining(epochs=1, batch_size=8, extra={"disable_tqdm": True})
    reseeded = ReordererTraining(epochs=1, batch_size=8, seed=2, extra={"disable_tqdm": True})
    jackknife_positions(reversed_corpus, toy_tokenizer, 2, options, tmp_path, **TINY)
    record = json.loads((tmp_path / "fold-1" / "xlpe_artefact.json").read_text())
    assert record["kind"] == "jackknife-fold" and (record["options"]["fold"], record["options"]["folds"]) == (1, 2)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    for folds, changed, fields, fact in (
        (3, options, TINY, "option folds"),
        (2, reseeded, TINY, "option seed"),
        (2, options, {**TINY, "d_model": 16}, "option d_model"),
    ):
        with pytest.raises(ArtefactMismatch, match=rf"jackknife fold 0 .*\({fact}: .*pass --overwrite_output"):
            jackknife_positions(reversed_corpus, toy_tokenizer, folds, changed, tmp_path, **fields)
    with pytest.raises(ArtefactMismatch, match=r"other data \(input train:"):
        jackknife_positions(reversed_corpus.select(range(10)), toy_tokenizer, 2, options, tmp_path, **TINY)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_build_reorderer_draws_its_weights_from_its_seed_and_leaves_the_callers_rng_alone(toy_tokenizer):
    import torch

    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    first = build_reorderer(toy_tokenizer, seed=5, **TINY)
    assert torch.equal(torch.rand(3), expected_next)  # the caller's stream continues as if nothing had run
    torch.rand(100)  # another history
    same, other = build_reorderer(toy_tokenizer, seed=5, **TINY), build_reorderer(toy_tokenizer, seed=6, **TINY)
    for (name, a), b, _c in zip(first.state_dict().items(), same.state_dict().values(), other.state_dict().values()):
        assert torch.equal(a, b), name
    assert any(not torch.equal(a, c) for a, c in zip(first.state_dict().values(), other.state_dict().values()))


@settings(max_examples=50, deadline=None)
@given(lengths=st.lists(st.integers(1, 6), min_size=1, max_size=40), share=st.floats(0.0, 1.0), seed=st.integers(0, 9))
def test_mixed_positions_take_each_example_whole_from_one_side(lengths, share, seed):
    """The mixed remedy: every example is either its predicted or its oracle list, never a blend; the same seed draws
    the same examples; share 0 is all predicted, share 1 all oracle."""
    oracle = [list(range(n)) for n in lengths]
    predicted = [list(reversed(range(n))) for n in lengths]
    mixed = mix_positions(predicted, oracle, share, seed)
    assert all(m in (p, o) for m, p, o in zip(mixed, predicted, oracle))
    assert mixed == mix_positions(predicted, oracle, share, seed)
    assert (
        mix_positions(predicted, oracle, 0.0, seed) == predicted
        and mix_positions(predicted, oracle, 1.0, seed) == oracle
    )


def test_mixed_positions_share_and_bad_arguments():
    oracle = [[0, 1, 2]] * 2000
    predicted = [[2, 1, 0]] * 2000
    kept = sum(m == o for m, o in zip(mix_positions(predicted, oracle, 0.3, 0), oracle)) / len(oracle)
    assert abs(kept - 0.3) < 0.04
    with pytest.raises(ValueError, match=r"oracle_share must be in \[0, 1\], got 1.5"):
        mix_positions(predicted, oracle, 1.5, 0)
    with pytest.raises(ValueError, match="2000 predicted position lists but 1 oracle ones"):
        mix_positions(predicted, oracle[:1], 0.5, 0)


def test_training_needs_oracle_positions(reversed_corpus, toy_tokenizer, tmp_path):
    model = build_reorderer(toy_tokenizer, **TINY)
    with pytest.raises(ValueError, match="reorder_positions"):
        train_reorderer(model, reversed_corpus.remove_columns("reorder_positions"), tmp_path, ReordererTraining())


def test_sentence_taus_match_kendall_tau_of_the_decoded_orders(reversed_corpus, toy_tokenizer):
    """The batched tau of the calibration equals features.reordering.kendall_tau of each decoded word order
    against the oracle word order; the source order scores -1 on a reversed corpus, and so does a huge prior."""
    import numpy as np
    import torch

    from xlpe.features.predicted_reordering import collate
    from xlpe.features.reordering import kendall_tau
    from xlpe.training.reorderer import sentence_taus

    torch.manual_seed(0)
    model = build_reorderer(toy_tokenizer, **TINY).eval()
    taus, sentences = sentence_taus(model, reversed_corpus, priors=(0.0, 1e6), batch_size=5)
    words = [len(s.split()) for s in TOY_SENTENCES * 3]
    assert sentences == sum(n >= 2 for n in words) and set(taus) == {0.0, 1e6, "monotone"}
    batch = collate(
        [{k: reversed_corpus[i][k] for k in ("input_ids", "reorder_positions")} for i in range(len(reversed_corpus))],
        model.config.pad_token_id,
    )
    positions, counts = model.word_positions(batch["input_ids"], batch["attention_mask"])
    expected = [
        kendall_tau(positions[row, :n].tolist(), list(range(n))[::-1])
        for row, n in enumerate(counts.tolist())
        if n >= 2
    ]
    np.testing.assert_allclose(taus[0.0], expected, atol=1e-9)
    assert taus["monotone"] == taus[1e6] == [-1.0] * sentences


def test_order_prior_is_chosen_by_the_one_standard_error_rule(monkeypatch, reversed_corpus, toy_tokenizer):
    """one_se takes the largest prior whose tau is within one standard error of the best; "best" the best; the
    choice is written into the model's config. Bad rules and priors are ValueErrors."""
    import xlpe.training.reorderer as training

    rng = __import__("numpy").random.default_rng(0)
    centred = lambda: (lambda e: e - e.mean())(rng.normal(0, 0.05, 400))  # noqa: E731  (per-sentence scatter, mean 0)
    noise = rng.normal(0, 0.1, 400)  # shared by all priors: the sentences' own difficulty
    # best 0.5 (0.602); 0.0 and 1.0 are 0.002 below it, within one SE (about 0.0035); 2.0 is 0.1 below
    fake = {
        0.0: 0.600 + noise + centred(),
        0.5: 0.602 + noise + centred(),
        1.0: 0.600 + noise + centred(),
        2.0: 0.502 + noise + centred(),
        "monotone": 0.3 + noise,
    }
    monkeypatch.setattr(
        training,
        "sentence_taus",
        lambda model, dataset, priors, batch_size: ({p: list(fake[p]) for p in (*priors, "monotone")}, 400),
    )
    model = build_reorderer(toy_tokenizer, **TINY)
    result = training.calibrate_order_prior(model, reversed_corpus, priors=(0.0, 0.5, 1.0, 2.0))
    by_prior = result["by_prior"]
    best = max(by_prior, key=lambda p: by_prior[p]["kendall_tau"])
    assert result["best"] == float(best) == 0.5
    within = [
        float(p)
        for p, v in by_prior.items()
        if by_prior[best]["kendall_tau"] - v["kendall_tau"] <= v["tau_standard_error_vs_best"]
    ]
    assert result["chosen"] == max(within) == 1.0 and model.config.order_prior == 1.0
    assert 2.0 not in within and abs(result["monotone_kendall_tau"] - 0.3) < 0.02
    assert training.calibrate_order_prior(model, reversed_corpus, priors=(0.0, 0.5, 1.0, 2.0), rule="best")[
        "chosen"
    ] == float(best)
    with pytest.raises(ValueError, match="rule must be one of"):
        training.calibrate_order_prior(model, reversed_corpus, rule="median")
    with pytest.raises(ValueError, match="priors must be finite numbers >= 0"):
        training.calibrate_order_prior(model, reversed_corpus, priors=(0.0, -1.0))


def test_training_calibrates_the_order_prior_on_held_out_pairs(reversed_corpus, toy_tokenizer, tmp_path):
    """calibration_split holds out a seeded tenth at most; train_reorderer with those pairs saves the chosen prior
    in the model's config and every prior's tau in reorderer_training.json."""
    from xlpe.models.modeling_reorderer import XLPEReordererModel
    from xlpe.training.reorderer import ORDER_PRIORS, calibration_split

    train, held = calibration_split(reversed_corpus, 500, seed=3)
    assert len(held) == len(reversed_corpus) // 10 and len(train) + len(held) == len(reversed_corpus)
    assert (
        held["input_ids"] == calibration_split(reversed_corpus, 500, seed=3)[1]["input_ids"]
    )  # a resumed run: the same pairs
    assert not set(map(tuple, held["input_ids"])) & set(map(tuple, train["input_ids"])) or len(
        set(map(tuple, reversed_corpus["input_ids"]))
    ) < len(reversed_corpus)
    assert calibration_split(reversed_corpus, 0, seed=3) == (reversed_corpus, None)
    with pytest.raises(ValueError, match="calibration pairs must be >= 0"):
        calibration_split(reversed_corpus, -1, seed=3)
    options = ReordererTraining(epochs=1, batch_size=8, extra={"disable_tqdm": True})
    model = train_reorderer(build_reorderer(toy_tokenizer, **TINY), train, tmp_path, options, calibration_dataset=held)
    report = json.loads((tmp_path / "reorderer_training.json").read_text())["order_prior_calibration"]
    assert set(report["by_prior"]) == {str(p) for p in ORDER_PRIORS} and report["held_out_pairs"] == len(held)
    assert (
        report["chosen"] in ORDER_PRIORS
        and XLPEReordererModel.from_pretrained(tmp_path).config.order_prior
        == report["chosen"]
        == model.config.order_prior
    )


def test_training_prints_its_plan_an_estimate_and_the_calibrations_time(reversed_corpus, toy_tokenizer, tmp_path):
    """xlpe-reorder train states its plan (steps, epochs, pairs, the calibration that follows) before it starts, an
    estimate once the first steps are timed (training + the calibration measured on a sample of the held-out
    pairs), how long training took against it, and the calibration's time against its estimate."""
    from xlpe.training.reorderer import calibration_split

    train, held = calibration_split(reversed_corpus, 500, seed=3)
    lines = []
    options = ReordererTraining(epochs=2, batch_size=2, extra={"disable_tqdm": True})
    model = build_reorderer(toy_tokenizer, **TINY)
    train_reorderer(
        model,
        train,
        tmp_path,
        options,
        calibration_dataset=held,
        plan_echo=lambda text, flush=False: lines.append(text),
    )
    steps = 2 * -(-len(train) // 2)  # >= 21: the estimate comes after 20 steps
    assert lines[0] == (
        f"xlpe-reorder train: plan: {steps} training steps (2 epochs over {len(train)} pairs, 2 sentences a step); "
        f"then the order-prior calibration on {len(held)} held-out pairs; time estimate after the first steps"
    )
    estimate = next(line for line in lines if "estimate after 20 steps" in line)
    assert re.search(
        r"estimate after 20 steps \([\d.]+ s a step\): .* in all on this machine: training .* \(\d+%\), "
        r"order-prior calibration .* \(\d+%\); (training|order-prior calibration) dominates",
        estimate,
    ), estimate
    assert "not measured" not in estimate and "periodic evaluations" not in estimate
    assert any(
        re.fullmatch(r"xlpe-reorder train: training took .*; estimated .* for that part", line) for line in lines
    )
    assert re.fullmatch(r"xlpe-reorder train: the order-prior calibration took \d+ s \(estimated \d+ s\)", lines[-1]), (
        lines[-1]
    )


def test_resume_passes_over_a_checkpoint_cut_short_and_names_it(reversed_corpus, toy_tokenizer, tmp_path, caplog):
    """A kill while the Trainer writes a checkpoint's trainer_state.json (its last file) leaves that checkpoint
    unusable: the next run resumes from the newest whole one, names the one it passes over, and records which."""
    import logging
    import shutil

    from xlpe.training.checkpoint_averaging import list_checkpoints

    one_epoch = ReordererTraining(epochs=1, batch_size=8, extra={"disable_tqdm": True})
    train_reorderer(
        build_reorderer(toy_tokenizer, **TINY), reversed_corpus, tmp_path, one_epoch, plan_echo=lambda *a, **k: None
    )
    (whole,) = list_checkpoints(tmp_path)
    cut_short = tmp_path / f"checkpoint-{int(whole.name.split('-')[1]) + 100}"
    shutil.copytree(whole, cut_short)
    state = (cut_short / "trainer_state.json").read_text()
    (cut_short / "trainer_state.json").write_text(state[: len(state) // 3])
    (tmp_path / "reorderer_training.json").unlink()  # the first run as if killed before it finished
    two_epochs = ReordererTraining(epochs=2, batch_size=8, extra={"disable_tqdm": True})
    with caplog.at_level(logging.WARNING):
        train_reorderer(
            build_reorderer(toy_tokenizer, **TINY),
            reversed_corpus,
            tmp_path,
            two_epochs,
            plan_echo=lambda *a, **k: None,
        )
    assert "skipping 1 newer checkpoint(s)" in caplog.text and cut_short.name in caplog.text
    assert json.loads((tmp_path / "reorderer_training.json").read_text())["resumed_from"] == str(whole)

"""The papers' comparisons as data: the modes (data size and budget), the groups (which runs each table
needs), preparing each language pair once, training a run through `xlpe-train`'s API and scoring it, and
the resumable results file. `bench/reproduce.py` drives it; `reproduction_report.py` makes the tables."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .data import (
    HANSARDS,
    NLTK_DATA,
    UD_GERMAN_GSD,
    WMT_OUT_OF_DOMAIN,
    multi30k_split,
    small_parallel_enja_split,
    tatoeba_cmn_eng_splits,
    wmt_newstest_splits,
)

NOISE_RATIOS = (0.0, 0.05, 0.1, 0.15, 0.2)
DPE_LAMBDAS = (0.1, 0.3, 0.5, 0.7)

# ---------------------------------------------------------------------------------------------------------
# Modes: data size and training budget (the same for every run of a mode)
# ---------------------------------------------------------------------------------------------------------

MODES = {
    "smoke": dict(
        train=300,
        val=30,
        test=30,
        steps=6,
        batch=16,
        d_model=32,
        layers=1,
        heads=4,
        ffn=64,
        vocab=400,
        beams=1,
        lr=1e-3,
        warmup=2,
        epochs_mvpe=2,
        max_length=64,
        reorderer_epochs=1,
        pretrain_steps=8,
        pretrain_tokens=512,
        finetune_lr=5e-4,
        finetune_warmup=2,
        study_max_length=64,
    ),
    "cpu": dict(
        train=29000,
        val=300,
        test=1000,
        steps=1200,
        batch=64,
        d_model=128,
        layers=2,
        heads=4,
        ffn=256,
        vocab=4000,
        beams=4,
        lr=2e-3,
        warmup=100,
        epochs_mvpe=3,
        max_length=64,
        reorderer_epochs=3,
        pretrain_steps=3000,  # the fine-tuning study's out-of-domain model: ~8 epochs of the 30k news pairs
        pretrain_tokens=2500,
        finetune_lr=5e-4,  # its fine-tuning (every run: the same steps, rate and warm-up)
        finetune_warmup=100,
        study_max_length=128,  # news sentences are ~2x longer than Multi30k's
    ),
    "gpu": dict(
        train=29000,
        val=1014,
        test=1000,
        steps=20000,
        batch=128,
        d_model=256,
        layers=2,
        heads=4,
        ffn=1024,
        vocab=8000,
        beams=5,
        lr=7e-4,
        warmup=1000,
        epochs_mvpe=20,
        max_length=100,
        reorderer_epochs=3,
        pretrain_steps=20000,
        pretrain_tokens=8192,
        finetune_lr=2e-4,
        finetune_warmup=500,
        study_max_length=128,
    ),
    # Transformer-base on one GPU (issue 60): the whole Multi30k training split, ~9 epochs in ~40 s a run at
    # bf16 (sentence batches of 256, so xlpe-train's CUDA token batches and compilation are not used: a compiled
    # base model would spend its budget compiling); validation kept short, test 2016 in full
    "base": dict(
        train=29000,
        val=200,
        test=1000,
        steps=1000,
        batch=256,
        d_model=512,
        layers=6,
        heads=8,
        ffn=2048,
        vocab=8000,
        beams=5,
        lr=5e-4,
        warmup=300,
        epochs_mvpe=10,
        max_length=100,
        reorderer_epochs=3,
        eval_batch=500,  # test decoding in 2 beam-5 batches, not 10
        pretrain_steps=3000,
        pretrain_tokens=16384,
        finetune_lr=1e-4,
        finetune_warmup=300,
        study_max_length=128,
        train_flags=("--torch_compile", "False"),  # bf16 and fused AdamW stay xlpe-train's CUDA defaults
    ),
}


RELATIVE_PE = "relative_attention_max_distance=16"  # Shaw et al.'s clipping distance, as a --config_overrides item
ROPE = "rotary_attention=true,absolute_positions=false"  # RoPE on both sides, no sinusoid (as the `relative` run)
XL_RELATIVE = "xl_position_form=relative,xl_relative_max_distance=16"  # XL distances in the tau heads, k = 16
XL_ROTARY = "xl_position_form=rotary"  # XL angles in the tau heads
PRETRAINED = "@pretrained"  # run field model_name_or_path: the pair's stock checkpoint pretrained out of domain
PAIR_REORDERER = "@pair-reorderer"  # a run field: the standalone reorderer of the run's pair (reorderer_dir)
PAIR_TAGGER = "@pair-tagger"  # run fields source_tagger / target_tagger: the offline tagger of that language
TAGGERS = {"en": "nltk-en", "zh": "jieba-zh"}  # the built-in taggers that work offline here
# languages tagged by a tagger trained here (`xlpe-tagger train`: NLTK's averaged perceptron) on a UD treebank of the
# shared data: (treebank files, tag column). German: UD German-GSD dev + test (its train split is not in the shared
# data), STTS tags (the German counterpart of English PTB tags); held-out accuracy 0.852 (docs/mvpe_pos.md)
TREEBANK_TAGGERS = {
    "de": ((UD_GERMAN_GSD / "de_gsd-ud-dev.conllu.gz", UD_GERMAN_GSD / "de_gsd-ud-test.conllu.gz"), "xpos")
}


def run(
    name,
    model_type,
    pair="de-en",
    data="clean",
    kind="train",
    same_as=None,
    model_of=None,
    baseline="vanilla",
    **fields,
):
    """One run of a group: a name unique within its language pair, the family, its config fields. `same_as`:
    the name of another run (same pair) that trains exactly this model; its result is reused, not recomputed.
    `model_of` (kind "retest"): the run whose saved model (same seed) decodes the test split again with `fields`
    (a standalone reorderer's positions, or another prepared dataset's test split); nothing is trained.
    `baseline`: the run (same pair and seed, the same test split) its deltas and bootstrap are taken against."""
    spec = dict(name=name, model_type=model_type, pair=pair, data=data, kind=kind, fields=fields, same_as=same_as)
    spec["baseline"] = baseline
    if (kind == "retest") != (model_of is not None):
        raise ValueError(f"run {name!r}: kind 'retest' and model_of go together (kind {kind!r}, model_of {model_of!r})")
    return spec | ({"model_of": model_of} if model_of else {})


def with_reorderer(model_of: str) -> dict:
    """`model_of`'s saved model (same pair and seed) decoding the test split with the pair's standalone reorderer's
    positions instead of its built-in predictor's: the same weights, so the two rows differ by the positions only."""
    return run(f"{model_of}+reorderer", "xlpe", kind="retest", model_of=model_of, reorderer=PAIR_REORDERER)


def deeper_encoder(name: str, extra_layers: int, mode: dict, **fields) -> dict:
    """Table 5's 8E / 10E at this mode's width: vanilla with `extra_layers` more encoder layers, nothing else
    changed."""
    return run(name, "vanilla", encoder_layers=mode["layers"] + extra_layers, **fields)


def finetune_runs(mode: dict) -> list[dict]:
    """Issue 57's study: the pair's stock OPUS-MT-style checkpoint, pretrained on out-of-domain news
    (`pretrained_dir`), fine-tuned on the in-domain corpus for the same steps (a) as it is, continued (ft-vanilla,
    the baseline every user has) and (b) upgraded to each function-preserving option of docs/training.md's upgrade
    table, and RoPE alone both cold (not function-preserving) and warm-started over the first quarter of the steps;
    each model then decodes the out-of-domain test set too (`@ood`), so forgetting shows. `pretrained`: the
    checkpoint itself, not fine-tuned, on both test sets."""
    warm_rope = f"{ROPE},rotary_warm_start_steps={max(1, mode['steps'] // 4)}"
    upgrades = [
        run("ft-vanilla", "vanilla"),
        run("ft-in", "xlpe", xl_strategy="in"),
        run("ft-head", "xlpe", xl_strategy="head"),
        run("ft-combination", "xlpe", xl_strategy="combination"),
        run("ft-xl-relative", "xlpe", xl_strategy="head", config_overrides=XL_RELATIVE),
        run("ft-xl-rope", "xlpe", xl_strategy="head", config_overrides=XL_ROTARY),
        run("ft-relative", "xlpe", xl_strategy="none", config_overrides=RELATIVE_PE),
        run("ft-combination+relative", "xlpe", xl_strategy="combination", config_overrides=RELATIVE_PE),
        run("ft-dpe", "dpe", order_loss_weight=0.5),
        run("ft-rope", "xlpe", xl_strategy="none", config_overrides=ROPE),
        run("ft-rope-warm", "xlpe", xl_strategy="none", config_overrides=warm_rope),
    ]
    trained = [
        {
            **spec,
            "data": "finetune",
            "baseline": "ft-vanilla",
            "fields": {**spec["fields"], "model_name_or_path": PRETRAINED},
        }
        for spec in upgrades
    ]
    out_of_domain = [
        run(f"{spec['name']}@ood", spec["model_type"], data="finetune-ood", kind="retest", model_of=spec["name"])
        | {"baseline": "ft-vanilla@ood"}
        for spec in upgrades
    ]
    pretrained = [
        run("pretrained", "vanilla", data="finetune", kind="pretrained", baseline="ft-vanilla"),
        run("pretrained@ood", "vanilla", data="finetune-ood", kind="pretrained", baseline="ft-vanilla@ood"),
    ]
    return trained + out_of_domain + pretrained


def group_runs(group: str, mode: dict) -> list[dict]:
    heads = mode["heads"]
    if group == "finetune":
        return finetune_runs(mode)
    if group == "xl":
        return [run("vanilla", "vanilla")] + [run(s, "xlpe", xl_strategy=s) for s in ("in", "head", "combination")]
    if group == "base-gpu":  # issue 60: the base-size comparison one GPU session affords, most telling run first
        rotary = f"{ROPE},{XL_ROTARY},xl_position_layers=all"
        return [
            run("vanilla", "vanilla"),
            run("combination", "xlpe", xl_strategy="combination"),
            run("xl-rope-all", "xlpe", xl_strategy="head", config_overrides=rotary),
            run("rope", "xlpe", xl_strategy="none", config_overrides=ROPE),
        ]
    if group == "xl-combination":  # the smallest comparison: the CI test, and the CPU-mode headline run
        return [run("vanilla", "vanilla"), run("combination", "xlpe", xl_strategy="combination")]
    if group == "tau":
        default_tau = max(1, heads // 4)  # the "head" run of group xl (XLPEMarianConfig's default tau)
        return [run("vanilla", "vanilla")] + [
            run(f"head-tau{t}", "xlpe", xl_strategy="head", xl_heads=t, same_as="head" if t == default_tau else None)
            for t in range(heads + 1)
        ]
    if group == "dpe":
        return [run("vanilla", "vanilla")] + [
            run(f"dpe-lambda{lam}", "dpe", order_loss_weight=lam) for lam in DPE_LAMBDAS
        ]
    if (
        group == "dpe-paper"
    ):  # DPE exactly as published: no gate (X + r, Fig. 4); and the reference code's loss weighting
        paper = "dpe_learn_gate=false"  # g stays 1: the encoder input is X + r, the paper's architecture throughout
        return [
            run("vanilla", "vanilla"),
            run("dpe-lambda0.5", "dpe", order_loss_weight=0.5),
            run("dpe-paper-gate", "dpe", order_loss_weight=0.5, config_overrides=paper),
            run(
                "dpe-reference-loss",
                "dpe",
                order_loss_weight=0.5,
                config_overrides=f"{paper},order_loss_lambda_side=order,order_loss_normalization=reference",
            ),
        ]
    if group == "table5":
        return [
            run("vanilla", "vanilla"),
            run("table5-base", "vanilla", same_as="vanilla"),
            deeper_encoder("table5-8E", 2, mode),
            deeper_encoder("table5-10E", 4, mode),
            run("table5-DPE", "dpe", order_loss_weight=0.5, same_as="dpe-lambda0.5"),
        ]
    if group == "2pt":
        return [run("vanilla", "vanilla"), run("2pt", "vanilla", kind="two_pass")]
    if group == "mvpe":
        return [
            run("vanilla", "vanilla", pair="en-de", kind="mvpe"),
            run("mvpe_pos", "mvpe_pos", pair="en-de", kind="mvpe", config_overrides=f"pos_dim={mode['d_model'] // 4}"),
        ]
    if group == "noise":
        return [run("vanilla", "vanilla")] + [
            run(
                f"combination-noise{r}",
                "xlpe",
                data=f"noise{r}",
                xl_strategy="combination",
                same_as="combination" if r == 0 else None,
            )
            for r in NOISE_RATIOS
        ]
    if group == "init":  # Table 5's collapse: the same models with embeddings N(0, d^-1/2) and linears N(0, 0.02)
        small = dict(init_std=0.02, embedding_init_std=round(mode["d_model"] ** -0.5, 6))
        return [
            run("vanilla", "vanilla"),
            run("init-vanilla", "vanilla", **small),
            deeper_encoder("table5-8E", 2, mode),
            deeper_encoder("init-8E", 2, mode, **small),
            deeper_encoder("table5-10E", 4, mode),
            deeper_encoder("init-10E", 4, mode, **small),
            run("combination", "xlpe", xl_strategy="combination"),
            run("init-combination", "xlpe", xl_strategy="combination", **small),
        ]
    if group == "baselines":  # XL PE Table 1: relative PE (Shaw: relative only, k = 16), DiSAN-style heads, stacking
        relative = RELATIVE_PE
        return [
            run("vanilla", "vanilla"),
            run("relative", "xlpe", xl_strategy="none", config_overrides=f"{relative},absolute_positions=false"),
            run("disan", "xlpe", xl_strategy="none", config_overrides="directional_attention=true"),
            run("combination", "xlpe", xl_strategy="combination"),
            run("combination+relative", "xlpe", xl_strategy="combination", config_overrides=relative),
        ]
    if (
        group == "relative-pe"
    ):  # the shortest comparison of relative PE alone and stacked on XL PE (runs of `baselines`)
        relative = RELATIVE_PE
        return [
            run("vanilla", "vanilla"),
            run("relative", "xlpe", xl_strategy="none", config_overrides=f"{relative},absolute_positions=false"),
            run("combination+relative", "xlpe", xl_strategy="combination", config_overrides=relative),
        ]
    if group == "xl-forms":  # issue 41: XL order as Shaw distances or RoPE angles in the tau heads, against their parts
        relative = f"{RELATIVE_PE},absolute_positions=false"
        xl_relative, xl_rotary = f"{relative},{XL_RELATIVE}", f"{ROPE},{XL_ROTARY}"
        return [
            run("vanilla", "vanilla"),
            run("relative", "xlpe", xl_strategy="none", config_overrides=relative),
            run("rope", "xlpe", xl_strategy="none", config_overrides=ROPE),
            run("xl-relative", "xlpe", xl_strategy="head", config_overrides=xl_relative),
            run(
                "xl-relative-all", "xlpe", xl_strategy="head", config_overrides=f"{xl_relative},xl_position_layers=all"
            ),
            run("xl-rope", "xlpe", xl_strategy="head", config_overrides=xl_rotary),
            run("xl-rope-all", "xlpe", xl_strategy="head", config_overrides=f"{xl_rotary},xl_position_layers=all"),
            *(with_reorderer(name) for name in ("xl-relative", "xl-relative-all", "xl-rope", "xl-rope-all")),
        ]
    if (
        group == "table4"
    ):  # XL PE Table 4: the encoder-free model (Tang et al.) without PE, + absolute, + relative, + InXL
        return [
            run("vanilla", "vanilla"),
            run(
                "noenc-nopos", "xlpe", xl_strategy="none", encoder_layers=0, config_overrides="absolute_positions=false"
            ),
            run("noenc+abs", "xlpe", xl_strategy="none", encoder_layers=0),
            run("noenc+relative", "xlpe", xl_strategy="none", encoder_layers=0, config_overrides=RELATIVE_PE),
            run("noenc+inxl", "xlpe", xl_strategy="in", encoder_layers=0),
        ]
    if group == "pos":  # POS tags stacked on XL PE (source tags added to the embeddings), and mvPE+POS, same budget
        return [run("vanilla", "vanilla"), run("combination", "xlpe", xl_strategy="combination"), *tagged_runs(mode)]
    if group == "table1":  # one table per pair: every row of issue 15 (the runs of the groups above, reused by name)
        return [
            *group_runs("baselines", mode),
            *(run(s, "xlpe", xl_strategy=s) for s in ("in", "head")),
            run("combination+reorderer", "xlpe", xl_strategy="combination", reorderer=PAIR_REORDERER),
            *tagged_runs(mode),
            run("dpe-lambda0.5", "dpe", order_loss_weight=0.5),
            run("2pt", "vanilla", kind="two_pass"),
        ]
    if group == "reorderer":  # issue 17: Combination with the standalone reorderer (trained once per pair) at test time
        return [
            run("vanilla", "vanilla"),
            run("combination", "xlpe", xl_strategy="combination"),
            run("combination+reorderer", "xlpe", xl_strategy="combination", reorderer=PAIR_REORDERER),
        ]
    if (
        group == "train-positions"
    ):  # issue 17 item 5: what the model trains on, when a reorderer gives its test positions
        return [
            run("vanilla", "vanilla"),
            run("combination+reorderer", "xlpe", xl_strategy="combination", reorderer=PAIR_REORDERER),
            run(
                "combination-jackknife+reorderer",
                "xlpe",
                data="jackknife",
                xl_strategy="combination",
                reorderer=PAIR_REORDERER,
            ),
            run(
                "combination-mixed+reorderer",
                "xlpe",
                data="jackknife-mixed",
                xl_strategy="combination",
                reorderer=PAIR_REORDERER,
            ),
        ]
    if group == "alignment":
        return [run("vanilla", "vanilla", pair="en-fr")] + [
            run(s, "xlpe", pair="en-fr", xl_strategy=s) for s in ("in", "head", "combination")
        ]
    raise ValueError(f"unknown group {group!r}; known: {', '.join(GROUPS)}")


def tagged_runs(mode: dict) -> list[dict]:
    """XL PE Combination + source POS tags, and mvPE+POS (pos_dim = d/4; decoder tags only where the target
    language has a tagger), both trained like every other run on the pair's "tagged" preparation; and mvPE
    without tags on the same BART body (the paper's "Transformer + mvPE"), which separates the tags' share, and that
    body with the plain sinusoid (k = 1, no tags: the paper's Transformer baseline), which separates mvPE's."""
    tags = dict(data="tagged", source_tagger=PAIR_TAGGER, nltk_data=str(NLTK_DATA))
    return [
        run("combination+pos", "xlpe", xl_strategy="combination", **tags),
        run(
            "mvpe_pos-steps",
            "mvpe_pos",
            target_tagger=PAIR_TAGGER,
            config_overrides=f"pos_dim={mode['d_model'] // 4}",
            **tags,
        ),
        run("mvpe-steps", "mvpe_pos", config_overrides="pos_tag_sides=none"),  # mvPE alone: what the tags add
        run("sinusoid-steps", "mvpe_pos", config_overrides="pos_tag_sides=none,pe_step=1"),
    ]  # k = 1: the same body's vanilla


# A stacked or derived run and the runs it is built from: the report tests each against its parts (paired
# bootstrap per seed), because a gain over vanilla says nothing about what the added piece contributes.
COMPONENTS = {
    "combination+relative": ("relative", "combination"),  # XL PE stacked on relative PE: does either piece add?
    "combination+pos": ("combination",),  # what the source POS tags add to XL PE
    "combination+reorderer": ("combination",),  # the standalone reorderer against the built-in predictor
    "combination-jackknife+reorderer": (
        "combination+reorderer",
    ),  # trained on k-fold predicted positions vs on the oracle
    "combination-mixed+reorderer": ("combination+reorderer", "combination-jackknife+reorderer"),
    "mvpe_pos-steps": ("mvpe-steps", "sinusoid-steps"),  # what the tags add to mvPE; mvPE + tags over the same body
    "mvpe-steps": ("sinusoid-steps",),  # what mvPE adds to the same BART body
    "xl-relative": ("relative",),  # XL distances in the tau heads against relative PE alone (issue 41)
    "xl-relative-all": ("relative", "xl-relative"),
    "xl-rope": ("rope",),  # XL angles in the tau heads against RoPE alone
    "xl-rope-all": ("rope", "xl-rope"),
    # the standalone reorderer's positions against the counterpart and against the built-in predictor's positions
    "xl-relative+reorderer": ("relative", "xl-relative"),
    "xl-relative-all+reorderer": ("relative", "xl-relative-all"),
    "xl-rope+reorderer": ("rope", "xl-rope"),
    "xl-rope-all+reorderer": ("rope", "xl-rope-all"),
    "noenc+abs": ("noenc-nopos",),  # XL PE Table 4: absolute PE in the encoder-free model
    "noenc+relative": ("noenc+abs",),
    "noenc+inxl": ("noenc+abs",),
}

GROUPS = (
    "xl",
    "finetune",
    "xl-combination",
    "base-gpu",
    "baselines",
    "relative-pe",
    "xl-forms",
    "table4",
    "pos",
    "table1",
    "reorderer",
    "train-positions",
    "tau",
    "dpe",
    "dpe-paper",
    "table5",
    "2pt",
    "mvpe",
    "noise",
    "alignment",
    "init",
)

# ---------------------------------------------------------------------------------------------------------
# Data: raw Multi30k splits, one joint tokenizer per language set, one preparation per pair (and noise ratio)
# ---------------------------------------------------------------------------------------------------------


PAIRS = ("de-en", "en-de", "en-fr", "en-ja", "zh-en")  # the language pairs of the shared data a run can take


def raw_splits(pair: str, mode: dict):
    """{train, validation, test} ParallelSplits of `pair` (PAIRS), at most the mode's sizes:
    Multi30k de-en / en-de (raw; test_2016_flickr) and en-fr (lowercased tokenized, as the Hansards gold);
    small_parallel_enja en-ja (its train / dev / test); Tatoeba cmn-eng zh-en (jieba-segmented Chinese; split by
    English sentence, data.tatoeba_cmn_eng_splits)."""
    from xlpe.features.prepare import ParallelSplit

    src, tgt = pair.split("-")
    sizes = {"train": mode["train"], "validation": mode["val"], "test": mode["test"]}
    if pair in ("de-en", "en-de", "en-fr"):
        tokenized = pair == "en-fr"
        names = {"train": "train", "validation": "val", "test": "test_2016_flickr"}
        return {
            split: ParallelSplit(
                multi30k_split(f, src, sizes[split], tokenized),
                multi30k_split(f, tgt, sizes[split], tokenized),
                f"multi30k/{f}.{src}",
                f"multi30k/{f}.{tgt}",
            )
            for split, f in names.items()
        }
    if pair == "en-ja":
        names = {"train": "train", "validation": "dev", "test": "test"}
        return {
            split: ParallelSplit(
                small_parallel_enja_split(f, "en", sizes[split]),
                small_parallel_enja_split(f, "ja", sizes[split]),
                f"small_parallel_enja/{f}.en",
                f"small_parallel_enja/{f}.ja",
            )
            for split, f in names.items()
        }
    if pair == "zh-en":
        splits = tatoeba_cmn_eng_splits(sizes["train"], sizes["validation"], sizes["test"])
        return {
            split: ParallelSplit(*splits[split], f"tatoeba-cmn-eng/{split}.zh (jieba)", f"tatoeba-cmn-eng/{split}.en")
            for split in ("train", "validation", "test")
        }
    raise ValueError(f"unknown pair {pair!r}; known: {', '.join(PAIRS)}")


def for_pair(runs: list[dict], pair: str | None, group: str) -> list[dict]:
    """The runs of a group on another language pair (`--pair`). Groups tied to their data refuse: alignment (the
    en-fr Hansards gold set) and mvpe (its English POS tagger) keep their own pair."""
    runs = [
        spec for spec in runs if spec["fields"].get("source_tagger") != PAIR_TAGGER or has_source_tagger(spec, pair)
    ]
    if pair is None:
        return runs
    if pair not in PAIRS:
        raise ValueError(f"unknown --pair {pair!r}; known: {', '.join(PAIRS)}")
    if group in ("alignment", "mvpe") and any(spec["pair"] != pair for spec in runs):
        raise ValueError(f"group {group!r} runs on {runs[0]['pair']} only (its gold set / tagger), not --pair {pair}")
    if group == "finetune" and pair not in WMT_OUT_OF_DOMAIN:
        raise ValueError(
            f"group 'finetune' needs out-of-domain news of the pair to pretrain on: {', '.join(WMT_OUT_OF_DOMAIN)}, "
            f"not --pair {pair}"
        )
    return [dict(spec, pair=pair) for spec in runs]


def has_source_tagger(spec: dict, pair: str | None) -> bool:
    """Can the run's source language be tagged here? (Runs with tags are left out of pairs without, with a note.)"""
    source = (pair or spec["pair"]).split("-")[0]
    if source not in TAGGERS and source not in TREEBANK_TAGGERS:
        print(f"[reproduce] {spec['name']} left out on {pair or spec['pair']}: no offline POS tagger for {source!r}")
        return False
    return True


def pair_tagger(work: Path, language: str) -> str | None:
    """The tagger name of `language`: a built-in one, else "perceptron:<file>" trained once per work dir on the
    language's treebank (TREEBANK_TAGGERS, seed 0, 5 passes), else None."""
    if language in TAGGERS:
        return TAGGERS[language]
    if language not in TREEBANK_TAGGERS:
        return None
    from xlpe.features.tagger_training import read_treebanks, save_tagger, train_perceptron_tagger

    files, column = TREEBANK_TAGGERS[language]
    path = work / "data" / "taggers" / f"{language}-{column}.json"
    if not path.is_file():
        sentences = read_treebanks(files, column)
        details = {
            "trained_on": [f.name for f in files],
            "column": column,
            "sentences": len(sentences),
            "iterations": 5,
            "seed": 0,
        }
        save_tagger(train_perceptron_tagger(sentences, iterations=5, seed=0), path, details=details)
    return f"perceptron:{path}"


def tokenizer_dir(work: Path, pair: str, mode: dict) -> Path:
    """One joint tokenizer per language set (de-en and en-de share one), trained once on the training text."""
    from xlpe.features.tokenization import train_joint_tokenizer

    path = work / "data" / ("-".join(sorted(pair.split("-"))) + ("-tok" if pair == "en-fr" else "")) / "tokenizer"
    if not (path / "tokenizer_config.json").is_file():
        train = raw_splits(pair, mode)["train"]
        tokenizer = train_joint_tokenizer(
            train.sources + train.targets, vocab_size=mode["vocab"], model="bpe", model_max_length=mode["max_length"]
        )
        tokenizer.save_pretrained(path)
    return path


def oracle_options(work: Path, max_length: int) -> dict:
    """`prepare_splits` options of every preparation here: both oracles, the text kept, a reproducible (seeded)
    alignment, one cache per work dir."""
    return dict(
        features=("reorder_positions", "target_positions"),
        max_length=max_length,
        keep_text=True,
        cache_dir=str(work / "cache"),
        seed=0,
        eflomal_options={"seed": 0},
    )


def prepared_dir(work: Path, pair: str, data: str, mode: dict) -> Path:
    """The prepared DatasetDict of a pair ("clean"; "noise<r>": the training split's XL indices swapped at
    ratio r, validation/test clean, alignments reused from the clean preparation; "jackknife" / "jackknife-mixed":
    the clean preparation with predicted training positions, `jackknifed_split`)."""
    import datasets
    from transformers import AutoTokenizer

    from xlpe.features.prepare import ParallelSplit, prepare_splits

    path = work / "data" / pair / data
    if (path / "dataset_dict.json").is_file():
        return path
    if data in STUDY_DATA:
        return study_prepared_dir(work, pair, data, mode)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir(work, pair, mode))
    options = oracle_options(work, mode["max_length"])
    if data == "clean":
        prepared, reports = prepare_splits(raw_splits(pair, mode), tokenizer, **options)
    elif data == "tagged":  # the clean preparation's alignments (so the same oracle), plus POS tags of each side
        clean = datasets.load_from_disk(str(prepared_dir(work, pair, "clean", mode)))
        source, target = (pair_tagger(work, lang) for lang in pair.split("-"))
        splits = {}
        for name, table in clean.items():
            links = [[int(x) for link in a.split() for x in link.split("-")] for a in table["word_alignment"]]
            splits[name] = ParallelSplit(
                table["source_text"], table["target_text"], f"{pair}:{name}", f"{pair}:{name}", links, "clean run"
            )
        features = options.pop("features") + ("pos_tag_ids",) + (("decoder_pos_tag_ids",) if target else ())
        prepared, reports = prepare_splits(
            splits,
            tokenizer,
            **options,
            features=features,
            source_tagger=source,
            target_tagger=target,
            nltk_data=str(NLTK_DATA),
        )
    elif data in ("jackknife", "jackknife-mixed"):  # the clean preparation, training positions predicted (k-fold)
        clean = datasets.load_from_disk(str(prepared_dir(work, pair, "clean", mode)))
        prepared, reports = dict(clean), {"train": {"positions": data, "folds": JACKKNIFE_FOLDS}}
        prepared["train"] = jackknifed_split(work, pair, data, mode, clean, tokenizer)
    else:
        clean = datasets.load_from_disk(str(prepared_dir(work, pair, "clean", mode)))
        train = clean["train"]
        links = [[int(x) for link in a.split() for x in link.split("-")] for a in train["word_alignment"]]
        split = ParallelSplit(
            train["source_text"], train["target_text"], f"{pair}:train", f"{pair}:train", links, "clean run"
        )
        noisy, reports = prepare_splits(
            {"train": split}, tokenizer, **options, noise_ratio=float(data.removeprefix("noise"))
        )
        prepared = {"train": noisy["train"], "validation": clean["validation"], "test": clean["test"]}
    datasets.DatasetDict(prepared).save_to_disk(str(path))
    (path / "report.json").write_text(json.dumps(reports, indent=2, default=str))
    return path


# ---------------------------------------------------------------------------------------------------------
# The fine-tuning study's data (issue 57): a stock OPUS-MT-style checkpoint pretrained on out-of-domain news
# ---------------------------------------------------------------------------------------------------------

STUDY_DATA = ("pretrain", "finetune", "finetune-ood")  # prepared with the pretrained checkpoint's MarianTokenizer


def spec_tokenizer(work: Path, spec: dict, mode: dict) -> Path:
    """The tokenizer of a run's data: the pretrained checkpoint's for the study's data, else the pair's joint one."""
    if spec.get("data", "clean") in STUDY_DATA:
        return pretrained_dir(work, spec["pair"], mode)
    return tokenizer_dir(work, spec["pair"], mode)


def study_prepared_dir(work: Path, pair: str, data: str, mode: dict) -> Path:
    """ "pretrain": the pair's WMT news sets (`wmt_newstest_splits`: train = every set but the held-out one; test and
    validation from the held-out set) prepared with the checkpoint's tokenizer; "finetune": the pair's in-domain
    corpus (`raw_splits`: Multi30k de-en, Tatoeba cmn-eng) prepared with that tokenizer; "finetune-ood": the
    fine-tuning splits with the held-out news test split (its oracle positions from the pretraining preparation)."""
    import datasets
    from transformers import AutoTokenizer

    from xlpe.features.prepare import ParallelSplit, prepare_splits

    path = work / "data" / pair / data
    if data == "finetune-ood":
        news = datasets.load_from_disk(str(prepared_dir(work, pair, "pretrain", mode)))
        fine = datasets.load_from_disk(str(prepared_dir(work, pair, "finetune", mode)))
        datasets.DatasetDict(train=fine["train"], validation=fine["validation"], test=news["test"]).save_to_disk(
            str(path)
        )
        # its report: the fine-tuning data's, with the news test split's entry (xlpe-train reads it by name)
        report = json.loads((prepared_dir(work, pair, "finetune", mode) / "report.json").read_text())
        news_report = json.loads((prepared_dir(work, pair, "pretrain", mode) / "report.json").read_text())
        if "test" in news_report:
            report["test"] = news_report["test"]
        (path / "report.json").write_text(json.dumps(report, indent=2, default=str))
        return path
    if data == "pretrain":
        sizes = (mode["train"] * 4, mode["val"], mode["test"])  # smoke: small; cpu and up: every news pair
        news = wmt_newstest_splits(pair, *sizes)
        splits = {
            name: ParallelSplit(*news[name], f"wmt-news:{pair}:{name}", f"wmt-news:{pair}:{name}") for name in news
        }
        tokenizer_source = init_checkpoint_dir(work, pair, mode)
    else:
        splits, tokenizer_source = raw_splits(pair, mode), pretrained_dir(work, pair, mode)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    prepared, reports = prepare_splits(splits, tokenizer, **oracle_options(work, mode["study_max_length"]))
    datasets.DatasetDict(prepared).save_to_disk(str(path))
    (path / "report.json").write_text(json.dumps(reports, indent=2, default=str))
    return path


def init_checkpoint_dir(work: Path, pair: str, mode: dict) -> Path:
    """The untrained OPUS-MT-style checkpoint (`build_opus_mt_checkpoint`: MarianTokenizer with two SentencePiece
    models trained on the news text, `<pad>` last, OPUS-MT's config) at the mode's sizes; zh-en in the
    `opus-mt-tc` form with separate vocabularies. Weights N(0, d^-1/2) as xlpe-train's own models (OPUS-MT's 0.02
    trains this post-LN stack badly here: docs/training.md, Initialisation)."""
    from xlpe.features.opus_mt_layout import build_opus_mt_checkpoint

    path = work / "data" / pair / "pretrained-init"
    if not (path / "config.json").is_file():
        news = wmt_newstest_splits(pair, mode["train"] * 4, mode["val"], mode["test"])
        build_opus_mt_checkpoint(
            path,
            *news["train"],
            *pair.split("-"),
            separate_vocabs=pair != "de-en",
            spm_vocab_size=mode["vocab"] if pair == "de-en" else max(mode["vocab"], 4000),  # Chinese: its characters
            character_coverage=1.0 if pair == "de-en" else 0.9995,
            d_model=mode["d_model"],
            layers=mode["layers"],
            heads=mode["heads"],
            ffn_dim=mode["ffn"],
            max_position_embeddings=512,
            init_std=mode["d_model"] ** -0.5,
            seed=0,
        )
    return path


def pretrained_dir(work: Path, pair: str, mode: dict) -> Path:
    """The study's "pretrained" model: the init checkpoint trained as stock MarianMT (xlpe-train --model_type
    vanilla) on the pair's news for `pretrain_steps` at the mode's from-scratch rate, seed 0, once per work dir;
    written to a staging directory and renamed, so a directory that exists is complete."""
    from xlpe.training.run import main as xlpe_train

    path = work / "data" / pair / "pretrained"
    if (path / "config.json").is_file():
        return path
    init = init_checkpoint_dir(work, pair, mode)
    staging = path.with_name(f".pretrained.{os.getpid()}")
    spec = {"pair": pair, "data": "pretrain"}
    budget = {"max_steps": mode["pretrain_steps"], "learning_rate": mode["lr"], "warmup_steps": mode["warmup"]}
    budget["max_tokens"] = mode["pretrain_tokens"]  # news sentences vary in length: token batches, little padding
    fields = {"model_name_or_path": str(init), "eval_strategy": "steps", "eval_steps": max(1, budget["max_steps"] // 4)}
    args = train_args(mode, staging, 0, pair, init, "vanilla", fields, study=True, budget=budget)
    xlpe_train(args + ["--prepared_dataset", str(prepared_dir(work, spec["pair"], "pretrain", mode))])
    os.replace(staging, path)
    return path


JACKKNIFE_FOLDS = 5  # data "jackknife": every training pair's positions from a reorderer trained on the other 4 folds
MIXED_SHARE = (
    0.5  # data "jackknife-mixed": this share of the training pairs (drawn with seed 0) jackknifed, the rest oracle
)


def jackknifed_split(work: Path, pair: str, data: str, mode: dict, clean, tokenizer):
    """The clean training split with k-fold predicted `reorder_positions` (`jackknife_positions`, the pair
    reorderer's design and epochs, seed 0; "jackknife-mixed": only a `MIXED_SHARE` of the pairs); the oracle
    positions stay beside them as `oracle_reorder_positions`. Issue 17 item 5: the train/test position mismatch."""
    from xlpe.training.reorderer import ReordererTraining, jackknife_positions, mix_positions, with_predicted_positions

    train = clean["train"]
    predicted_file = work / "data" / pair / "jackknife-positions.json"
    if not predicted_file.is_file():
        predicted = jackknife_positions(
            train,
            tokenizer,
            JACKKNIFE_FOLDS,
            ReordererTraining(seed=0, epochs=mode["reorderer_epochs"]),
            work / "data" / pair / "jackknife-folds",
        )
        predicted_file.write_text(json.dumps(predicted))
    predicted = json.loads(predicted_file.read_text())
    if data == "jackknife-mixed":
        predicted = mix_positions(predicted, train["reorder_positions"], 1.0 - MIXED_SHARE, seed=0)
    return with_predicted_positions(train, predicted)


def reorderer_dir(work: Path, pair: str, mode: dict) -> Path:
    """The standalone reorderer of a pair (`xlpe-reorder`'s model, default design), trained once on the clean
    preparation's training split with the pair's tokenizer, seed 0, `reorderer_epochs` epochs; its decoding prior
    for the source order chosen on the validation split (`calibrate_order_prior`, as `xlpe-reorder train` does on
    held-out pairs). Reorderers trained before 2026-11-26 (every table up to then) decode with prior 0."""
    import datasets
    from transformers import AutoTokenizer

    from xlpe.training.reorderer import ReordererTraining, build_reorderer, train_reorderer

    path = work / "data" / pair / "reorderer"
    if not (path / "model.safetensors").is_file():
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir(work, pair, mode))
        clean = datasets.load_from_disk(str(prepared_dir(work, pair, "clean", mode)))
        train_reorderer(
            build_reorderer(tokenizer, seed=0),
            clean["train"],
            path,
            ReordererTraining(seed=0, epochs=mode["reorderer_epochs"]),
            tokenizer=tokenizer,
            calibration_dataset=clean["validation"],
        )
    return path


def resolved_fields(work: Path, spec: dict, mode: dict) -> dict:
    """The run's config fields with `PAIR_REORDERER` replaced by the pair's reorderer directory and `PAIR_TAGGER`
    by the tagger of that side's language (a target without one: no target tagger)."""
    fields = dict(spec["fields"])
    if fields.get("model_name_or_path") == PRETRAINED:
        fields["model_name_or_path"] = str(pretrained_dir(work, spec["pair"], mode))
    if fields.get("reorderer") == PAIR_REORDERER:
        fields["reorderer"] = str(reorderer_dir(work, spec["pair"], mode))
    for name, language in zip(("source_tagger", "target_tagger"), spec["pair"].split("-")):
        if fields.get(name) == PAIR_TAGGER:
            fields[name] = pair_tagger(work, language)
            if fields[name] is None:
                del fields[name]
    return fields


def write_text_split(
    work: Path, pair: str, mode: dict, pairs_by_split: dict[str, list[tuple[str, str]]], name: str
) -> list[str]:
    """Plain-text files for runs that prepare their own features (2PT's two models, mvPE+POS); returns flags."""
    folder, flags = work / "data" / pair / name, []
    folder.mkdir(parents=True, exist_ok=True)
    for split, pairs in pairs_by_split.items():
        for side, index in (("source", 0), ("target", 1)):
            path, staging = folder / f"{split}.{side}", folder / f".{split}.{side}.{os.getpid()}"
            staging.write_text("\n".join(p[index] for p in pairs) + "\n", encoding="utf-8")
            os.replace(staging, path)  # atomic: parallel workers (--workers) write the same text
            flags += [f"--{split}_{side}_file", str(path)]
    return flags


# ---------------------------------------------------------------------------------------------------------
# Training runs (xlpe.training.run.main) and their scores
# ---------------------------------------------------------------------------------------------------------


def train_args(
    mode: dict,
    out: Path,
    seed: int,
    pair: str,
    tokenizer: Path,
    model_type: str,
    fields: dict,
    study: bool = False,
    budget: dict | None = None,
) -> list[str]:
    """xlpe-train's arguments for one run. `study`: a run of the fine-tuning study, which starts from a checkpoint
    (its sizes are the checkpoint's) and trains at the mode's fine-tuning rate and warm-up over the same steps;
    `budget`: max_steps / learning_rate / warmup_steps in place of the mode's (the study's pretraining)."""
    src, tgt = pair.split("-")
    fields = dict(fields)
    encoder_layers = fields.pop("encoder_layers", mode["layers"])  # deeper_encoder runs (Table 5)
    sizes = {
        "d_model": mode["d_model"],
        "encoder_layers": encoder_layers,
        "decoder_layers": mode["layers"],
        "attention_heads": mode["heads"],
        "ffn_dim": mode["ffn"],
        "dropout": 0.1,
    }
    rate = {"max_steps": mode["steps"], "learning_rate": mode["lr"], "warmup_steps": mode["warmup"]}
    rate["per_device_train_batch_size"] = mode["batch"]
    if study:
        sizes, rate = {}, {**rate, "learning_rate": mode["finetune_lr"], "warmup_steps": mode["finetune_warmup"]}
    rate.update(budget or {})
    if "max_tokens" in rate:  # token batches replace sentence batches
        del rate["per_device_train_batch_size"]
    max_length = mode["study_max_length"] if study else mode["max_length"]
    args = [
        "--output_dir",
        str(out),
        "--overwrite_output_dir",
        "--recipe",
        "none",
        "--seed",
        str(seed),
        "--source_lang",
        src,
        "--target_lang",
        tgt,
        "--tokenizer_name",
        str(tokenizer),
        "--model_type",
        model_type,
        *(item for key, value in {**sizes, **rate}.items() for item in (f"--{key}", str(value))),
        "--per_device_eval_batch_size",
        str(mode.get("eval_batch", 100)),
        "--num_beams",
        str(mode["beams"]),
        "--max_source_length",
        str(max_length),
        "--max_target_length",
        str(max_length),
        "--save_strategy",
        "no",
        "--logging_steps",
        "50",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
        "--num_translation_examples",
        "0",
        "--cache_dir",
        str(out.parent.parent / "cache"),
    ]
    for key, value in fields.items():
        args += [f"--{key}", str(value)]
    return args + list(mode.get("train_flags", ()))


def run_dir(work: Path, spec: dict, seed: int, suffix: str = "") -> Path:
    """One directory per (pair, run, seed): a run's model, hypotheses and logs; `suffix` names a run's sub-models
    (2PT's -reorderer and -translator)."""
    return work / "runs" / f"{spec['pair']}-{spec['name']}{suffix}-seed{seed}"


def train(mode, work, spec, seed, extra: list[str], model_type=None, fields=None, suffix="") -> tuple[Path, dict]:
    from xlpe.training.run import main as xlpe_train

    out = run_dir(work, spec, seed, suffix)
    tokenizer = spec_tokenizer(work, spec, mode)
    fields = resolved_fields(work, spec, mode) if fields is None else fields
    study = spec["data"] in STUDY_DATA
    metrics = xlpe_train(
        train_args(mode, out, seed, spec["pair"], tokenizer, model_type or spec["model_type"], fields, study) + extra
    )
    return out, metrics


def decode_test_split(
    work: Path, spec: dict, seed: int, mode: dict, out: Path, fields: dict, model: Path | None = None
) -> list[str]:
    """The test split of `spec`'s data decoded by the saved model of run `spec["model_of"]` and `seed` (or by
    `model`) as xlpe-train decoded it at the end of its training (same arguments, predict only), with `fields`
    added (e.g. `reorderer`: that reorderer's positions); written to `out`. Returns the hypotheses."""
    from xlpe.training.run import main as xlpe_train

    if model is None:  # a retest's run reads `model_of`'s model; a bare spec names the run itself
        model = run_dir(work, {**spec, "name": spec.get("model_of", spec["name"])}, seed)
    if not (model / "config.json").is_file():
        raise FileNotFoundError(
            f"{model} holds no saved model: run {spec.get('model_of')!r} of seed {seed} ({spec['pair']}) first"
        )
    data = spec.get("data", "clean")
    tokenizer, study = spec_tokenizer(work, spec, mode), data in STUDY_DATA
    args = train_args(mode, out, seed, spec["pair"], tokenizer, spec["model_type"], fields, study)
    args += ["--model_name_or_path", str(model), "--do_train", "false", "--do_eval", "false", "--do_predict", "true"]
    xlpe_train(args + ["--prepared_dataset", str(prepared_dir(work, spec["pair"], data, mode))])
    return (out / "generated_predictions.txt").read_text(encoding="utf-8").splitlines()


def test_split_texts(work: Path, spec: dict, mode: dict):
    import datasets

    test = datasets.load_from_disk(str(prepared_dir(work, spec["pair"], spec.get("data", "clean"), mode)))["test"]
    return test["source_text"], test["target_text"], test["word_alignment"]


def execute(spec: dict, seed: int, mode: dict, work: Path) -> dict:
    """Train (and score) one run; returns its JSONL record."""
    from xlpe.evaluation import corpus_bleu_chrf

    started, record = time.time(), {}
    target_lang = spec["pair"].split("-")[1]
    prepared = ["--prepared_dataset", str(prepared_dir(work, spec["pair"], spec["data"], mode))]
    if spec["kind"] == "train":
        out, _ = train(mode, work, spec, seed, prepared)
        hypotheses = (out / "generated_predictions.txt").read_text(encoding="utf-8").splitlines()
    elif spec["kind"] == "retest":
        out = run_dir(work, spec, seed)
        hypotheses = decode_test_split(work, spec, seed, mode, out, resolved_fields(work, spec, mode))
    elif spec["kind"] == "pretrained":  # the study's checkpoint itself, not fine-tuned
        out = run_dir(work, spec, seed)
        model = pretrained_dir(work, spec["pair"], mode)
        hypotheses = decode_test_split(work, spec, seed, mode, out, {}, model=model)
    elif spec["kind"] == "two_pass":
        out, hypotheses, record = two_pass(spec, seed, mode, work)
    elif spec["kind"] == "mvpe":
        out, hypotheses, record = mvpe(spec, seed, mode, work)
    _, references, _ = test_split_texts(work, spec, mode)
    scores = corpus_bleu_chrf(hypotheses, references, target_language=target_lang)
    (out / "hypotheses.txt").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    record.update(
        bleu=scores["bleu"]["score"],
        chrf=scores["chrf"]["score"],
        bleu_signature=scores["bleu"]["signature"],
        chrf_signature=scores["chrf"]["signature"],
        hypotheses=str(out / "hypotheses.txt"),
        seconds=round(time.time() - started, 1),
    )
    oracle_file = out / "generated_predictions_oracle.txt"  # XL PE runs: the test split decoded with oracle positions
    if spec["kind"] in ("train", "retest") and oracle_file.is_file():
        oracle = oracle_file.read_text(encoding="utf-8").splitlines()
        oracle_scores = corpus_bleu_chrf(oracle, references, target_language=target_lang)
        (out / "hypotheses_oracle.txt").write_text("\n".join(oracle) + "\n", encoding="utf-8")
        record.update(
            oracle_bleu=oracle_scores["bleu"]["score"],
            oracle_chrf=oracle_scores["chrf"]["score"],
            oracle_hypotheses=str(out / "hypotheses_oracle.txt"),
        )
    if spec["pair"] == "en-fr":
        record["alignment"] = alignment_scores(out)
    return record


def two_pass(spec, seed, mode, work):
    """DPE Table 2: a reorderer (source -> oracle-reordered source) and a translator (reordered -> target),
    both vanilla Marian on the BTG oracle of the clean preparation's alignments; the oracle row feeds the
    translator the test sources reordered by their own alignments."""
    import datasets
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from xlpe.evaluation import corpus_bleu_chrf
    from xlpe.evaluation.two_pass import TwoPassTranslator, two_pass_training_pairs

    clean = datasets.load_from_disk(str(prepared_dir(work, spec["pair"], "clean", mode)))
    data = {
        s: two_pass_training_pairs(t["source_text"], t["target_text"], t["word_alignment"]) for s, t in clean.items()
    }
    models = {}
    for stage in ("reorderer", "translator"):
        flags = write_text_split(work, spec["pair"], mode, {s: d[stage] for s, d in data.items()}, f"2pt-{stage}")
        out, _ = train(mode, work, spec, seed, flags, fields={}, suffix=f"-{stage}")
        models[stage] = (AutoModelForSeq2SeqLM.from_pretrained(out), AutoTokenizer.from_pretrained(out))
    translator = TwoPassTranslator(*models["reorderer"], *models["translator"], rule="btg")
    sources, references, alignments = test_split_texts(work, spec, mode)
    generate = dict(num_beams=mode["beams"], max_new_tokens=mode["max_length"], batch_size=50)
    hypotheses = translator(list(sources), **generate)
    oracle = translator.oracle_variant()(list(sources), list(alignments), **generate)
    oracle_scores = corpus_bleu_chrf(oracle, references, target_language=spec["pair"].split("-")[1])
    # the run's own directory (not runs/, which every 2PT seed shares: each would overwrite the others' hypotheses)
    out = run_dir(work, spec, seed)
    out.mkdir(parents=True, exist_ok=True)
    (out / "hypotheses_oracle.txt").write_text("\n".join(oracle) + "\n", encoding="utf-8")
    return (
        out,
        hypotheses,
        {"oracle_bleu": oracle_scores["bleu"]["score"], "oracle_chrf": oracle_scores["chrf"]["score"]},
    )


def mvpe(spec, seed, mode, work):
    """mvPE+POS (source tagged with NLTK's English tagger) or its vanilla baseline on en->de, trained for
    `epochs_mvpe` epochs (both, the same budget) and evaluated every epoch: perplexity per epoch (Fig. 4)."""
    import datasets

    from xlpe.evaluation import mvpe_metrics
    from xlpe.evaluation.plots import perplexity_history

    clean = datasets.load_from_disk(str(prepared_dir(work, spec["pair"], "clean", mode)))
    pairs = {s: list(zip(t["source_text"], t["target_text"])) for s, t in clean.items()}
    flags = write_text_split(work, spec["pair"], mode, pairs, "text")
    epochs = mode["epochs_mvpe"]
    flags += ["--eval_strategy", "epoch", "--num_train_epochs", str(epochs), "--max_steps", "-1"]
    if spec["model_type"] == "mvpe_pos":
        flags += ["--source_tagger", "nltk-en", "--nltk_data", str(NLTK_DATA)]
    out, _ = train(mode, work, spec, seed, flags)
    hypotheses = (out / "generated_predictions.txt").read_text(encoding="utf-8").splitlines()
    loss_key = "eval_loss" if spec["model_type"] == "vanilla" else "eval_translation_loss"  # tag loss left out
    history = perplexity_history(out / "trainer_state.json", loss_key=loss_key)
    return (
        out,
        hypotheses,
        {"perplexity_by_epoch": history, **mvpe_metrics(hypotheses, clean["test"]["target_text"], "de")},
    )


def alignment_scores(out: Path) -> dict:
    """AER of the model's cross-attention alignments on the en-fr Hansards gold set (XL PE Table 3)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from xlpe.evaluation.alignment_quality import (
        alignment_error_rate,
        attention_alignments,
        load_alignment_test_set,
    )

    gold = load_alignment_test_set(HANSARDS)
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(out), AutoTokenizer.from_pretrained(out)
    predicted = attention_alignments(model, tokenizer, gold.sources, gold.targets)
    return alignment_error_rate(predicted, gold.gold)


def eflomal_reference_aer() -> dict:
    from xlpe.evaluation.alignment_quality import alignment_error_rate, load_alignment_test_set
    from xlpe.features.alignment import align_with_eflomal

    gold = load_alignment_test_set(HANSARDS)
    flat = align_with_eflomal(
        [" ".join(s) for s in gold.sources], [" ".join(t) for t in gold.targets], "grow-diag-final-and"
    )
    return alignment_error_rate([set(zip(f[::2], f[1::2])) for f in flat], gold.gold)


# ---------------------------------------------------------------------------------------------------------
# The results file: one JSON line per finished run
# ---------------------------------------------------------------------------------------------------------


def run_key(mode_name: str, spec: dict, seed: int) -> str:
    return f"{mode_name}|{spec['pair']}|{spec['name']}|{seed}"


def read_results(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def other_run_key(mode_name: str, spec: dict, seed: int) -> str:
    """The key of the run `spec` reads: the same model's (`same_as`) or the saved model's it decodes (`model_of`)."""
    return run_key(mode_name, {"pair": spec["pair"], "name": spec["same_as"] or spec.get("model_of")}, seed)


def other_run_record(results: Path, mode_name: str, spec: dict, seed: int) -> dict | None:
    """The finished record of the run `spec` reads (`other_run_key`), or None (read now: another driver may have
    written it)."""
    key = other_run_key(mode_name, spec, seed)
    return next((r for r in read_results(results) if r["key"] == key), None)

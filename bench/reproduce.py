"""Side-by-side reproduction driver (issue 7, section 3): same data, same budget, same tokenizer, several seeds.

    python bench/reproduce.py --mode smoke --groups xl,noise --seeds 1 --work_dir runs/repro-smoke
    python bench/reproduce.py --mode cpu --groups xl --seeds 1,2 --work_dir runs/repro-cpu --max_minutes 40
    python bench/reproduce.py --report --work_dir runs/repro-cpu      # tables + plots -> BENCHMARKS.md

Groups (each a list of runs; every group also runs vanilla Marian on its language pair, the baseline):
  xl        vanilla, InXL, HeadXL, Combination (XL PE)           tau    HeadXL with tau = 0..H (XL PE Fig. 3)
  dpe       DPE, lambda in {0.1, 0.3, 0.5, 0.7} (DPE Table 4)    table5 base / 8E / 10E / DPE: L, L+2, L+4 encoder
                                                                        layers, L + 2 DPE layers (DPE Table 5)
  2pt       two-pass Transformer and its oracle (DPE Table 2)    mvpe   mvPE+POS on en->de (perplexity per epoch,
  noise     Combination trained on 0-20% swapped XL indices              BLEU-1..4, ROUGE, length ratio)
  alignment AER on the en-fr Hansards gold set of models trained on Multi30k en->fr, eflomal as a reference row
  xl-combination  vanilla and Combination only (the CI smoke test; the CPU-mode headline comparison)
  init      vanilla, 8E, 10E, Combination again with embeddings N(0, d^-1/2) and every linear layer N(0, 0.02)
            (xlpe-train --init_std 0.02 --embedding_init_std d^-1/2), next to the default init (all d^-1/2)

Each language pair is prepared ONCE (xlpe.prepare.prepare_splits, cached under --work_dir) with one joint
tokenizer per language set; every run goes through `xlpe.train.main` (the `xlpe-train` API). Results are
appended to <work_dir>/results.jsonl as each run finishes; runs already there are skipped (resumable).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("XLPE_SHARED_DIR", REPO.parent / "shared")) / "data"
MULTI30K = DATA / "multi30k"
NLTK_DATA = DATA / "nltk_data"
HANSARDS = DATA / "word_alignment_gold" / "enfr_hansards"
NOISE_RATIOS = (0.0, 0.05, 0.1, 0.15, 0.2)
DPE_LAMBDAS = (0.1, 0.3, 0.5, 0.7)

# ---------------------------------------------------------------------------------------------------------
# Modes: data size and training budget (the same for every run of a mode)
# ---------------------------------------------------------------------------------------------------------

MODES = {
    "smoke": dict(train=300, val=30, test=30, steps=6, batch=16, d_model=32, layers=1, heads=4, ffn=64, vocab=400,
                  beams=1, lr=1e-3, warmup=2, epochs_mvpe=2, max_length=64),
    "cpu": dict(train=29000, val=300, test=1000, steps=1200, batch=64, d_model=128, layers=2, heads=4, ffn=256,
                vocab=4000, beams=4, lr=2e-3, warmup=100, epochs_mvpe=3, max_length=64),
    "gpu": dict(train=29000, val=1014, test=1000, steps=20000, batch=128, d_model=256, layers=2, heads=4, ffn=1024,
                vocab=8000, beams=5, lr=7e-4, warmup=1000, epochs_mvpe=20, max_length=100),
}  # fmt: skip


def run(name, model_type, pair="de-en", data="clean", kind="train", same_as=None, **fields):
    """One run of a group: a name unique within its language pair, the family, its config fields. `same_as`:
    the name of another run (same pair) that trains exactly this model; its result is reused, not recomputed."""
    return dict(name=name, model_type=model_type, pair=pair, data=data, kind=kind, fields=fields, same_as=same_as)


def deeper_encoder(name: str, extra_layers: int, mode: dict, **fields) -> dict:
    """Table 5's 8E / 10E at this mode's width: vanilla with `extra_layers` more encoder layers, nothing else changed."""
    return run(name, "vanilla", encoder_layers=mode["layers"] + extra_layers, **fields)


def group_runs(group: str, mode: dict) -> list[dict]:
    heads = mode["heads"]
    if group == "xl":
        return [run("vanilla", "vanilla")] + [run(s, "xlpe", xl_strategy=s) for s in ("in", "head", "combination")]
    if group == "xl-combination":  # the smallest comparison: the CI test, and the CPU-mode headline run
        return [run("vanilla", "vanilla"), run("combination", "xlpe", xl_strategy="combination")]
    if group == "tau":
        default_tau = max(1, heads // 4)  # the "head" run of group xl (XLPEMarianConfig's default tau)
        return [run("vanilla", "vanilla")] + [run(f"head-tau{t}", "xlpe", xl_strategy="head", xl_heads=t,
                                                  same_as="head" if t == default_tau else None) for t in range(heads + 1)]  # fmt: skip
    if group == "dpe":
        return [run("vanilla", "vanilla")] + [run(f"dpe-lambda{lam}", "dpe", order_loss_weight=lam) for lam in DPE_LAMBDAS]
    if group == "table5":
        return [run("vanilla", "vanilla"), run("table5-base", "vanilla", same_as="vanilla"), deeper_encoder("table5-8E", 2, mode),
                deeper_encoder("table5-10E", 4, mode), run("table5-DPE", "dpe", order_loss_weight=0.5, same_as="dpe-lambda0.5")]  # fmt: skip
    if group == "2pt":
        return [run("vanilla", "vanilla"), run("2pt", "vanilla", kind="two_pass")]
    if group == "mvpe":
        return [run("vanilla", "vanilla", pair="en-de", kind="mvpe"), run("mvpe_pos", "mvpe_pos", pair="en-de", kind="mvpe",
                                                                    config_overrides=f"pos_dim={mode['d_model'] // 4}")]
    if group == "noise":
        return [run("vanilla", "vanilla")] + [run(f"combination-noise{r}", "xlpe", data=f"noise{r}", xl_strategy="combination",
                                                  same_as="combination" if r == 0 else None) for r in NOISE_RATIOS]  # fmt: skip
    if group == "init":  # Table 5's collapse: the same models with embeddings N(0, d^-1/2) and linears N(0, 0.02)
        small = dict(init_std=0.02, embedding_init_std=round(mode["d_model"] ** -0.5, 6))
        return [run("vanilla", "vanilla"), run("init-vanilla", "vanilla", **small), deeper_encoder("table5-8E", 2, mode),
                deeper_encoder("init-8E", 2, mode, **small), deeper_encoder("table5-10E", 4, mode),
                deeper_encoder("init-10E", 4, mode, **small), run("combination", "xlpe", xl_strategy="combination"),
                run("init-combination", "xlpe", xl_strategy="combination", **small)]  # fmt: skip
    if group == "alignment":
        return [run("vanilla", "vanilla", pair="en-fr")] + [run(s, "xlpe", pair="en-fr", xl_strategy=s)
                                                             for s in ("in", "head", "combination")]  # fmt: skip
    raise ValueError(f"unknown group {group!r}; known: {', '.join(GROUPS)}")


GROUPS = ("xl", "xl-combination", "tau", "dpe", "table5", "2pt", "mvpe", "noise", "alignment", "init")

# ---------------------------------------------------------------------------------------------------------
# Data: raw Multi30k splits, one joint tokenizer per language set, one preparation per pair (and noise ratio)
# ---------------------------------------------------------------------------------------------------------


def multi30k_split(split: str, lang: str, limit: int, tokenized: bool) -> list[str]:
    from xlpe.alignment import read_text_lines

    path = MULTI30K / ("tok" if tokenized else "raw") / (f"{split}.lc.norm.tok.{lang}.gz" if tokenized else f"{split}.{lang}.gz")
    return read_text_lines(path)[:limit]


def raw_splits(pair: str, mode: dict):
    """{train, validation, test} ParallelSplits; en-fr uses the lowercased tokenized text (as the Hansards gold)."""
    from xlpe.prepare import ParallelSplit

    src, tgt = pair.split("-")
    tokenized = pair == "en-fr"
    names = {"train": ("train", mode["train"]), "validation": ("val", mode["val"]), "test": ("test_2016_flickr", mode["test"])}
    return {split: ParallelSplit(multi30k_split(f, src, n, tokenized), multi30k_split(f, tgt, n, tokenized),
                                 f"multi30k/{f}.{src}", f"multi30k/{f}.{tgt}") for split, (f, n) in names.items()}  # fmt: skip


def tokenizer_dir(work: Path, pair: str, mode: dict) -> Path:
    """One joint tokenizer per language set (de-en and en-de share one), trained once on the training text."""
    from xlpe.tokenization import train_joint_tokenizer

    path = work / "data" / ("-".join(sorted(pair.split("-"))) + ("-tok" if pair == "en-fr" else "")) / "tokenizer"
    if not (path / "tokenizer_config.json").is_file():
        train = raw_splits(pair, mode)["train"]
        tokenizer = train_joint_tokenizer(train.sources + train.targets, vocab_size=mode["vocab"], model="bpe",
                                          model_max_length=mode["max_length"])  # fmt: skip
        tokenizer.save_pretrained(path)
    return path


def prepared_dir(work: Path, pair: str, data: str, mode: dict) -> Path:
    """The prepared DatasetDict of a pair ("clean"; "noise<r>": the training split's XL indices swapped at
    ratio r, validation/test clean, alignments reused from the clean preparation)."""
    import datasets
    from transformers import AutoTokenizer

    from xlpe.prepare import ParallelSplit, prepare_splits

    path = work / "data" / pair / data
    if (path / "dataset_dict.json").is_file():
        return path
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir(work, pair, mode))
    options = dict(features=("reorder_positions", "target_positions"), max_length=mode["max_length"], keep_text=True,
                   cache_dir=str(work / "cache"), seed=0)  # fmt: skip
    if data == "clean":
        prepared, reports = prepare_splits(raw_splits(pair, mode), tokenizer, **options)
    else:
        clean = datasets.load_from_disk(str(prepared_dir(work, pair, "clean", mode)))
        train = clean["train"]
        links = [[int(x) for link in a.split() for x in link.split("-")] for a in train["word_alignment"]]
        split = ParallelSplit(train["source_text"], train["target_text"], f"{pair}:train", f"{pair}:train", links, "clean run")
        noisy, reports = prepare_splits({"train": split}, tokenizer, **options, noise_ratio=float(data.removeprefix("noise")))
        prepared = {"train": noisy["train"], "validation": clean["validation"], "test": clean["test"]}
    datasets.DatasetDict(prepared).save_to_disk(str(path))
    (path / "report.json").write_text(json.dumps(reports, indent=2, default=str))
    return path


def write_text_split(work: Path, pair: str, mode: dict, pairs_by_split: dict[str, list[tuple[str, str]]], name: str) -> list[str]:
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
# Training runs (xlpe.train.main) and their scores
# ---------------------------------------------------------------------------------------------------------


def train_args(mode: dict, out: Path, seed: int, pair: str, tokenizer: Path, model_type: str, fields: dict) -> list[str]:
    src, tgt = pair.split("-")
    fields = dict(fields)
    encoder_layers = fields.pop("encoder_layers", mode["layers"])  # deeper_encoder runs (Table 5)
    args = ["--output_dir", str(out), "--overwrite_output_dir", "--seed", str(seed), "--source_lang", src,
            "--target_lang", tgt, "--tokenizer_name", str(tokenizer), "--model_type", model_type,
            "--d_model", str(mode["d_model"]), "--encoder_layers", str(encoder_layers), "--decoder_layers", str(mode["layers"]),
            "--attention_heads", str(mode["heads"]), "--ffn_dim", str(mode["ffn"]), "--dropout", "0.1",
            "--max_steps", str(mode["steps"]), "--per_device_train_batch_size", str(mode["batch"]),
            "--per_device_eval_batch_size", "100", "--learning_rate", str(mode["lr"]), "--warmup_steps", str(mode["warmup"]),
            "--num_beams", str(mode["beams"]), "--max_source_length", str(mode["max_length"]),
            "--max_target_length", str(mode["max_length"]), "--save_strategy", "no", "--logging_steps", "50",
            "--report_to", "none", "--disable_tqdm", "true", "--num_translation_examples", "0",
            "--cache_dir", str(out.parent.parent / "cache")]  # fmt: skip
    for key, value in fields.items():
        args += [f"--{key}", str(value)]
    return args


def train(mode, work, spec, seed, extra: list[str], model_type=None, fields=None, suffix="") -> tuple[Path, dict]:
    from xlpe.train import main as xlpe_train

    out = work / "runs" / f"{spec['pair']}-{spec['name']}{suffix}-seed{seed}"
    tokenizer = tokenizer_dir(work, spec["pair"], mode)
    fields = spec["fields"] if fields is None else fields
    metrics = xlpe_train(train_args(mode, out, seed, spec["pair"], tokenizer, model_type or spec["model_type"], fields) + extra)
    return out, metrics


def test_split_texts(work: Path, spec: dict, mode: dict):
    import datasets

    test = datasets.load_from_disk(str(prepared_dir(work, spec["pair"], "clean", mode)))["test"]
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
    elif spec["kind"] == "two_pass":
        out, hypotheses, record = two_pass(spec, seed, mode, work)
    elif spec["kind"] == "mvpe":
        out, hypotheses, record = mvpe(spec, seed, mode, work)
    _, references, _ = test_split_texts(work, spec, mode)
    scores = corpus_bleu_chrf(hypotheses, references, target_language=target_lang)
    (out / "hypotheses.txt").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    record.update(bleu=scores["bleu"]["score"], chrf=scores["chrf"]["score"], bleu_signature=scores["bleu"]["signature"],
                  chrf_signature=scores["chrf"]["signature"], hypotheses=str(out / "hypotheses.txt"), seconds=round(time.time() - started, 1))  # fmt: skip
    oracle_file = out / "generated_predictions_oracle.txt"  # XL PE runs: the test split decoded with oracle positions
    if spec["kind"] == "train" and oracle_file.is_file():
        oracle = oracle_file.read_text(encoding="utf-8").splitlines()
        oracle_scores = corpus_bleu_chrf(oracle, references, target_language=target_lang)
        (out / "hypotheses_oracle.txt").write_text("\n".join(oracle) + "\n", encoding="utf-8")
        record.update(oracle_bleu=oracle_scores["bleu"]["score"], oracle_chrf=oracle_scores["chrf"]["score"],
                      oracle_hypotheses=str(out / "hypotheses_oracle.txt"))  # fmt: skip
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
    from xlpe.two_pass import TwoPassTranslator, two_pass_training_pairs

    clean = datasets.load_from_disk(str(prepared_dir(work, spec["pair"], "clean", mode)))
    data = {s: two_pass_training_pairs(t["source_text"], t["target_text"], t["word_alignment"]) for s, t in clean.items()}
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
    return out.parent, hypotheses, {"oracle_bleu": oracle_scores["bleu"]["score"], "oracle_chrf": oracle_scores["chrf"]["score"]}


def mvpe(spec, seed, mode, work):
    """mvPE+POS (source tagged with NLTK's English tagger) or its vanilla baseline on en->de, trained for
    `epochs_mvpe` epochs (both, the same budget) and evaluated every epoch: perplexity per epoch (Fig. 4)."""
    import datasets

    from xlpe.evaluation import mvpe_metrics
    from xlpe.plots import perplexity_history

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
    return out, hypotheses, {"perplexity_by_epoch": history, **mvpe_metrics(hypotheses, clean["test"]["target_text"], "de")}


def alignment_scores(out: Path) -> dict:
    """AER of the model's cross-attention alignments on the en-fr Hansards gold set (XL PE Table 3)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from xlpe.alignment_quality import (
        alignment_error_rate,
        attention_alignments,
        load_alignment_test_set,
    )

    gold = load_alignment_test_set(HANSARDS)
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(out), AutoTokenizer.from_pretrained(out)
    predicted = attention_alignments(model, tokenizer, gold.sources, gold.targets)
    return alignment_error_rate(predicted, gold.gold)


def eflomal_reference_aer() -> dict:
    from xlpe.alignment import align_with_eflomal
    from xlpe.alignment_quality import alignment_error_rate, load_alignment_test_set

    gold = load_alignment_test_set(HANSARDS)
    flat = align_with_eflomal([" ".join(s) for s in gold.sources], [" ".join(t) for t in gold.targets], "grow-diag-final-and")
    return alignment_error_rate([set(zip(f[::2], f[1::2])) for f in flat], gold.gold)


# ---------------------------------------------------------------------------------------------------------
# The driver: resumable JSON lines, a budget guard
# ---------------------------------------------------------------------------------------------------------


def run_key(mode_name: str, spec: dict, seed: int) -> str:
    return f"{mode_name}|{spec['pair']}|{spec['name']}|{seed}"


def read_results(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def same_run_record(results: Path, mode_name: str, spec: dict, seed: int) -> dict | None:
    """The finished record of the run `spec` is the same model as (read now: another driver may have written it)."""
    key = run_key(mode_name, {"pair": spec["pair"], "name": spec["same_as"]}, seed)
    return next((r for r in read_results(results) if r["key"] == key), None)


def run_in_workers(args, planned: list, done: set, work: Path, deadline: float | None) -> list[str]:
    """Run the planned trainings (not the reused ones) `args.workers` at a time, each in its own single-threaded
    process (`--only KEY`, log in <work_dir>/logs/). Data are prepared here first, so the workers only read them;
    two seeds of the same run never overlap (they share text files and configs). Returns the keys not started
    because --max_minutes passed."""
    import subprocess

    todo = [item for item in planned if not item[1]["same_as"] and item[3] not in done]
    mode = MODES[args.mode]
    for pair, data in dict.fromkeys((spec["pair"], spec["data"]) for _, spec, _, _ in todo):
        prepared_dir(work, pair, data, mode)  # before any worker starts (a noisy set prepares its clean one)
    (work / "logs").mkdir(exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    running: dict[str, tuple] = {}  # key -> (process, log handle, run identity)
    not_started, failed = [], []
    while todo or running:
        for key, (process, log, _) in list(running.items()):
            if process.poll() is not None:
                log.close()
                del running[key]
                if process.returncode != 0:
                    failed.append(key)
                print(f"[reproduce] worker finished {key} (exit {process.returncode}; log {log.name})", flush=True)
        busy = {identity for _, _, identity in running.values()}
        while todo and len(running) < args.workers:
            start = next((i for i, (_, spec, _, _) in enumerate(todo) if (spec["pair"], spec["name"]) not in busy), None)
            if start is None:
                break
            group, spec, seed, key = todo.pop(start)
            if deadline and time.time() > deadline:
                not_started.append(key)
                continue
            log = (work / "logs" / (key.replace("|", "_") + ".log")).open("w")
            command = [sys.executable, str(Path(__file__).resolve()), "--mode", args.mode, "--groups", group, "--seeds",
                       str(seed), "--work_dir", str(work), "--only", key]  # fmt: skip
            print(f"[reproduce] worker starts {key}", flush=True)
            running[key] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), log, (spec["pair"], spec["name"]))
            busy.add((spec["pair"], spec["name"]))
        time.sleep(2)
    if failed:
        raise SystemExit(f"[reproduce] runs failed (see {work / 'logs'}): {failed}")
    return not_started


def run_all(args) -> int:
    mode, work = MODES[args.mode], Path(args.work_dir)
    results = work / "results.jsonl"
    work.mkdir(parents=True, exist_ok=True)
    marker = work / "mode.txt"  # data and budgets differ per mode: one work_dir holds one mode
    if marker.is_file():  # written once, atomically: drivers and their workers read it side by side
        held = marker.read_text().strip()
        if held != args.mode:
            raise SystemExit(f"{work} holds {held}-mode runs; use another --work_dir for --mode {args.mode}")
    else:
        staging = work / f".mode.txt.{os.getpid()}"
        staging.write_text(args.mode)
        os.replace(staging, marker)
    done = {r["key"] for r in read_results(results)}
    deadline = time.time() + 60 * args.max_minutes if args.max_minutes else None
    planned, seen = [], set()
    for seed in args.seeds:  # seed-major: a budget stop leaves complete seeds, not half a comparison
        for group in args.groups:
            for spec in group_runs(group, mode):
                key = run_key(args.mode, spec, seed)
                if key not in seen:
                    seen.add(key)
                    planned.append((group, spec, seed, key))
    planned.sort(key=lambda item: (args.seeds.index(item[2]), item[1]["same_as"] is not None))  # reused after their source
    if args.only:
        planned = [item for item in planned if item[3] == args.only]
        if not planned:
            raise SystemExit(f"--only {args.only!r} is not a run of --mode {args.mode} --groups {','.join(args.groups)} "
                             f"--seeds {','.join(map(str, args.seeds))} (keys look like 'cpu|de-en|combination|1')")
    skipped_for_time = []
    if args.workers > 1:
        skipped_for_time = run_in_workers(args, planned, done, work, deadline)
        planned = [item for item in planned if item[1]["same_as"]]  # reused results: read here, after the workers
    for group, spec, seed, key in planned:
        if key in done:
            print(f"[reproduce] skip (already in {results.name}): {key}")
            continue
        if deadline and time.time() > deadline and not spec["same_as"]:  # a reused result costs no time
            skipped_for_time.append(key)
            continue
        record = {"key": key, "group": group, "mode": args.mode, "seed": seed, **{k: spec[k] for k in ("name", "model_type", "pair", "data", "kind", "fields")}}
        if spec["same_as"]:
            source = same_run_record(results, args.mode, spec, seed)
            if source is None:
                print(f"[reproduce] not yet run: {key} reuses {spec['same_as']!r} of seed {seed}; add its group (rerun to resume)")
                continue
            record.update({k: v for k, v in source.items() if k not in record}, same_as=source["key"])
            print(f"[reproduce] {key}: the same model as {source['key']}, result reused", flush=True)
        else:
            print(f"[reproduce] run {key}", flush=True)
            record.update(execute(spec, seed, mode, work), date=time.strftime("%Y-%m-%d"))
        with results.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        print(f"[reproduce] {key}: BLEU {record['bleu']:.2f} chrF {record['chrf']:.2f} ({record['seconds']} s)", flush=True)
    if "alignment" in args.groups and not (work / "eflomal_aer.json").is_file():
        (work / "eflomal_aer.json").write_text(json.dumps(eflomal_reference_aer()))
    if skipped_for_time:
        print(f"[reproduce] --max_minutes {args.max_minutes} reached; not run (rerun to resume): {skipped_for_time}")
    return 0


# ---------------------------------------------------------------------------------------------------------
# The report: mean +- std over seeds, paired bootstrap vs vanilla, Markdown tables, plots, BENCHMARKS.md
# ---------------------------------------------------------------------------------------------------------


def mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.2f} ± {std:.2f}"


def significance(record: dict, baseline: dict | None, references: list[str], target_lang: str) -> dict | None:
    from xlpe.evaluation import paired_significance

    if baseline is None or record is baseline:
        return None
    read = lambda r: Path(r["hypotheses"]).read_text(encoding="utf-8").splitlines()
    return paired_significance(read(record), read(baseline), references, target_language=target_lang)["metrics"]


def group_table(group: str, records: list[dict], work: Path, modes: set[str]) -> list[str]:
    """Markdown rows for one group: BLEU/chrF mean ± std over seeds, delta and paired bootstrap per seed."""
    in_group_order = [spec["name"] for mode in sorted(modes) for spec in group_runs(group, MODES[mode])]
    names = sorted(dict.fromkeys(r["name"] for r in records), key=lambda n: in_group_order.index(n) if n in in_group_order else len(in_group_order))
    lines = [f"### {group} ({', '.join(sorted(modes))} mode)", "",
             "| run | pair | seeds | BLEU | chrF | ΔBLEU / ΔchrF vs vanilla | bootstrap p BLEU / chrF, per seed | verdict (BLEU) |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name in names:
        rows = [r for r in records if r["name"] == name]
        pvalues, deltas, chrf_pvalues, chrf_deltas = [], [], [], []
        for r in rows:
            base = next((b for b in records if b["name"] == "vanilla" and b["seed"] == r["seed"] and b["pair"] == r["pair"]), None)
            refs = reference_texts(work, r["pair"], r["mode"])
            sig = significance(r, base, refs, r["pair"].split("-")[1])
            if sig:
                pvalues.append(sig["BLEU"]["p_value"]), deltas.append(sig["BLEU"]["delta"])
                chrf = next(v for k, v in sig.items() if k.startswith("chrF"))  # sacrebleu names it chrF2
                chrf_pvalues.append(chrf["p_value"]), chrf_deltas.append(chrf["delta"])
        if name == "vanilla":
            verdict, delta, pcol = "baseline", "-", "-"
        else:
            significant = sum(p < 0.05 for p in pvalues)
            delta = f"{statistics.mean(deltas):+.2f} / {statistics.mean(chrf_deltas):+.2f}" if deltas else "-"
            pcol = ", ".join(f"{p:.3f} / {q:.3f}" for p, q in zip(pvalues, chrf_pvalues)) or "-"
            same_sign = all(d > 0 for d in deltas) or all(d < 0 for d in deltas)
            direction = "better" if deltas and statistics.mean(deltas) > 0 else "worse"
            verdict = (f"{direction} (significant in {significant}/{len(pvalues)} seeds, p<0.05)" if pvalues and significant == len(pvalues) and same_sign
                       else f"within noise (significant in {significant}/{len(pvalues)} seeds)")  # fmt: skip
            verdict += "; one seed: indicative only" if len(pvalues) == 1 else ""
        reused = sorted({r["same_as"].split("|")[2] for r in rows if r.get("same_as")})
        label = f"{name} (= {', '.join(reused)})" if reused else name  # the same model: its result, not a new run
        lines.append(f"| {label} | {rows[0]['pair']} | {len(rows)} | {mean_std([r['bleu'] for r in rows])} | "
                     f"{mean_std([r['chrf'] for r in rows])} | {delta} | {pcol} | {verdict} |")  # fmt: skip
    extra = extra_tables(group, records, work)
    signatures = sorted({r["bleu_signature"] for r in records} | {r["chrf_signature"] for r in records})
    return lines + [""] + extra + ["Signatures: " + "; ".join(f"`{s}`" for s in signatures), ""]


def oracle_table(records: list[dict], work: Path) -> list[str]:
    """XL PE runs decoded with oracle positions next to their predicted-position scores: the gap is what the
    test-time reorderer costs (paired bootstrap oracle vs predicted, per seed)."""
    names = list(dict.fromkeys(r["name"] for r in records if "oracle_bleu" in r))
    if not names:
        return []
    lines = ["| XL PE run | seeds | BLEU, predicted positions | BLEU, oracle positions | oracle − predicted | "
             "bootstrap p per seed |", "|---|---|---|---|---|---|"]  # fmt: skip
    for name in names:
        rows = [r for r in records if r["name"] == name and "oracle_bleu" in r]
        pvalues = []
        for r in rows:
            oracle = {"hypotheses": r["oracle_hypotheses"]}
            sig = significance(oracle, r, reference_texts(work, r["pair"], r["mode"]), r["pair"].split("-")[1])
            pvalues.append(f"{sig['BLEU']['p_value']:.3f}" if sig else "-")
        gap = statistics.mean(r["oracle_bleu"] - r["bleu"] for r in rows)
        lines.append(f"| {name} | {len(rows)} | {mean_std([r['bleu'] for r in rows])} | "
                     f"{mean_std([r['oracle_bleu'] for r in rows])} | {gap:+.2f} | {', '.join(pvalues)} |")  # fmt: skip
    return lines + [""]


def extra_tables(group: str, records: list[dict], work: Path | None = None) -> list[str]:
    lines = oracle_table(records, work) if work is not None else []
    if group == "2pt":
        rows = [r for r in records if r["kind"] == "two_pass"]
        lines += ["| 2PT row | BLEU | chrF |", "|---|---|---|",
                  f"| 2PT (reorderer + translator) | {mean_std([r['bleu'] for r in rows])} | {mean_std([r['chrf'] for r in rows])} |",
                  (f"| 2PT oracle (alignment-reordered source) | {mean_std([r['oracle_bleu'] for r in rows])} | "
                   f"{mean_std([r['oracle_chrf'] for r in rows])} |"), ""]  # fmt: skip
    if group == "mvpe":  # mvPE+POS Tables III-V: BLEU-1..4 (0-1), ROUGE F1 (0-1), length ratio; one column per run
        names = list(dict.fromkeys(r["name"] for r in records if r["kind"] == "mvpe"))
        by_name = {n: [r for r in records if r["name"] == n and r["kind"] == "mvpe"] for n in names}
        metrics = {f"BLEU-{n}": (lambda r, n=n: r[f"bleu-{n}"]["score"]) for n in range(1, 5)}
        metrics.update({f"ROUGE {k} F1": (lambda r, k=k: r["rouge"][k]["f"] if isinstance(r["rouge"][k], dict) else r["rouge"][k])
                        for k in ("rouge1", "rouge2", "rougeL")})  # fmt: skip
        metrics["length ratio"] = lambda r: r["length_ratio"]["ratio"]
        metrics["final perplexity (val)"] = lambda r: list(r["perplexity_by_epoch"].values())[-1]
        lines += ["| metric | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for label, get in metrics.items():
            lines.append(f"| {label} | " + " | ".join(mean_std([float(get(r)) for r in by_name[n]]) for n in names) + " |")
        lines.append("")
    if group == "alignment":
        lines += ["| model (en→fr, Hansards gold) | AER | precision | recall |", "|---|---|---|---|"]
        for name in dict.fromkeys(r["name"] for r in records):
            rows = [r["alignment"] for r in records if r["name"] == name and "alignment" in r]
            if rows:
                lines.append(f"| {name} | " + " | ".join(mean_std([100 * a[k] for a in rows]) for k in ("aer", "precision", "recall")) + " |")
        lines.append("")
    return lines


@functools.cache
def reference_texts(work: Path, pair: str, mode_name: str) -> list[str]:
    import datasets

    return datasets.load_from_disk(str(work / "data" / pair / "clean"))["test"]["target_text"]


def plots(records: list[dict], out_dir: Path, prefix: str) -> list[str]:
    from xlpe.plots import plot_noise_curve, plot_perplexity_per_epoch, plot_tau_sweep

    made = []
    mean_by = lambda rows, key: {k: statistics.mean(v) for k, v in _collect(rows, key).items()}
    tau = [r for r in records if r["group"] == "tau" and r["name"].startswith("head-tau")]
    if tau:
        made.append(plot_tau_sweep(mean_by(tau, lambda r: float(r["fields"]["xl_heads"])), out_dir / f"{prefix}_tau.png"))
    noise = [r for r in records if r["group"] == "noise" and r["data"].startswith("noise")]
    if noise:
        vanilla = [r["bleu"] for r in records if r["name"] == "vanilla" and r["pair"] == noise[0]["pair"]]
        made.append(plot_noise_curve(mean_by(noise, lambda r: float(r["data"].removeprefix("noise"))), out_dir / f"{prefix}_noise.png",
                                     baseline=statistics.mean(vanilla) if vanilla else None))  # fmt: skip
    mvpe_rows = [r for r in records if r["kind"] == "mvpe"]
    if mvpe_rows:
        curves = {f"{r['name']} seed {r['seed']}": {float(k): v for k, v in r["perplexity_by_epoch"].items()} for r in mvpe_rows}
        made.append(plot_perplexity_per_epoch(curves, out_dir / f"{prefix}_perplexity.png", split="validation"))
    return [str(Path(p).resolve().relative_to(REPO)) if Path(p).resolve().is_relative_to(REPO) else str(p) for p in made]


def _collect(rows, key):
    collected: dict[float, list[float]] = {}
    for r in rows:
        collected.setdefault(key(r), []).append(r["bleu"])
    return collected


def report(args) -> int:
    work = Path(args.work_dir)
    records = read_results(work / "results.jsonl")
    if not records:
        raise SystemExit(f"no results in {work / 'results.jsonl'}: run the groups first")
    groups = list(dict.fromkeys(r["group"] for r in records))
    lines = []
    for group in groups:
        rows = [r for r in records if r["group"] == group]
        # a run is recorded once (under the group that ran it) and belongs to every group that lists it: vanilla
        # to all groups of its pair, table5-8E to init, ...
        pairs, modes = {r["pair"] for r in rows}, {r["mode"] for r in rows}
        listed = {spec["name"] for mode in modes for spec in group_runs(group, MODES[mode])}
        rows = [r for r in records if r["name"] in listed and r["pair"] in pairs and r["mode"] in modes and r not in rows] + rows
        lines += group_table(group, rows, work, modes)
    eflomal = work / "eflomal_aer.json"
    if eflomal.is_file():
        a = json.loads(eflomal.read_text())
        lines += [(f"eflomal's own alignment of the Hansards test text (reference row): AER {100 * a['aer']:.2f}, "
                   f"precision {100 * a['precision']:.2f}, recall {100 * a['recall']:.2f}."), ""]  # fmt: skip
    modes = sorted({r["mode"] for r in records})
    images = plots(records, Path(args.plot_dir), f"reproduce_{'_'.join(modes)}")
    lines += [f"![{Path(p).stem}]({p})" for p in images]  # repo-relative: BENCHMARKS.md sits at the root
    table = "\n".join(lines)
    print(table)
    if args.benchmarks:
        write_section(Path(args.benchmarks), args, modes, table, run_dates(records))
    return 0


def describe_budget(m: dict) -> str:
    return (f"Multi30k {m['train']} train / {m['val']} val / {m['test']} test_2016_flickr pairs, {m['steps']} steps x "
            f"batch {m['batch']} (mvpe group: {m['epochs_mvpe']} epochs), lr {m['lr']}, d={m['d_model']}, "
            f"{m['layers']}+{m['layers']} layers, {m['heads']} heads, FFN {m['ffn']}, joint BPE {m['vocab']}, beam {m['beams']}")


def run_dates(records: list[dict]) -> str:
    """First and last day the runs finished (records written before dates were kept: their hypotheses file's)."""
    days = sorted({r.get("date") or time.strftime("%Y-%m-%d", time.localtime(os.path.getmtime(r["hypotheses"]))) for r in records})
    return days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"


def write_section(path: Path, args, modes: list[str], body: str, dates: str) -> None:
    """Replace (or append at the end) the `## Reproduction` section of BENCHMARKS.md; nothing else changes."""
    text = path.read_text(encoding="utf-8")  # re-read just before editing
    command = args.command or "python bench/reproduce.py " + " ".join(sys.argv[1:])
    header = (f"## Reproduction\n\nGenerated by `bench/reproduce.py` (issue 7 §3). Mode(s): **{', '.join(modes)}**"
              f" (budget per run: {'; '.join(f'{m}: {describe_budget(MODES[m])}' for m in modes)}). Machine: {args.machine or platform.platform()}, "
              f"`OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}`. Date: {dates}.\n\n"
              f"Command:\n\n```bash\n{command}\n```\n\nΔBLEU is the mean over seeds of (run − vanilla of the same seed); "
              "p: sacrebleu paired bootstrap (1000 resamples) against that vanilla run. A gain is called real "
              "only when it is significant in every seed; otherwise it is within noise. Groups not shown here were not "
              f"run in this mode; all groups: `--groups {','.join(GROUPS)}`; modes: `--mode smoke|cpu|gpu` "
              "(gpu: the papers' IWSLT-like d=256, FFN 1024, 2+2 layers).\n\n")  # fmt: skip
    section = header + body.rstrip() + "\n"
    start = text.find("\n## Reproduction")
    if start == -1:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + 1)
        text = text[: start + 1] + section + (text[end:] if end != -1 else "")
    path.write_text(text, encoding="utf-8")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=sorted(MODES), default="smoke")
    parser.add_argument("--groups", default="xl", help=f"comma-separated: {','.join(GROUPS)}")
    parser.add_argument("--seeds", default="1", help="comma-separated seeds, e.g. 1,2,3")
    parser.add_argument("--work_dir", default="runs/reproduce")
    parser.add_argument("--max_minutes", type=float, default=None, help="start no new run after this many minutes")
    parser.add_argument("--workers", type=int, default=1, help="trainings at a time, one process and one thread each")
    parser.add_argument("--only", default=None, help="run just this key, e.g. 'cpu|de-en|dpe-lambda0.5|2' (what a worker runs)")
    parser.add_argument("--report", action="store_true", help="aggregate results.jsonl (after running, if --run too)")
    parser.add_argument("--run", action="store_true", help="with --report: run the groups first")
    parser.add_argument("--benchmarks", default=None, help="write the tables into this BENCHMARKS.md's ## Reproduction")
    parser.add_argument("--plot_dir", default=str(REPO / "bench"))
    parser.add_argument("--machine", default=None, help="machine description for the report")
    parser.add_argument("--command", default=None, help="the command to record in the report (default: this one)")
    args = parser.parse_args(argv)
    args.groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    for g in args.groups:
        group_runs(g, MODES[args.mode])  # unknown names fail before any work
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if args.workers < 1:
        raise SystemExit(f"--workers must be at least 1, got {args.workers}")
    if not args.report or args.run:
        run_all(args)
    return report(args) if args.report else 0


if __name__ == "__main__":
    sys.exit(main())

"""Side-by-side reproduction driver (issue 7, section 3): same data, same budget, same tokenizer, several seeds.

    python bench/reproduce.py --mode smoke --groups xl,noise --seeds 1 --work_dir runs/repro-smoke
    python bench/reproduce.py --mode cpu --groups xl --seeds 1,2 --work_dir runs/repro-cpu --max_minutes 40
    python bench/reproduce.py --report --work_dir runs/repro-cpu      # tables + plots (--benchmarks PAGE: into a page)
    python bench/reproduce.py --mode cpu --pair en-ja --groups xl,baselines --seeds 1,2,3 --work_dir runs/repro-enja

--pair runs the groups on another language pair of the shared data: de-en (the default of most groups), en-de,
en-fr (Multi30k), en-ja (small_parallel_enja), zh-en (Tatoeba cmn-eng, jieba-segmented source). BLEU uses the
target language's sacrebleu tokenizer (ja-mecab for Japanese, zh for Chinese).

Groups (each a list of runs; every group also runs vanilla Marian on its language pair, the baseline):
  xl        vanilla, InXL, HeadXL, Combination (XL PE)           tau    HeadXL with tau = 0..H (XL PE Fig. 3)
  dpe       DPE, lambda in {0.1, 0.3, 0.5, 0.7} (DPE Table 4)    table5 base / 8E / 10E / DPE: L, L+2, L+4 encoder
                                                                        layers, L + 2 DPE layers (DPE Table 5)
  2pt       two-pass Transformer and its oracle (DPE Table 2)    mvpe   mvPE+POS on en->de (perplexity per epoch,
  noise     Combination trained on 0-20% swapped XL indices              BLEU-1..4, ROUGE, length ratio)
  dpe-paper DPE as published: the gate fixed at 1 (encoder input X + r, Fig. 4), and the reference code's loss
            (lambda on the order side, L_order / #target tokens), beside the default DPE (learned gate) at lambda 0.5
  alignment AER on the en-fr Hansards gold set of models trained on Multi30k en->fr, eflomal as a reference row
  xl-combination  vanilla and Combination only (the CI smoke test; the CPU-mode headline comparison)
  baselines XL PE Table 1: relative PE (Shaw: relative only, k = 16), DiSAN-style directional heads, Combination,
            Combination + relative PE
  relative-pe  vanilla, relative PE, Combination + relative PE (the same runs as in baselines: the short version)
  xl-forms  XL order in relative and rotary form: relative PE (k = 16) and RoPE alone (no sinusoid), XL-relative and
            XL-RoPE (tau heads of layer 1, and of every layer), each against its non-XL counterpart; each XL model
            decoded again with the pair's standalone reorderer's positions (`+reorderer`: no training, same weights)
  table4    XL PE Table 4: encoder-free (encoder_layers=0) without PE, + absolute PE, + relative PE, + InXL
  pos       vanilla, Combination, Combination + source POS tags, mvPE+POS, mvPE alone and the same BART body with the
            plain sinusoid, trained like the others (same steps; tags from the offline taggers: nltk-en for English,
            jieba-zh for Chinese; tagged rows are left out where the source has none)
  table1    every row of one pair's table (issue 15): baselines + InXL, HeadXL, Combination with the standalone
            reorderer, the pos group's rows, DPE (lambda 0.5) and 2PT; runs shared by name with the other groups
  reorderer vanilla, Combination (built-in predictor), Combination with the pair's standalone reorderer (xlpe-reorder's
            model, trained once per pair): the oracle-vs-predicted BLEU gap of issue 17
  finetune  issue 57's study: a stock OPUS-MT-style Marian (MarianTokenizer, <pad> last) pretrained on the pair's
            WMT news (one year held out), then fine-tuned on the in-domain corpus for the same steps as it is
            (ft-vanilla, the baseline) and upgraded (XL PE strategies and forms, relative PE, DPE, RoPE cold and
            warm-started); every model decoded in domain and on the held-out news (`@ood`); pairs de-en, zh-en
  init      vanilla, 8E, 10E, Combination again with embeddings N(0, d^-1/2) and every linear layer N(0, 0.02)
            (xlpe-train --init_std 0.02 --embedding_init_std d^-1/2), next to the default init (all d^-1/2)

Each language pair is prepared ONCE (xlpe.features.prepare.prepare_splits, cached under --work_dir) with one joint
tokenizer per language set; every run goes through `xlpe.training.run.main` (the `xlpe-train` API). Results are
appended to <work_dir>/results.jsonl as each run finishes; runs already there are skipped (resumable).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/: benchlib

from benchlib import reproduction  # noqa: E402,F401  (its constants: tests patch them here)
from benchlib.data import REPO  # noqa: E402
from benchlib.reproduction import (  # noqa: E402
    GROUPS,
    MODES,
    PAIRS,
    eflomal_reference_aer,
    execute,
    for_pair,
    group_runs,
    other_run_key,
    other_run_record,
    prepared_dir,
    read_results,
    resolved_fields,
    run_key,
)
from benchlib.reproduction_report import report  # noqa: E402

# ---------------------------------------------------------------------------------------------------------
# The driver: resumable JSON lines, a budget guard
# ---------------------------------------------------------------------------------------------------------


def reads_another_run(spec: dict) -> bool:
    """A reused result (`same_as`) or a new decoding of another run's saved model (kind "retest"): done after that
    run, in this process (a decoding is short; no worker waits on another's training)."""
    return bool(spec["same_as"]) or spec["kind"] == "retest"


def run_in_workers(args, planned: list, done: set, work: Path, deadline: float | None) -> list[str]:
    """Run the planned trainings (not reused results or re-decodings) `args.workers` at a time, each in its own
    single-threaded process (`--only KEY`, log in <work_dir>/logs/). Data are prepared here first, so the workers
    only read them; two seeds of the same run never overlap (they share text files and configs). Returns the keys
    not started because --max_minutes passed."""
    import subprocess

    todo = [item for item in planned if not reads_another_run(item[1]) and item[3] not in done]
    mode = MODES[args.mode]
    for pair, data in dict.fromkeys((spec["pair"], spec["data"]) for _, spec, _, _ in todo):
        prepared_dir(work, pair, data, mode)  # before any worker starts (a noisy set prepares its clean one)
    for _, spec, _, _ in todo:
        resolved_fields(work, spec, mode)  # a pair's standalone reorderer is trained once, before the workers
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
            start = next(
                (i for i, (_, spec, _, _) in enumerate(todo) if (spec["pair"], spec["name"]) not in busy), None
            )
            if start is None:
                break
            group, spec, seed, key = todo.pop(start)
            if deadline and time.time() > deadline:
                not_started.append(key)
                continue
            log = (work / "logs" / (key.replace("|", "_") + ".log")).open("w")
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--mode",
                args.mode,
                "--groups",
                group,
                "--seeds",
                str(seed),
                "--work_dir",
                str(work),
                "--only",
                key,
            ] + (["--pair", args.pair] if args.pair else [])
            print(f"[reproduce] worker starts {key}", flush=True)
            running[key] = (
                subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env),
                log,
                (spec["pair"], spec["name"]),
            )
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
            for spec in for_pair(group_runs(group, mode), args.pair, group):
                if args.runs and spec["name"].split("@")[0] not in args.runs:
                    continue
                key = run_key(args.mode, spec, seed)
                if key not in seen:
                    seen.add(key)
                    planned.append((group, spec, seed, key))
    planned.sort(key=lambda item: (args.seeds.index(item[2]), reads_another_run(item[1])))  # after their source
    if args.only:
        planned = [item for item in planned if item[3] == args.only]
        if not planned:
            raise SystemExit(
                f"--only {args.only!r} is not a run of --mode {args.mode} --groups {','.join(args.groups)} "
                f"--seeds {','.join(map(str, args.seeds))} (keys look like 'cpu|de-en|combination|1')"
            )
    skipped_for_time = []
    if args.workers > 1:
        skipped_for_time = run_in_workers(args, planned, done, work, deadline)
        planned = [item for item in planned if reads_another_run(item[1])]  # here, after the workers
    for group, spec, seed, key in planned:
        if key in done:
            print(f"[reproduce] skip (already in {results.name}): {key}")
            continue
        if deadline and time.time() > deadline and not spec["same_as"]:  # a reused result costs no time
            skipped_for_time.append(key)
            continue
        record = {
            "key": key,
            "group": group,
            "mode": args.mode,
            "seed": seed,
            **{k: spec[k] for k in ("name", "model_type", "pair", "data", "kind", "fields", "baseline")},
        }
        if spec["same_as"]:
            source = other_run_record(results, args.mode, spec, seed)
            if source is None:
                print(
                    f"[reproduce] not yet run: {key} reuses {spec['same_as']!r} of seed {seed}; "
                    "add its group (rerun to resume)"
                )
                continue
            record.update({k: v for k, v in source.items() if k not in record}, same_as=source["key"])
            print(f"[reproduce] {key}: the same model as {source['key']}, result reused", flush=True)
        else:
            if spec["kind"] == "retest":
                source = other_run_key(args.mode, spec, seed)
                if other_run_record(results, args.mode, spec, seed) is None:
                    print(
                        f"[reproduce] not yet run: {key} decodes the model of {source}; add its group (rerun to resume)"
                    )
                    continue
                record["model_of"] = source
            print(f"[reproduce] run {key}", flush=True)
            record.update(execute(spec, seed, mode, work), date=time.strftime("%Y-%m-%d"))
        with results.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        print(
            f"[reproduce] {key}: BLEU {record['bleu']:.2f} chrF {record['chrf']:.2f} ({record['seconds']} s)",
            flush=True,
        )
    if "alignment" in args.groups and not (work / "eflomal_aer.json").is_file():
        (work / "eflomal_aer.json").write_text(json.dumps(eflomal_reference_aer()))
    if skipped_for_time:
        print(f"[reproduce] --max_minutes {args.max_minutes} reached; not run (rerun to resume): {skipped_for_time}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=sorted(MODES), default="smoke")
    parser.add_argument("--groups", default="xl", help=f"comma-separated: {','.join(GROUPS)}")
    parser.add_argument("--seeds", default="1", help="comma-separated seeds, e.g. 1,2,3")
    parser.add_argument(
        "--pair", default=None, help=f"run the groups on this language pair instead of their own: {', '.join(PAIRS)}"
    )
    parser.add_argument("--work_dir", default="runs/reproduce")
    parser.add_argument("--max_minutes", type=float, default=None, help="start no new run after this many minutes")
    parser.add_argument("--workers", type=int, default=1, help="trainings at a time, one process and one thread each")
    parser.add_argument(
        "--only", default=None, help="run just this key, e.g. 'cpu|de-en|dpe-lambda0.5|2' (what a worker runs)"
    )
    parser.add_argument(
        "--runs",
        default=None,
        help="comma-separated run names: only these runs of the groups (and their '@' re-decodings, e.g. "
        "ft-vanilla keeps ft-vanilla@ood)",
    )
    parser.add_argument("--report", action="store_true", help="aggregate results.jsonl (after running, if --run too)")
    parser.add_argument("--run", action="store_true", help="with --report: run the groups first")
    parser.add_argument(
        "--benchmarks", default=None, help="write the tables into this page's ## Reproduction (docs/benchmarks/*.md)"
    )
    parser.add_argument("--section", default="Reproduction", help="with --benchmarks: the section (## title) to write")
    parser.add_argument(
        "--report_groups",
        default=None,
        help="with --report: tables of these groups only (comma-separated; "
        "default: every group with results), e.g. table1 for one table of a pair's rows",
    )
    parser.add_argument("--plot_dir", default=str(REPO / "bench"))
    parser.add_argument("--machine", default=None, help="machine description for the report")
    parser.add_argument("--command", default=None, help="the command to record in the report (default: this one)")
    args = parser.parse_args(argv)
    args.groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    for g in args.groups:
        try:  # unknown names, and a pair a group cannot take, fail before any work
            for_pair(group_runs(g, MODES[args.mode]), args.pair, g)
        except ValueError as error:
            raise SystemExit(f"reproduce.py: {error}") from None
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    args.runs = {name.strip() for name in args.runs.split(",") if name.strip()} if args.runs else None
    if args.runs:
        known = {spec["name"].split("@")[0] for g in args.groups for spec in group_runs(g, MODES[args.mode])}
        if args.runs - known:
            raise SystemExit(
                f"reproduce.py: --runs {sorted(args.runs - known)} not in --groups {','.join(args.groups)}"
            )
    if args.workers < 1:
        raise SystemExit(f"--workers must be at least 1, got {args.workers}")
    if not args.report or args.run:
        run_all(args)
    return report(args) if args.report else 0


if __name__ == "__main__":
    sys.exit(main())

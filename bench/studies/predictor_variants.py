"""Does a cheaper reorder predictor order as well? Retrain the built-in predictor of trained XL models with a config
variant and score its test-time positions: Kendall tau against the oracle, and BLEU with the translation model
decoding on them (issue 38: a predictor change needs predicted-position BLEU and tau before it becomes a default).

    python bench/studies/predictor_variants.py --work_dir runs/repro-xlforms --pair en-ja --run xl-rope-all --seeds
    1,2,3 \\
        --variant default: --variant nodropout:reorder_predictor_dropout=0.0 --predictor_seeds 1,2 --decode
    python bench/studies/predictor_variants.py --work_dir runs/repro-xlforms --report  # tables of every results line
    python bench/studies/predictor_variants.py --work_dir runs/repro-xlforms --report --reference "dropout 0"  # vs
    that one

Why retraining on the trained model measures the variant: with `reorder_predictor_detach_input=True` (the
default) the predictor reads detach(X + PE) and its loss reaches no other parameter, so what it learns depends on
the embeddings and the data alone. Here it learns on the trained model's (final) embeddings with the budget of the
reproduction mode (steps, batch, learning rate, warm-up, linear decay, gradient clipping at 1.0, as `xlpe-train`);
in joint training the embeddings move under it. The `default:` variant retrained the same way is the comparison;
the jointly trained predictor's tau is printed beside it as a check of the method.

`--work_dir` is a `bench/reproduce.py` work dir whose runs (`<pair>-<run>-seed<N>`) saved XL models; each line of
`<work_dir>/predictor_variants.jsonl` is one (pair, run, seed, predictor seed) with every variant's tau (token
level, movable tokens, mean over test sentences of 2+ of them) and, with `--decode`, BLEU of the test split decoded
as the run decoded it (`xlpe-train --do_predict`, predicted positions) and the hypotheses' file. The report pairs
each variant with the first one per (seed, predictor seed): tau and BLEU deltas and sacrebleu's paired bootstrap.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib import reproduction  # noqa: E402

from xlpe.training.model_setup import parse_config_overrides  # noqa: E402

PREDICTOR_FIELDS = (  # what a variant may change: the predictor's own constructor arguments
    "reorder_predictor_dropout",
    "reorder_predictor_hidden_size",
    "reorder_predictor_layers",
    "reorder_predictor_heads",
    "reorder_predictor_ffn_size",
)


def parse_variant(text: str, extra: tuple[str, ...] = ()) -> tuple[str, dict]:
    """NAME:FIELD=VALUE[,FIELD=VALUE...] over PREDICTOR_FIELDS (and `extra` keys a caller handles itself); NAME: alone
    is the run's own predictor config."""
    name, sep, fields = text.partition(":")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--variant: expected NAME:FIELD=VALUE,... or NAME:, got {text!r}")
    overrides = parse_config_overrides(fields) if fields else {}
    unknown = sorted(set(overrides) - set(PREDICTOR_FIELDS) - set(extra))
    if unknown:
        allowed = ", ".join((*PREDICTOR_FIELDS, *extra))
        raise argparse.ArgumentTypeError(f"--variant {name}: only {allowed} apply, got {unknown}")
    return name, overrides


def fail(message: str) -> None:
    """A user error: one line on stderr, exit status 2."""
    print(f"predictor_variants: {message}", file=sys.stderr)
    raise SystemExit(2)


def recorded_variants(results: Path) -> dict:
    """(pair, run, seed, predictor seed, mode) -> {variant name: result} over every line of the results file."""
    recorded = {}
    if results.is_file():
        for text in results.read_text(encoding="utf-8").splitlines():
            if text:
                line = json.loads(text)
                key = (line["pair"], line["run"], line["seed"], line["predictor_seed"], line["mode"])
                recorded.setdefault(key, {}).update(line["variants"])
    return recorded


# ---------------------------------------------------------------------------------------------------------
# Data, training and scoring
# ---------------------------------------------------------------------------------------------------------


def padded_batches(split, size: int, rng: random.Random | None):
    """(input_ids, attention_mask, reorder_positions) batches, right-padded; shuffled when `rng` is given."""
    order = list(range(len(split)))
    if rng is not None:
        rng.shuffle(order)
    for start in range(0, len(order), size):
        rows = split[order[start : start + size]]
        if rng is not None and len(rows["input_ids"]) < size:
            return  # the Trainer drops nothing, but a last short batch would weigh its few rows more: skipped
        width = max(len(ids) for ids in rows["input_ids"])
        yield tuple(
            torch.tensor([row + [0] * (width - len(row)) for row in rows[column]])
            for column in ("input_ids", "attention_mask", "reorder_positions")
        )


@torch.no_grad()
def predictor_input(encoder, input_ids: torch.Tensor) -> torch.Tensor:
    """detach(X + PE): what the encoder feeds its predictor (modeling_xlpe.XLPEMarianEncoder.forward)."""
    if encoder.source_tags is not None:
        raise ValueError("models with source POS tags are not supported here (their predictor reads the tags too)")
    embeds = encoder.embed_tokens(input_ids) * encoder.embed_scale
    positions = encoder.embed_positions if encoder.predictor_positions is None else encoder.predictor_positions
    return embeds + positions(embeds.shape[:-1])


def train_predictor(model, overrides: dict, mode: dict, train_split, seed: int):
    """A fresh predictor of the variant's config, trained on the model's frozen predictor input."""
    from xlpe.models.reorder_predictor import ReorderPredictor, reorder_loss

    config = model.config
    if "reorder_predictor_hidden_size" in overrides and "reorder_predictor_ffn_size" not in overrides:
        width = overrides["reorder_predictor_hidden_size"]  # FFN 4 x the variant's width, as a new config's default
        overrides = {**overrides, "reorder_predictor_ffn_size": 4 * width}
    for field, value in overrides.items():
        setattr(config, field, value)
    encoder = model.get_encoder()
    torch.manual_seed(seed)
    predictor = ReorderPredictor.from_config(config)
    optimizer = torch.optim.AdamW(predictor.parameters(), lr=mode["lr"], weight_decay=0.0)
    steps, warmup = mode["steps"], mode["warmup"]
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: s / warmup if s < warmup else max(0.0, (steps - s) / (steps - warmup))
    )
    rng, step = random.Random(seed), 0
    predictor.train()
    while step < steps:
        for input_ids, attention_mask, oracle in padded_batches(train_split, mode["batch"], rng):
            mask = attention_mask.bool()
            scores = predictor(predictor_input(encoder, input_ids), mask)
            loss = reorder_loss(scores, oracle, encoder.movable_tokens(input_ids, mask), config.reorder_loss)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(predictor.parameters(), 1.0)
            optimizer.step(), schedule.step(), optimizer.zero_grad(set_to_none=True)
            step += 1
            if step == steps:
                break
    encoder.reorder_predictor = predictor.eval()
    return model


def kendall_tau_rows(predicted: torch.Tensor, oracle: torch.Tensor, movable: torch.Tensor) -> list[float]:
    """Kendall tau of the predicted against the oracle order over each row's movable tokens (rows with 2+)."""
    pair = movable[:, :, None] & movable[:, None, :]
    agree = torch.sign(predicted[:, :, None] - predicted[:, None, :]) * torch.sign(
        oracle[:, :, None] - oracle[:, None, :]
    )
    count = movable.sum(dim=1)
    tau = (agree * pair).sum(dim=(1, 2)) / (count * (count - 1)).clamp(min=1)
    return tau[count >= 2].tolist()


@torch.no_grad()
def tau_on_test_split(model, test_split) -> float:
    encoder = model.get_encoder().eval()
    taus = []
    for input_ids, attention_mask, oracle in padded_batches(test_split, 100, None):
        predicted = encoder(input_ids=input_ids, attention_mask=attention_mask).reorder_positions
        taus += kendall_tau_rows(predicted, oracle, encoder.movable_tokens(input_ids, attention_mask.bool()))
    return statistics.mean(taus)


def decode_bleu(model, source_run: Path, work: Path, pair: str, name: str, seed: int, mode: dict) -> dict:
    """Save the model beside the runs (`name`: its run dir's name, the variant's with anything but letters, digits and
    ._+- made a dash), decode the test split as the run was decoded, score it."""
    from xlpe.evaluation import corpus_bleu_chrf

    spec = {"pair": pair, "name": name, "model_type": "xlpe"}
    out = reproduction.run_dir(work, spec, seed)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for path in source_run.iterdir():  # the tokenizer, and the Hub code files the run saved
        if path.name.startswith(("tokenizer", "special_tokens")) or path.suffix == ".py":
            shutil.copy(path, out / path.name)
    hypotheses = reproduction.decode_test_split(work, spec, seed, mode, out / "decode", {})
    (out / "hypotheses.txt").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    _, references, _ = reproduction.test_split_texts(work, spec, mode)
    scores = corpus_bleu_chrf(hypotheses, references, target_language=pair.split("-")[1])
    return {
        "bleu": scores["bleu"]["score"],
        "bleu_signature": scores["bleu"]["signature"],
        "hypotheses": str(out / "hypotheses.txt"),
    }


def run(args) -> None:
    import datasets
    from transformers import AutoModelForSeq2SeqLM

    if not (args.work_dir / "mode.txt").is_file():
        fail(f"{args.work_dir} is not a bench/reproduce.py work dir (no mode.txt)")
    mode_name = (args.work_dir / "mode.txt").read_text().strip()
    mode = reproduction.MODES[mode_name]
    splits = datasets.load_from_disk(str(reproduction.prepared_dir(args.work_dir, args.pair, "clean", mode)))
    results = args.work_dir / "predictor_variants.jsonl"
    recorded = recorded_variants(results)
    for seed in args.seeds:
        source = args.work_dir / "runs" / f"{args.pair}-{args.run}-seed{seed}"
        if not (source / "config.json").is_file():
            fail(f"{source} holds no saved model (run {args.run!r} of seed {seed} first)")
        trained = AutoModelForSeq2SeqLM.from_pretrained(str(source))
        joint_tau = tau_on_test_split(trained, splits["test"])
        for predictor_seed in args.predictor_seeds:
            key = (args.pair, args.run, seed, predictor_seed, mode_name)
            line = dict(zip(("pair", "run", "seed", "predictor_seed", "mode"), key), joint_tau=joint_tau, variants={})
            for name, overrides in args.variant:
                before = recorded.get(key, {}).get(name)
                if before is not None and before["overrides"] != overrides:  # a name means one config per run
                    fail(f"variant {name!r} is recorded for {key} with {before['overrides']}, not {overrides}")
                if before is not None and ("bleu" in before or not args.decode):
                    print(f"{args.pair} seed {seed} predictor seed {predictor_seed} {name}: skip (already recorded)")
                    continue
                started = time.time()
                model = train_predictor(
                    copy.deepcopy(trained), overrides, mode, splits["train"], 1000 * seed + predictor_seed
                )
                result = {"overrides": overrides, "tau": tau_on_test_split(model, splits["test"])}
                if args.decode:
                    result |= decode_bleu(
                        model,
                        source,
                        args.work_dir,
                        args.pair,
                        f"{args.run}-predictor-{re.sub(r'[^A-Za-z0-9._+-]+', '-', name)}-p{predictor_seed}",
                        seed,
                        mode,
                    )
                result["seconds"] = round(time.time() - started, 1)
                line["variants"][name] = result
                print(f"{args.pair} seed {seed} predictor seed {predictor_seed} {name}: {result}", flush=True)
            if not line["variants"]:
                continue
            with results.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(line) + "\n")


# ---------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------


def mean_sd(values: list[float], digits: int) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.{digits}f} ± {sd:.{digits}f}"


def report(work: Path, reference: str | None = None) -> str:
    """Markdown table of every results line: each variant against `reference` (default: the first variant seen per
    pair and run) on the (seed, predictor seed) rows that ran both."""
    from xlpe.evaluation import paired_significance

    results = work / "predictor_variants.jsonl"
    if not results.is_file():
        fail(f"{results} does not exist: run some variants first")
    lines = [  # one row per (pair, run, seed, predictor seed): the variants of every line that ran it
        dict(zip(("pair", "run", "seed", "predictor_seed", "mode"), key), variants=variants)
        for key, variants in recorded_variants(results).items()
    ]
    mode = reproduction.MODES[(work / "mode.txt").read_text().strip()]
    versus = "first" if reference is None else reference
    out = [
        f"| pair (run) | variant | runs: tau / BLEU | tau | BLEU | Δtau vs {versus} | "
        f"ΔBLEU vs {versus}, per run (bootstrap p) | BLEU significant |",
        "|---|---|---:|---|---|---|---|---|",
    ]
    for pair, run_name in sorted({(line["pair"], line["run"]) for line in lines}):
        rows = sorted(
            (line for line in lines if (line["pair"], line["run"]) == (pair, run_name)),
            key=lambda line: (line["seed"], line["predictor_seed"]),
        )
        names = list(dict.fromkeys(name for row in rows for name in row["variants"]))  # first seen first
        if reference is not None:
            if reference not in names:
                continue  # this pair and run never ran the reference variant
            names = [reference] + [name for name in names if name != reference]
        _, references, _ = reproduction.test_split_texts(work, {"pair": pair}, mode)
        read = lambda path: Path(path).read_text(encoding="utf-8").splitlines()  # noqa: E731
        for name in names:
            have = [row for row in rows if name in row["variants"] and names[0] in row["variants"]]
            taus = [row["variants"][name]["tau"] for row in have]
            dtau = [row["variants"][name]["tau"] - row["variants"][names[0]]["tau"] for row in have]
            bleus = [row["variants"][name]["bleu"] for row in have if "bleu" in row["variants"][name]]
            per_run, significant = [], 0
            for row in have if name != names[0] else []:
                this, first = row["variants"][name], row["variants"][names[0]]
                if "hypotheses" in this and "hypotheses" in first:
                    sig = paired_significance(
                        read(this["hypotheses"]),
                        read(first["hypotheses"]),
                        references,
                        target_language=pair.split("-")[1],
                    )["metrics"]["BLEU"]
                    per_run.append(f"{sig['delta']:+.2f} ({sig['p_value']:.3f})")
                    significant += sig["p_value"] < 0.05
            out.append(
                f"| {pair} ({run_name}) | {name} | {len(have)} / {len(bleus)} | {mean_sd(taus, 4)} | "
                f"{mean_sd(bleus, 2) if bleus else '—'} | {mean_sd(dtau, 4) if name != names[0] else '—'} | "
                f"{', '.join(per_run) or '—'} | {f'{significant}/{len(per_run)}' if per_run else '—'} |"
            )
    return "\n".join(out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work_dir", type=Path, required=True, help="a bench/reproduce.py work dir with XL runs")
    parser.add_argument("--pair", help="language pair of the runs, e.g. en-ja")
    parser.add_argument("--run", default="xl-rope-all", help="run name whose saved models are retrained")
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3])
    parser.add_argument("--predictor_seeds", type=lambda s: [int(x) for x in s.split(",")], default=[1])
    parser.add_argument(
        "--variant",
        type=parse_variant,
        action="append",
        default=[],
        help="NAME:FIELD=VALUE,... (repeatable; the first is the comparison, e.g. default:)",
    )
    parser.add_argument("--decode", action="store_true", help="also decode the test split (BLEU)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--report", action="store_true", help="print the tables of predictor_variants.jsonl")
    parser.add_argument("--reference", help="with --report: the variant the others are compared with (default: first)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.report:
        print(report(args.work_dir, args.reference))
        return
    if not args.pair or not args.variant:
        parser.error("--pair and at least one --variant are needed (or --report)")
    run(args)


if __name__ == "__main__":
    main()

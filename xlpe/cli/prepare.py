"""`xlpe-prepare`: parallel text + a tokenizer -> prepared features on disk (`save_to_disk`) and a report
(`xlpe.features.prepare` does the work). Bad input exits with status 2 and the reason."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from ..features.alignment import SYMMETRIZATIONS
from ..features.prepare import FEATURES, prepare_dataset, prepare_hf_dataset


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="xlpe-prepare", description=__doc__.split("\n\n")[0])
    src = p.add_argument_group("input (either --source/--target files or --dataset)")
    src.add_argument("--source", help="source-side text file, one sentence per line (.gz ok)")
    src.add_argument("--target", help="target-side text file, parallel to --source")
    src.add_argument("--alignments", help="Pharaoh i-j alignment file parallel to --source (default: run eflomal)")
    src.add_argument("--dataset", help="Hub dataset id or local datasets directory")
    src.add_argument("--dataset-config", help="dataset configuration name (e.g. de-en)")
    src.add_argument("--splits", nargs="+", help="splits to prepare (default: all)")
    src.add_argument("--source-lang", help="source language key in the dataset (e.g. en)")
    src.add_argument("--target-lang", help="target language key in the dataset (e.g. de)")
    src.add_argument("--source-column"), src.add_argument("--target-column")
    p.add_argument("--tokenizer", required=True, help="tokenizer directory or Hub id (AutoTokenizer)")
    p.add_argument("--output", required=True, help="directory for save_to_disk and report.json")
    p.add_argument("--features", nargs="+", choices=FEATURES, help="default: positions + tags of given taggers")
    p.add_argument("--symmetrization", default="grow-diag-final-and", choices=SYMMETRIZATIONS)
    p.add_argument("--eflomal-options", type=json.loads, default=None, metavar="JSON",
                   help='eflomal.Aligner arguments, e.g. \'{"n_samplers": 1}\'')  # fmt: skip
    p.add_argument("--alignment-runs", type=int, default=1, metavar="K",
                   help="eflomal runs per direction, links kept by a strict majority (stabler oracle, K x time)")
    p.add_argument("--unaligned", default="right", choices=("right", "left"), help="BTG oracle attachment")
    p.add_argument("--dpe-unaligned", default="drop", choices=("drop", "keep"), help="DPE unaligned tokens")
    p.add_argument("--source-tagger", help="nltk-en | jieba-zh | spacy:<model>")
    p.add_argument("--target-tagger", help="nltk-en | jieba-zh | spacy:<model>")
    p.add_argument("--nltk-data", help="extra nltk_data directory (offline NLTK tagger)")
    p.add_argument("--max-length", type=int, default=256, help="max tokens per side incl. </s> (default 256)")
    p.add_argument("--num-proc", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--cache-dir", help="reuse identical earlier runs from here")
    p.add_argument("--noise-ratio", type=float, default=0.0, help="XL PE Sec. 4.5 noise attack ratio")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep-text", nargs="?", const="all", default="eval", choices=("all", "eval", "none"),
                   help="splits that keep text, line number and alignment columns: eval (default: every split but "
                        "train, what scoring needs), all (also --keep-text alone) or none")  # fmt: skip
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `xlpe-prepare`: prepare, `save_to_disk(--output)`, write `--output/report.json` (one report
    for --source/--target, {split: report} for --dataset). Bad input exits with status 2 and the reason."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    options = dict(features=args.features, symmetrization=args.symmetrization, eflomal_options=args.eflomal_options, alignment_runs=args.alignment_runs,
                   unaligned=args.unaligned, dpe_unaligned=args.dpe_unaligned, source_tagger=args.source_tagger,
                   target_tagger=args.target_tagger, nltk_data=args.nltk_data, max_length=args.max_length,
                   num_proc=args.num_proc, batch_size=args.batch_size, cache_dir=args.cache_dir,
                   noise_ratio=args.noise_ratio, seed=args.seed, keep_text=args.keep_text)  # fmt: skip
    if bool(args.dataset) == bool(args.source or args.target):
        parser.error("give either --source and --target, or --dataset")
    if args.dataset and not (args.source_lang and args.target_lang):
        parser.error("--dataset needs --source-lang and --target-lang")
    if not args.dataset and not (args.source and args.target):
        parser.error("--source and --target go together")
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        if args.dataset:
            data, report = prepare_hf_dataset(
                args.dataset, tokenizer, source_lang=args.source_lang, target_lang=args.target_lang,
                splits=args.splits, config_name=args.dataset_config, source_column=args.source_column,
                target_column=args.target_column, **options)  # fmt: skip
        else:
            data, report = prepare_dataset(args.source, args.target, tokenizer, alignments=args.alignments, **options)
    except (ValueError, LookupError, ImportError) as error:
        parser.exit(2, f"xlpe-prepare: error: {error}\n")
    output = Path(args.output)
    data.save_to_disk(str(output))
    (output / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False))
    for name, split_report in (report.items() if args.dataset else [("", report)]):
        print(f"xlpe-prepare: {name or 'pairs'}: kept {split_report['pairs_kept']} of {split_report['pairs_read']}, "
              f"skipped {split_report['pairs_skipped']}", file=sys.stderr)  # fmt: skip
    print(f"xlpe-prepare: wrote {output} and {output / 'report.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

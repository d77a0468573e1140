"""Which code the speed rows in docs/benchmarks were measured on: a guard that fails when a hot-path file changed
and the speed rows were not re-run (issue 38: "a change to a forward or training path re-runs the speed rows it
touches").

`bench/hot_paths.json` records a digest of the model files every `bench/speed.py` row runs (the families'
forward and generation paths and the blocks they share), the date and the command of the last speed run, and why
it was recorded. The digest is of the code, not the text: each file's AST with docstrings removed (comments are
not in the AST), so editing prose changes nothing, and any change to what runs does.

    python bench/hot_paths.py --check                       # exit 1 (one line) when the code changed since
    python bench/hot_paths.py --record --measured 2026-11-26 --command "python bench/speed.py ..." \\
        --reason "speed rows re-run after ..."               # after re-running the rows it touches

`tests/test_hot_paths.py` runs the check in CI. A change that provably leaves the measured paths as they were (a
rename, a moved helper) may be recorded without a re-run: the reason says so, and the reviewer reads it.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "bench" / "hot_paths.json"
HOT_PATHS = (  # what bench/speed.py's train-step and generation rows execute of this package
    "xlpe/models/modeling_xlpe.py",
    "xlpe/models/modeling_dpe.py",
    "xlpe/models/modeling_mvpe_pos.py",
    "xlpe/models/seq2seq_scaffold.py",
    "xlpe/models/position_attention.py",
    "xlpe/models/position_modules.py",
    "xlpe/models/xl_position_forms.py",
    "xlpe/models/reorder_predictor.py",
    "xlpe/models/extra_inputs.py",
    "xlpe/models/source_tags.py",
    "xlpe/models/sinusoid.py",
    "xlpe/models/transformers_compat.py",
)


def code_dump(source: str) -> str:
    """The module's AST without docstrings (module, class and function), as text: what runs, not how it reads."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(tree, include_attributes=False)


def hot_path_digest(root: Path = ROOT, paths=HOT_PATHS) -> str:
    """SHA-256 over (path, code_dump) of every hot-path file, in order (canonical JSON: unambiguous)."""
    entries = [[path, code_dump((root / path).read_text(encoding="utf-8"))] for path in paths]
    return hashlib.sha256(json.dumps(entries, ensure_ascii=False, separators=(",", ":")).encode("utf-8")).hexdigest()


def check(record_path: Path = RECORD, root: Path = ROOT) -> str | None:
    """None when the recorded digest is the code's; else the one-line reason to re-run the speed rows."""
    record = json.loads(record_path.read_text(encoding="utf-8"))
    if record.get("files") != list(HOT_PATHS):
        return (
            f"{record_path.name}: it lists other hot-path files than bench/hot_paths.py: re-run the speed rows "
            "and record again (python bench/hot_paths.py --record ...)"
        )
    if record.get("digest") != hot_path_digest(root):
        return (
            f"the forward/generation code of the speed rows changed since they were measured "
            f"({record.get('measured')}: {record.get('command')}): re-run the rows it touches (bench/speed.py), "
            "update docs/benchmarks/results/speed.json (python bench/render_tables.py), then python "
            "bench/hot_paths.py --record --measured DATE --command CMD --reason WHY"
        )
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", action="store_true", help="exit 1 when the hot-path code changed since the record")
    action.add_argument("--record", action="store_true", help="record the current code (after re-running the rows)")
    parser.add_argument("--measured", help="with --record: the date of the speed run")
    parser.add_argument("--command", help="with --record: the speed run's command")
    parser.add_argument("--reason", help="with --record: what was re-run, or why no re-run was needed")
    args = parser.parse_args(argv)
    if args.check:
        problem = check()
        if problem:
            print(f"hot_paths: {problem}", file=sys.stderr)
            return 1
        print("hot_paths: the speed rows were measured on this code")
        return 0
    missing = [
        flag
        for flag, value in (("--measured", args.measured), ("--command", args.command), ("--reason", args.reason))
        if not value
    ]
    if missing:
        parser.error(f"--record needs {', '.join(missing)}")
    record = {
        "files": list(HOT_PATHS),
        "digest": hot_path_digest(),
        "measured": args.measured,
        "command": args.command,
        "reason": args.reason,
    }
    RECORD.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"hot_paths: recorded {record['digest'][:12]} in {RECORD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

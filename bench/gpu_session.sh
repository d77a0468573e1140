#!/usr/bin/env bash
# shellcheck disable=SC2317  # the stage functions are called by name (stage_$stage)
# One script for a GPU session (issues 21, 38): the CUDA tests, the speed bench at Transformer-base (eager and
# compiled, stock rows beside every family), and `xlpe-train`'s CUDA-default throughput run. Every stage runs under
# a hard limit that leaves room in a 10-minute device call (XLPE_STAGE_LIMIT, 420 s) and gives each of its runs a
# share of what is left; every finished run or bench row is appended as one JSON line to $OUT/<stage>.jsonl (the
# folder the device tool brings back), so a stage cut short keeps what it finished. bench/README.md, "GPU
# session", gives the three device-tool calls of a first run and their carry lists.
#
#   bash bench/gpu_session.sh prepare              # HERE (network): wheels -> .whl/ and .whl-arrow/, data -> .gpu_data/
#   bash bench/gpu_session.sh setup tests          # on the GPU machine: stages in the order given
#   bash bench/gpu_session.sh --dry-run all        # the SAME command lines, executed on the CPU at tiny sizes
#   bash bench/gpu_session.sh --print all          # print the GPU command lines, run nothing
#
# Stages: prepare (here) | setup | tests | bench | bench-compiled | bench-compiled-others | train | quality | news
# (the README walk-through's recipe on 12,000 news pairs: does it translate, and with how many passes?); `all` = setup
# tests bench bench-compiled bench-compiled-others train. Outputs under $OUT (default: a temporary folder):
# session.log (all console output), env.txt, setup.jsonl, tests.jsonl, bench.jsonl, bench-compiled.jsonl,
# bench-compiled-others.jsonl, train.jsonl (a device call brings back at most 8 files).
# Exit status: 0, or 1 when a stage failed (setup: a wheel not installed, or not the intended transformers).
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
REPO=$(pwd)
MODE=gpu  # gpu | dry (the same commands on the CPU at tiny sizes) | print (print them, run nothing)
STAGES=()
SESSION=0  # 1: `session`, the whole GPU session in ONE device call (the stages' limits below, not STAGE_LIMIT)
for arg in "$@"; do
  case "$arg" in
    --dry-run|--cpu) MODE=dry ;;
    --print) MODE=print ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    all) STAGES+=(setup tests bench bench-compiled bench-compiled-others train) ;;
    session) SESSION=1; STAGES+=(setup tests bench train quality) ;;
    prepare|setup|tests|bench|bench-compiled|bench-compiled-others|train|quality|news) STAGES+=("$arg") ;;
    *) echo "gpu_session.sh: unknown stage '$arg' (prepare, setup, tests, bench, bench-compiled, bench-compiled-others, train, quality, news, all, session)" >&2; exit 2 ;;
  esac
done
if [ ${#STAGES[@]} -eq 0 ]; then echo "gpu_session.sh: name at least one stage (--help)" >&2; exit 2; fi
MODE_SIZES=$MODE; if [ "$MODE" = print ]; then MODE_SIZES=${PRINT_AS:-gpu}; fi  # PRINT_AS=dry: the dry run's lines

OUT=${OUT:-$(mktemp -d /tmp/gpu_session.XXXXXX)}
mkdir -p "$OUT"
LOG="$OUT/session.log"
PY=${PYTHON:-python3}
# wheels for the GPU image (python 3.12, torch 2.11, transformers 5.17, tokenizers 0.23, huggingface_hub 1.33, an
# older pyarrow; no langcodes): transformers 5.23 (the package needs >=5.23,<=5.24), `datasets` 4.8 (pyarrow >= 21;
# 5.x wants pyarrow >= 24 and its 49 MB wheel would pass the 64 MiB carry limit beside the data) with its dill and
# multiprocess, `langcodes` (xlpe-train checks language codes with it), `parameterized` (the model tests)
WHEEL_SPECS=${XLPE_WHEELS:-"transformers==5.23.0 datasets==4.8.5 dill==0.4.1 multiprocess==0.70.19 parameterized==0.9.0 langcodes==3.5.1"}
ARROW_SPECS=${XLPE_ARROW_WHEELS:-""}  # e.g. "pyarrow==24.0.0" into .whl-arrow/ (a call of its own: bench/README.md)
TRANSFORMERS_WANTED=${XLPE_TRANSFORMERS:-5.23.0}  # what `import transformers` must give after setup ("" = any)
WHEEL_DIRS=${XLPE_WHEEL_DIRS:-".whl .whl-arrow"}
WHEEL_PY=${XLPE_WHEEL_PYTHON:-3.12}  # the GPU image's python (KINDS.md: 3.12.3)
DATA=".gpu_data"
STAGE_LIMIT=${XLPE_STAGE_LIMIT:-420}  # per stage: + setup (< 60 s) + machine start fits a 10-minute call
# `session`: ONE call of at most SESSION_TOTAL seconds (a 15-minute device budget: ~1.5 min start, this, the transfers,
# no second try); each stage its own limit, `quality` whatever the others left
SESSION_TOTAL=${XLPE_SESSION_TOTAL:-510}
declare -A SESSION_LIMITS=([setup]=45 [tests]=70 [bench]=100 [train]=70)
SESSION_ROWS="XL PE in;XL PE head;XL PE combination;XL PE combination, external positions (no predictor);DPE;mvPE+POS"
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
if [ "$MODE_SIZES" = gpu ]; then
  DEVICE=cuda; SIZE=base; BACKEND=inductor; SITE=${XLPE_SITE:-/tmp/site}
  TEST_ENV=(); SPEED_TINY=(); TRAIN_DATA=(--prepared_dataset "$DATA/enja"); TRAIN_SIZE=(--recipe base); TRAIN_STEPS=300; LOG_STEPS=25
  QUALITY_MODE=base; QUALITY_WORK="$DATA/repro"  # prepared HERE by `prepare` (Multi30k de-en, BPE 8k), carried
  NEWS_DATA=(--prepared_dataset "$DATA/news"); NEWS_SIZE=()  # the walk-through's own preparation and recipe
else  # the dry run: the same commands, tiny, on the CPU; installs into a scratch folder, never /tmp/site
  DEVICE=cpu; SIZE=tiny; BACKEND=aot_eager; SITE=${XLPE_SITE:-$OUT/dry_site}
  TEST_ENV=(XLPE_TEST_DEVICE=cpu XLPE_TEST_COMPILE_BACKEND=aot_eager)
  SPEED_TINY=(--repeats 2 --warmup 1 --warmup-max-cycles 2 --stable-window 1 --gen-batches 1 --no-memory)
  TRAIN_DATA=(--max_train_samples 256)
  TRAIN_SIZE=(--d_model 32 --ffn_dim 64 --attention_heads 2 --encoder_layers 1 --decoder_layers 1 --tokenizer_vocab_size 300)
  TRAIN_STEPS=6; LOG_STEPS=2
  QUALITY_MODE=smoke; QUALITY_WORK=${XLPE_QUALITY_WORK:-"$OUT/repro"}  # a rehearsal without eflomal: one prepared beforehand
  NEWS_DATA=(--prepared_dataset "$DATA/news" --max_train_samples 256 --max_eval_samples 20 --max_predict_samples 20)
  NEWS_SIZE=(--d_model 32 --ffn_dim 64 --attention_heads 2 --encoder_layers 1 --decoder_layers 1 --max_steps 4)
fi
# the news stage's runs, NAME=FLAGS;...: the recipe as a user gets it, then more passes, then more regularisation
NEWS_RUNS=${XLPE_NEWS_RUNS:-"recipe=;epochs60=--num_train_epochs 60;epochs60-dropout0.3=--num_train_epochs 60 --dropout 0.3"}
QUALITY_SEEDS=${XLPE_QUALITY_SEEDS:-1}
TRAIN_RUNS=${XLPE_TRAIN_RUNS:-"vanilla xlpe"}
if [ "$SESSION" = 1 ]; then TRAIN_RUNS=${XLPE_TRAIN_RUNS:-xlpe}; fi  # stock Marian's tokens/s: the bench stage's rows
FAILED=0

say() { echo "$*" | tee -a "$LOG"; }

run() {  # run (or print) one command under a hard limit; its output appended to session.log; returns its status
  local limit=$1; shift
  say "\$ timeout $limit $*"
  if [ "$MODE" = print ]; then return 0; fi
  timeout --signal=INT --kill-after=15 "$limit" "$@" 2>&1 | tee -a "$LOG"
  local status=${PIPESTATUS[0]}
  say "# exit status $status$([ "$status" = 124 ] && echo ' (time limit)')"
  return "$status"
}

jsonl() {  # jsonl FILE KEY=VALUE... [--json-file PATH]: append one JSON line (values as text; a file's JSON embedded)
  [ "$MODE" = print ] && return 0
  "$PY" - "$@" <<'EOF'
import json, sys, time
from pathlib import Path
target, record, args = Path(sys.argv[1]), {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, sys.argv[2:]
while args:
    item = args.pop(0)
    if item == "--json-file":
        path = Path(args.pop(0))
        try:
            record["result"] = json.loads(path.read_text()) if path.is_file() else None
        except ValueError as error:  # cut off while writing
            record["result"] = f"unreadable: {error}"
    else:
        key, _, value = item.partition("=")
        record[key] = value
with target.open("a") as handle:
    handle.write(json.dumps(record) + "\n")
EOF
}

left() { echo $((STAGE_LIMIT - (SECONDS - STAGE_START))); }  # seconds this stage has left (STAGE_LIMIT: per stage)

stage_prepare() {  # HERE, with network: what the bare GPU machine needs and cannot fetch
  for folder in .whl .whl-arrow "$DATA"; do
    mkdir -p .git/info; grep -qxF "/$folder/" .git/info/exclude 2>/dev/null || echo "/$folder/" >> .git/info/exclude
  done
  local spec folder bad=0
  for spec in $WHEEL_SPECS $ARROW_SPECS; do  # one by one: each failure named
    folder=.whl; case " $ARROW_SPECS " in *" $spec "*) folder=.whl-arrow ;; esac
    if ! run 300 "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$WHEEL_PY" --implementation cp \
        "${PLATFORMS[@]}" -d "$folder" "$spec"; then say "# FAILED: pip download $spec"; bad=1; fi
  done
  local shared=${XLPE_SHARED_DIR:-$REPO/../shared}/data/small_parallel_enja
  if [ -d "$DATA/enja" ]; then
    say "# $DATA/enja exists (delete it to prepare again)"
  elif [ ! -d "$shared" ]; then
    say "# FAILED: $shared not found (XLPE_SHARED_DIR): no throughput corpus"; bad=1
  else
    # the throughput corpus: 20k en->ja pairs (Tanaka; ~7 MB prepared, so it travels beside pyarrow), BPE 16k as
    # `--recipe base`, XL PE and DPE features
    local slice; slice=$(mktemp -d)
    gzip -dc "$shared/train.en.gz" | head -n 20000 > "$slice/train.en"
    gzip -dc "$shared/train.ja.gz" | head -n 20000 > "$slice/train.ja"
    run 1200 "$PY" -m xlpe.cli.prepare --source "$slice/train.en" --target "$slice/train.ja" \
      --validation_source "$shared/dev.en" --validation_target "$shared/dev.ja" --test_source "$shared/test.en" \
      --test_target "$shared/test.ja" --source_lang en --target_lang ja --tokenizer_vocab_size 16000 \
      --tokenizer_model bpe --features reorder_positions target_positions --output "$DATA/enja" || bad=1
    rm -rf "$slice"
  fi
  # the quality stage's data: Multi30k de-en as `bench/reproduce.py --mode base` prepares it (tokenizer, XL PE
  # oracle positions), in the work folder the stage runs in; mode.txt claims the folder for that mode
  if [ -f "$DATA/repro/data/de-en/clean/dataset_dict.json" ]; then
    say "# $DATA/repro exists (delete it to prepare again)"
  else
    mkdir -p "$DATA/repro"; [ "$MODE" = print ] || printf base > "$DATA/repro/mode.txt"
    run 1800 "$PY" -c "import sys; sys.path.insert(0, 'bench'); from pathlib import Path; from benchlib.reproduction \
import MODES, prepared_dir; print(prepared_dir(Path('$DATA/repro'), 'de-en', 'clean', MODES['base']))" || bad=1
    rm -rf "$DATA/repro/cache"  # eflomal's cache: not needed there, and it counts against the carry limit
  fi
  # the news stage's data: the README walk-through on real news text (bench/benchlib/data.py: 12,000 WMT news de-en
  # pairs of 2008-2012, 500 lines of newstest2013, 1,000 of newstest2014), prepared by xlpe-prepare's defaults
  if [ -f "$DATA/news/report.json" ]; then
    say "# $DATA/news exists (delete it to prepare again)"
  else
    local raw; raw=$(mktemp -d)
    run 120 "$PY" -c "import sys; sys.path.insert(0, 'bench'); from benchlib.data import write_news_walkthrough; \
print(write_news_walkthrough('$raw'))" || bad=1
    run 1200 "$PY" -m xlpe.cli.prepare --source "$raw/train.de" --target "$raw/train.en" --validation_source "$raw/dev.de" \
      --validation_target "$raw/dev.en" --test_source "$raw/test.de" --test_target "$raw/test.en" --source_lang de \
      --target_lang en --output "$DATA/news" || bad=1
    rm -rf "$raw"
  fi
  [ "$MODE" = print ] || du -sh .whl .whl-arrow "$DATA" 2>/dev/null | tee -a "$LOG"
  say "# carry: tests and bench calls [\".whl\"]; the train call [\".whl-arrow\", \"$DATA\"] (bench/README.md)"
  return "$bad"
}

stage_setup() {  # the carried wheels into $SITE one by one; the transformers imported checked; env.txt
  local folder wheel bad=0 found=0
  for folder in $WHEEL_DIRS; do
    for wheel in "$folder"/*.whl; do
      [ -e "$wheel" ] || continue
      found=1
      if run 180 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
          --only-binary=:all: --python-version "$WHEEL_PY" --implementation cp "${PLATFORMS[@]}" "$wheel"; then
        jsonl "$OUT/setup.jsonl" wheel="$(basename "$wheel")" status=installed
      else
        say "# FAILED: $wheel did not install (built for another Python or platform than $WHEEL_PY?)"
        jsonl "$OUT/setup.jsonl" wheel="$(basename "$wheel")" status=failed
        bad=1
      fi
    done
  done
  [ "$found" = 1 ] || say "# no wheels in $WHEEL_DIRS: the image's packages (and what $SITE already holds)"
  [ "$MODE" = print ] && return 0
  # the transformers that imports (from $SITE, first on PYTHONPATH) must be the intended one, else every number
  # below would silently be the image's 5.17
  local report
  report=$("$PY" - "$TRANSFORMERS_WANTED" <<'EOF' 2>&1
import importlib, platform, sys
import torch
wanted = sys.argv[1]
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda,
      "| device", torch.cuda.get_device_name() if torch.cuda.is_available() else "none")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"SMs {p.multi_processor_count} | memory {p.total_memory / 2**30:.1f} GiB | capability {p.major}.{p.minor}")
for name in ("transformers", "datasets", "pyarrow", "accelerate", "tokenizers", "huggingface_hub", "sacrebleu",
             "triton", "pytest", "parameterized", "hypothesis", "xdist", "xlpe"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"), getattr(module, "__file__", ""))
    except Exception as error:
        print(name, "NOT IMPORTABLE:", type(error).__name__, error)
import transformers
if wanted and transformers.__version__ != wanted:
    print(f"FAILED: transformers {transformers.__version__} imported from {transformers.__file__}, not {wanted}: "
          "its wheel did not install (see above) or this call carried none and the machine was not warm")
    sys.exit(1)
EOF
  )
  local status=$?
  { date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1; echo "$report"; } > "$OUT/env.txt"
  say "$report"
  jsonl "$OUT/setup.jsonl" check=transformers wanted="$TRANSFORMERS_WANTED" status="$([ "$status" = 0 ] && echo ok || echo failed)"
  [ "$status" = 0 ] || bad=1
  return "$bad"
}

stage_tests() {  # the `gpu` tests: CPU ≡ CUDA, bf16, eager ≡ sdpa, cache, save/load, compiled train and decode steps
  local parallel=()
  if [ "$MODE" = print ] || "$PY" -c "import xdist" 2>/dev/null; then parallel=(-n 6); fi  # compilation is CPU-bound
  # one JSON line per finished test (bench/benchlib/pytest_jsonl.py); the limit leaves 20 s to write the summary
  run "$(($(left) - 20))" env "${TEST_ENV[@]}" XLPE_JSONL="$OUT/tests.jsonl" PYTHONPATH="$REPO/bench:$PYTHONPATH" \
    "$PY" -m pytest tests/gpu -m gpu -q -p no:cacheprovider -p benchlib.pytest_jsonl -rfEs "${parallel[@]}"
}

speed_rows() {  # speed_rows STAGE SWITCHES... -- INVOCATION...: one bench/speed.py per invocation, the time left shared
  local stage=$1; shift
  local switches=() rows=() status=0
  while [ "$1" != -- ]; do switches+=("$1"); shift; done; shift
  rows=("$@")
  local i budget limit name
  for i in "${!rows[@]}"; do
    limit=$(( ($(left) - 10) / (${#rows[@]} - i) ))  # this invocation's share of what is left
    if [ "$limit" -lt 60 ]; then say "# skipped ${rows[$i]}: $limit s left for it"; jsonl "$OUT/$stage.jsonl" rows="${rows[$i]}" status=skipped; continue; fi
    budget=$((limit * 3 / 4))  # speed.py's own plan (warm-up cap, repeats) keeps inside 3/4 of the hard limit
    name="$OUT/${stage}_$i.json"
    IFS='|' read -r -a picked <<< "${rows[$i]}"
    run "$limit" env PYTHONUNBUFFERED=1 "$PY" bench/speed.py --device "$DEVICE" --dtype bfloat16 --size "$SIZE" \
      --optimizer fused --time-budget "$budget" --warmup-max-s $((budget / 4)) --json "$name" --no-plot \
      "${SPEED_TINY[@]}" "${switches[@]}" "${picked[@]}" || status=1
    jsonl "$OUT/$stage.jsonl" rows="${rows[$i]}" status="$([ "$status" = 0 ] && echo ok || echo failed)" --json-file "$name"
    [ "$MODE" = print ] || rm -f "$name"  # its content is in the JSON line (a call brings back at most 8 files)
  done
  return "$status"
}

stage_bench() {  # every family and its stock baseline, eager (the `xlpe-train --torch_compile False` setting)
  if [ "$SESSION" = 1 ]; then  # one invocation (one start-up, one warm GPU): each family's headline rows
    speed_rows bench -- "--families|xlpe,dpe,mvpe_pos|--rows|$SESSION_ROWS"
  else
    speed_rows bench -- "--families|xlpe" "--families|dpe" "--families|mvpe_pos"
  fi
}

stage_bench_compiled() {  # XL PE with the fast switches: compiled train step beside compiled stock Marian
  speed_rows bench-compiled --compile --compile-backend "$BACKEND" --skip-generation -- \
    "--families|xlpe|--rows|XL PE combination" "--families|xlpe|--rows|XL PE combination, external positions (no predictor)"
}

stage_bench_compiled_others() {  # DPE (vs Marian 8E) and mvPE+POS (vs BART), compiled
  speed_rows bench-compiled-others --compile --compile-backend "$BACKEND" --skip-generation -- \
    "--families|dpe|--rows|DPE" "--families|mvpe_pos|--rows|mvPE+POS"
}

stage_train() {  # `xlpe-train` with its CUDA defaults: stock Marian, then XL PE Combination; tokens/s and MFU
  local model_type limit status=0 runs i
  read -r -a runs <<< "$TRAIN_RUNS"
  for i in "${!runs[@]}"; do
    model_type=${runs[$i]}
    limit=$(( ($(left) - 10) / (${#runs[@]} - i) ))
    rm -rf "/tmp/throughput_$model_type"
    # 16k-token batches; no evaluation or checkpoints: a throughput run; each log line printed (disable_tqdm)
    run "$limit" env PYTHONUNBUFFERED=1 "$PY" -m xlpe.cli.train "${TRAIN_DATA[@]}" "${TRAIN_SIZE[@]}" --model_type "$model_type" \
      --max_tokens 16384 --max_steps "$TRAIN_STEPS" --logging_steps "$LOG_STEPS" --do_train --eval_strategy no --save_strategy no \
      --report_to none --disable_tqdm True --output_dir "/tmp/throughput_$model_type" | tee "$OUT/.train_$model_type.log" || status=1
    [ "$MODE" = print ] && continue
    "$PY" - "$OUT/.train_$model_type.log" "$OUT/train.jsonl" "$model_type" "/tmp/throughput_$model_type" <<'EOF' | tee -a "$LOG"
import ast, json, sys
from pathlib import Path
log, target, model_type, folder = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
lines = []  # the Trainer prints each log dict when tqdm is off; a run cut by its limit keeps the lines it printed
for line in log.read_text(errors="replace").splitlines():
    line = line.strip()
    if line.startswith("{") and line.endswith("}"):
        try:
            lines.append(ast.literal_eval(line))
        except (ValueError, SyntaxError):
            pass
record = {"run": model_type, "log": [entry for entry in lines if "loss" in entry]}
for name in ("train_results.json", "cuda_defaults.json"):
    if (folder / name).is_file():
        record[name.removesuffix(".json")] = json.loads((folder / name).read_text())
steady = sorted(e["target_tokens_per_second"] for e in record["log"][1:] if "target_tokens_per_second" in e)
mfu = sorted(e["mfu"] for e in record["log"][1:] if "mfu" in e)
# the first interval holds the compilation: the steady rate is the median of the later ones
record["steady_target_tokens_per_second"] = steady[len(steady) // 2] if steady else None
record["steady_mfu"] = mfu[len(mfu) // 2] if mfu else None
with target.open("a") as handle:
    handle.write(json.dumps(record) + "\n")
print(f"{model_type}: steady target tokens/s {record['steady_target_tokens_per_second']}, steady MFU {record['steady_mfu']}, "
      f"{len(record['log'])} log lines, finished: {'train_results' in record}")
EOF
    rm -f "$OUT/.train_$model_type.log"
  done
  return "$status"
}

stage_news() {  # the README walk-through's `xlpe-train` on 12,000 news pairs (issue 55): the recipe as a user gets
  # it, then more passes, then more regularisation; each run's validation curve and test scores as one JSON line
  local runs entry name flags limit status=0 i
  IFS=';' read -r -a runs <<< "$NEWS_RUNS"
  for i in "${!runs[@]}"; do
    entry=${runs[$i]}; name=${entry%%=*}; flags=${entry#*=}
    limit=$(( ($(left) - 10) / (${#runs[@]} - i) ))
    rm -rf "/tmp/news_$name"
    # shellcheck disable=SC2086  # the run's flags are words
    run "$limit" env PYTHONUNBUFFERED=1 "$PY" -m xlpe.cli.train "${NEWS_DATA[@]}" "${NEWS_SIZE[@]}" --model_type xlpe $flags \
      --report_to none --disable_tqdm True --output_dir "/tmp/news_$name" || status=1
    [ "$MODE" = print ] && continue
    "$PY" - "/tmp/news_$name" "$OUT/news.jsonl" "$name" "$flags" <<'EOF' | tee -a "$LOG"
import json, sys
from pathlib import Path
folder, target, name, flags = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
record = {"run": name, "flags": flags}
state = folder / "trainer_state.json"
if not state.is_file():  # a run cut by its limit: the last checkpoint's state
    states = sorted(folder.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    state = states[-1] if states else state
if state.is_file():
    history = json.loads(state.read_text())["log_history"]
    keys = ("epoch", "step", "eval_loss", "eval_bleu", "eval_chrf", "eval_repetition", "eval_outputs_at_limit")
    record["validation"] = [{k: e[k] for k in keys if k in e} for e in history if "eval_bleu" in e]
for file_name in ("all_results.json", "test_scores.json", "learning_check.json", "recipe.json"):
    if (folder / file_name).is_file():
        record[file_name.removesuffix(".json")] = json.loads((folder / file_name).read_text())
translations = folder / "test_translations.txt"
if translations.is_file():
    record["test_examples"] = translations.read_text(encoding="utf-8").splitlines()[:5]
with target.open("a") as handle:
    handle.write(json.dumps(record) + "\n")
last = (record.get("validation") or [{}])[-1]
print(f"{name}: last validation BLEU {last.get('eval_bleu')}, chrF {last.get('eval_chrf')}, finished: {'all_results' in record}")
EOF
  done
  return "$status"
}

stage_quality() {  # base-size de->en on Multi30k (bench/reproduce.py --mode base --groups base-gpu): vanilla,
  # Combination (predicted and oracle positions), XL-RoPE in every layer, RoPE; one JSON line per finished run
  local limit=$(($(left) - 15)) status=0
  # start no run that cannot finish: a base run takes about a minute (train, then beam-5 test decoding)
  local minutes; minutes=$(awk -v s="$limit" 'BEGIN { m = (s - 60) / 60; printf "%.2f", (m < 0.1 ? 0.1 : m) }')
  run "$limit" env PYTHONUNBUFFERED=1 "$PY" bench/reproduce.py --mode "$QUALITY_MODE" --groups base-gpu \
    --seeds "$QUALITY_SEEDS" --work_dir "$QUALITY_WORK" --max_minutes "$minutes" || status=1
  [ "$MODE" = print ] && return 0
  if [ -f "$QUALITY_WORK/results.jsonl" ]; then cp "$QUALITY_WORK/results.jsonl" "$OUT/quality.jsonl"; fi
  # a run's own log (the last lines of each) says why a run failed or what its training loss did
  tail -n 15 "$QUALITY_WORK"/logs/*.log 2>/dev/null >> "$LOG"
  return "$status"
}

export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}"
if [ "$MODE" = dry ] && [ "$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != "$WHEEL_PY" ]; then
  export PYTHONPATH="$REPO${PYTHONPATH#"$SITE:$REPO"}"  # the dry site holds $WHEEL_PY wheels: not for this Python
fi  # (a rehearsal with PYTHON= a $WHEEL_PY venv of the image's packages imports the carried wheels as the GPU will)
say "# gpu_session.sh ${STAGES[*]} (mode $MODE: device $DEVICE, size $SIZE, stage limit $STAGE_LIMIT s) -> $OUT"
for stage in "${STAGES[@]}"; do
  say "== $stage"
  STAGE_START=$SECONDS
  if [ "$SESSION" = 1 ]; then  # this stage's own limit; the last one (quality) what is left of SESSION_TOTAL
    STAGE_LIMIT=${SESSION_LIMITS[$stage]:-$((SESSION_TOTAL - SECONDS))}
    if [ "$STAGE_LIMIT" -gt $((SESSION_TOTAL - SECONDS)) ]; then STAGE_LIMIT=$((SESSION_TOTAL - SECONDS)); fi
  fi
  if ! "stage_${stage//-/_}"; then FAILED=1; say "# FAILED: stage $stage"; fi
  say "== $stage done in $((SECONDS - STAGE_START)) s"
done
echo "# outputs in $OUT: $(cd "$OUT" && echo *)"
exit $FAILED

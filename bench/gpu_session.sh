#!/usr/bin/env bash
# One script for a GPU session (issue 21): the CUDA tests, the speed bench at Transformer-base (eager and with the
# fast switches, stock rows beside every family), and the fast `xlpe-train` throughput run, each stage under its own
# time limit, everything written under $OUT (files come back from the GPU machine from there). bench/README.md,
# "GPU session", gives the exact device-tool calls and the carry list.
#
#   bash bench/gpu_session.sh prepare                 # HERE (CPU machine, network): wheels -> .whl/, data -> .gpu_data/
#   bash bench/gpu_session.sh setup tests             # on the GPU machine: one or more stages, in the order given
#   bash bench/gpu_session.sh --dry-run all           # print what every stage would run, run nothing
#   bash bench/gpu_session.sh --cpu setup bench train # every stage at tiny sizes on the CPU (checks the plumbing)
#
# Stages: prepare (local) | setup | tests | bench | bench-compiled | bench-compiled-others | train; `all` = setup
# tests bench bench-compiled bench-compiled-others train (about 40 minutes: more than one 10-minute call, so a session
# runs them in the groups bench/README.md lists). Output under $OUT (default: a temporary folder): session.log
# (every stage's console output, appended), env.txt, speed_eager.json, speed_compiled.json,
# speed_compiled_others.json, train_throughput.json: at most 8 files, as the device tool returns.
# Per-stage limits (seconds): XLPE_LIMIT_TESTS (420), XLPE_LIMIT_BENCH (540), XLPE_LIMIT_TRAIN (540).
set -uo pipefail

cd "$(dirname "$0")/.."
REPO=$(pwd)
DRY=0
CPU=0
STAGES=()
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    --cpu) CPU=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    all) STAGES+=(setup tests bench bench-compiled bench-compiled-others train) ;;
    prepare|setup|tests|bench|bench-compiled|bench-compiled-others|train) STAGES+=("$arg") ;;
    *) echo "gpu_session.sh: unknown stage '$arg' (prepare, setup, tests, bench, bench-compiled, bench-compiled-others, train, all)" >&2; exit 2 ;;
  esac
done
if [ ${#STAGES[@]} -eq 0 ]; then echo "gpu_session.sh: name at least one stage (--help)" >&2; exit 2; fi

OUT=${OUT:-$(mktemp -d /tmp/gpu_session.XXXXXX)}
mkdir -p "$OUT"
LOG="$OUT/session.log"
PY=${PYTHON:-python3}
WHEELS=".whl"
DATA=".gpu_data"
# wheels for the GPU image (torch 2.11, transformers 5.17, accelerate, tokenizers 0.23, huggingface_hub 1.33, sentencepiece,
# sacrebleu, pyarrow, pandas, xxhash are there): transformers 5.23, the version this package is developed and tested
# on (5.17's Marian decoder branches on a tensor for LayerDrop in training: a graph break in every Marian-based model,
# stock or not; 5.23 needs huggingface_hub >= 1.31 and tokenizers 0.23, which the image has), and `datasets` (xlpe-train
# reads and caches features with it) with its own needs. XLPE_WHEELS="datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19"
# keeps the image's transformers.
WHEEL_SPECS=${XLPE_WHEELS:-"transformers==5.23.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19"}
LIMIT_TESTS=${XLPE_LIMIT_TESTS:-420}
LIMIT_BENCH=${XLPE_LIMIT_BENCH:-540}
LIMIT_TRAIN=${XLPE_LIMIT_TRAIN:-540}
if [ "$CPU" = 1 ]; then DEVICE=cpu; SIZE=tiny; else DEVICE=cuda; SIZE=base; fi

run() {  # run (or, with --dry-run, print) one command under a time limit, its output appended to session.log
  local limit=$1; shift
  echo "\$ timeout $limit $*" | tee -a "$LOG"
  if [ "$DRY" = 1 ]; then return 0; fi
  timeout --signal=INT --kill-after=20 "$limit" "$@" 2>&1 | tee -a "$LOG"
  local status=${PIPESTATUS[0]}
  echo "# exit status $status" | tee -a "$LOG"
  return 0  # a failed stage is reported, the next stage still runs
}

stage_prepare() {  # on the CPU machine, with network: what the bare GPU machine needs and cannot fetch
  grep -qxF "/$WHEELS/" .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo "/$WHEELS/" >> .git/info/exclude; }
  grep -qxF "/$DATA/" .git/info/exclude 2>/dev/null || echo "/$DATA/" >> .git/info/exclude
  # shellcheck disable=SC2086
  run 600 $PY -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d "$WHEELS" $WHEEL_SPECS
  local shared=${XLPE_SHARED_DIR:-$REPO/../shared}/data/small_parallel_enja
  if [ -d "$DATA/enja" ]; then
    echo "# $DATA/enja exists (delete it to prepare again)" | tee -a "$LOG"
  else
    # the issue's throughput corpus: 50k en->ja pairs (Tanaka), BPE 16k as `--recipe base`, XL PE and DPE features
    run 1200 $PY -m xlpe.cli.prepare --source "$shared/train.en.gz" --target "$shared/train.ja.gz" \
      --validation_source "$shared/dev.en" --validation_target "$shared/dev.ja" --test_source "$shared/test.en" \
      --test_target "$shared/test.ja" --source_lang en --target_lang ja --tokenizer_vocab_size 16000 \
      --tokenizer_model bpe --features reorder_positions target_positions --output "$DATA/enja"
  fi
  [ "$DRY" = 1 ] || du -sh "$WHEELS" "$DATA" | tee -a "$LOG"
  echo "# carry: [\"$WHEELS\", \"$DATA\"]" | tee -a "$LOG"
}

stage_setup() {  # on the GPU machine: the carried wheels into /tmp/site, versions and the device into env.txt
  if [ -d "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    run 180 $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl
  fi
  {
    date -u
    [ "$DRY" = 1 ] || nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
    [ "$DRY" = 1 ] || $PY - <<'EOF' 2>&1
import importlib, platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda,
      "| device", torch.cuda.get_device_name() if torch.cuda.is_available() else "none")
for name in ("transformers", "accelerate", "datasets", "tokenizers", "sacrebleu", "triton", "xdist", "xlpe"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"), getattr(module, "__file__", ""))
    except Exception as error:  # a missing package is reported, not fatal: only `train` needs datasets
        print(name, "NOT IMPORTABLE:", type(error).__name__, error)
EOF
  } | tee -a "$LOG" > "$OUT/env.txt"
}

stage_tests() {  # the `gpu` tests: CPU ≡ CUDA, bf16, eager ≡ sdpa, cache, save/load, compiled train and decode steps
  local parallel=()
  if [ "$DRY" = 1 ] || $PY -c "import xdist" 2>/dev/null; then parallel=(-n 6); fi  # compilation is CPU-bound
  local device=()
  if [ "$CPU" = 1 ]; then device=(env XLPE_TEST_DEVICE=cpu XLPE_TEST_COMPILE_BACKEND=aot_eager); fi
  run "$LIMIT_TESTS" "${device[@]}" $PY -m pytest tests/gpu -m gpu -q -p no:cacheprovider -rfEs "${parallel[@]}"
}

speed() {  # bench/speed.py at Transformer-base, bf16 autocast, fused AdamW, real-length token batches
  local name=$1; shift
  local tiny=()
  if [ "$CPU" = 1 ]; then tiny=(--repeats 2 --warmup 1 --warmup-max-cycles 2 --stable-window 1 --gen-batches 1 --no-memory); fi
  run "$LIMIT_BENCH" env PYTHONUNBUFFERED=1 $PY bench/speed.py --device "$DEVICE" --dtype bfloat16 --size "$SIZE" \
    --optimizer fused --time-budget $((LIMIT_BENCH - 120)) --json "$OUT/speed_$name.json" --no-plot "${tiny[@]}" "$@"
}

stage_bench() {  # every family and its stock baseline, eager (the `xlpe-train --torch_compile False` setting)
  speed eager
}

stage_bench_compiled() {  # XL PE with the fast switches: compiled train step; stock Marian's switch ladder beside it
  local backend=()
  if [ "$CPU" = 1 ]; then backend=(--compile-backend aot_eager); fi
  speed compiled --compile "${backend[@]}" --rows "XL PE combination;XL PE combination, external positions (no predictor)" \
    --stock-ladder --skip-generation
}

stage_bench_compiled_others() {  # DPE (vs Marian 8E) and mvPE+POS (vs BART), compiled
  local backend=()
  if [ "$CPU" = 1 ]; then backend=(--compile-backend aot_eager); fi
  speed compiled_others --compile "${backend[@]}" --families dpe,mvpe_pos --rows "DPE;mvPE+POS" --skip-generation
}

stage_train() {  # `xlpe-train` with its CUDA defaults: stock Marian, then XL PE Combination; tokens/s and MFU
  local data=(--prepared_dataset "$DATA/enja") size=(--recipe base) steps=400
  if [ "$CPU" = 1 ]; then
    data=(--max_train_samples 256) size=(--d_model 32 --ffn_dim 64 --attention_heads 2 --encoder_layers 1 --decoder_layers 1 --tokenizer_vocab_size 300) steps=6
  fi
  for model_type in vanilla xlpe; do
    rm -rf "/tmp/throughput_$model_type"
    # 16k-token batches (the recipe's 4096 leaves an 80 GB GPU idle); no evaluation or checkpoints: a throughput run
    run "$((LIMIT_TRAIN / 2))" env PYTHONUNBUFFERED=1 $PY -m xlpe.cli.train "${data[@]}" "${size[@]}" --model_type "$model_type" \
      --max_tokens 16384 --max_steps "$steps" --logging_steps 50 --do_train --eval_strategy no --save_strategy no \
      --report_to none --disable_tqdm True --output_dir "/tmp/throughput_$model_type"
  done
  [ "$DRY" = 1 ] && return 0
  $PY - "$OUT/train_throughput.json" <<'EOF' 2>&1 | tee -a "$LOG"
import json, sys
from pathlib import Path
runs = {}
for model_type in ("vanilla", "xlpe"):
    folder = Path(f"/tmp/throughput_{model_type}")
    run = {}
    for name in ("train_results.json", "cuda_defaults.json"):
        if (folder / name).is_file():
            run[name.removesuffix(".json")] = json.loads((folder / name).read_text())
    state = folder / "trainer_state.json"
    if state.is_file():
        run["log"] = [line for line in json.loads(state.read_text())["log_history"] if "loss" in line]
    runs[model_type] = run
Path(sys.argv[1]).write_text(json.dumps(runs, indent=1))
for model_type, run in runs.items():
    results, lines = run.get("train_results", {}), run.get("log", [])
    steady = sorted(line["target_tokens_per_second"] for line in lines[1:] if "target_tokens_per_second" in line)
    mfu = sorted(line["mfu"] for line in lines[1:] if "mfu" in line)
    # the first interval holds the compilation: the steady rate is the median of the later ones
    print(f"{model_type}: steady target tokens/s {steady[len(steady) // 2] if steady else None}, steady MFU "
          f"{mfu[len(mfu) // 2] if mfu else None}; whole run (compilation included) "
          f"{results.get('train_target_tokens_per_second')} tokens/s, MFU {results.get('train_mfu')}, padding "
          f"{results.get('train_padding_waste')}; per interval {[line.get('target_tokens_per_second') for line in lines]}")
EOF
}

export PYTHONPATH="/tmp/site:$REPO${PYTHONPATH:+:$PYTHONPATH}"
echo "# gpu_session.sh ${STAGES[*]} (device $DEVICE, size $SIZE$([ "$DRY" = 1 ] && echo ', dry run')) -> $OUT" | tee -a "$LOG"
for stage in "${STAGES[@]}"; do
  echo "== $stage" | tee -a "$LOG"
  started=$SECONDS
  "stage_${stage//-/_}"
  echo "== $stage done in $((SECONDS - started)) s" | tee -a "$LOG"
done
echo "# outputs in $OUT: $(ls "$OUT" | tr '\n' ' ')"

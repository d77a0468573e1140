#!/usr/bin/env bash
# lader_baseline.sh -- lader (Neubig et al. 2012, BTG preorderer) baseline for xlpe's oracle word order.
#
# Trains lader on source words + word alignments, reorders the test sources, and scores the predicted
# orders against xlpe's oracle order (argsort of xlpe.features.reordering.oracle_xl_positions) with
# xlpe's kendall_tau / fuzzy_reordering_score / exact match, next to the monotone order.
#
# Usage:   bench/lader_baseline.sh LADER_DIR [OUT_DIR]
#   (results in docs/benchmarks/reorderer.md, "The standalone reorderer"; score the order files next to xlpe's reorderer with
#   python bench/studies/reorderer.py ... --orders lader=OUT_DIR/enja_test_10k.order)
#   LADER_DIR  lader source tree after `autoreconf -i && ./configure && make` (uses src/bin/{train-lader,lader}
#              and script/contiguous-extract.pl). Build notes: needs boost (system, filesystem, thread, regex);
#              with g++ >= 11 src/lib/reorderer-runner.cc line 69 must read
#              `std::getline(sin ? static_cast<std::istream&>(sin) : std::cin, line)` (was `sin != NULL? ...`).
#   OUT_DIR    default runs/lader; work files go to $OUT_DIR/work
#
# Environment (defaults in brackets):
#   XLPE_ROOT   [this checkout]   repo root put on PYTHONPATH (xlpe metrics + oracle, eflomal alignment)
#   ENJA_DATA   [required for enja runs]  HF save_to_disk dir (xlpe-train --cache_dir output) with
#               train/test splits and source_text, target_text, word_alignment (Pharaoh, i = source) columns
#   M30K_TOK    [../shared/data/multi30k/tok]  Multi30k tokenised files (de source, en target;
#               train + test_2016_flickr, aligned together with xlpe's align_with_eflomal, grow-diag-final-and)
#   RUNS        ["enja:10000:20 enja:50000:5 deen:29000:5"]  pair:train_sentences:iterations
#   NICE        [15]
#
# Outputs ($OUT_DIR): enja_test_<N/1000>k.order, deen_test.order (lader predictions), enja_test.oracle.order,
#   deen_test.oracle.order (one line per test sentence: 0-based source word indices, k-th = word placed
#   k-th), scores.jsonl (one JSON line per run), work/<pair>/... (lader inputs, models, logs, wall times).
set -euo pipefail

LADER_DIR=$(cd "${1:?usage: bench/lader_baseline.sh LADER_DIR [OUT_DIR]}" && pwd)
XLPE_ROOT=${XLPE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
OUT_DIR=${2:-$XLPE_ROOT/runs/lader}
ENJA_DATA=${ENJA_DATA:-}
M30K_TOK=${M30K_TOK:-$XLPE_ROOT/../shared/data/multi30k/tok}
RUNS=${RUNS:-"enja:10000:20 enja:50000:5 deen:29000:5"}
NICE=${NICE:-15}
export OMP_NUM_THREADS=1 PYTHONPATH="$XLPE_ROOT${PYTHONPATH:+:$PYTHONPATH}"
WORK=$OUT_DIR/work
mkdir -p "$WORK"
RUN="nice -n $NICE"

# ---------------------------------------------------------------------------------------------------------
# 1. lader inputs per pair: {train,test}.{src,trg,align} (align = lader's "SRCLEN-TRGLEN ||| i-j ..." format)
#    and the xlpe oracle order of every test sentence.
# ---------------------------------------------------------------------------------------------------------
prepare() {  # prepare PAIR
  local pair=$1 dir=$WORK/$1
  [[ -s $dir/test.oracle.order ]] && return 0
  mkdir -p "$dir"
  $RUN python - "$pair" "$dir" "$ENJA_DATA" "$M30K_TOK" <<'EOF'
import gzip, sys
import numpy as np
from xlpe.features.reordering import oracle_xl_positions
pair, out, enja, m30k = sys.argv[1:5]

def write(name, srcs, trgs, links):
    with open(f"{out}/{name}.src", "w") as fs, open(f"{out}/{name}.trg", "w") as ft, \
         open(f"{out}/{name}.align", "w") as fa:
        for s, t, l in zip(srcs, trgs, links):
            fs.write(" ".join(s.split()) + "\n"); ft.write(" ".join(t.split()) + "\n")
            fa.write(f"{len(s.split())}-{len(t.split())} ||| " + " ".join(f"{i}-{j}" for i, j in l) + "\n")
    if name == "test":  # oracle order = argsort of the XL positions (lader's default: unaligned attach right)
        with open(f"{out}/test.oracle.order", "w") as fo:
            for s, l in zip(srcs, links):
                n = len(s.split())
                pos = oracle_xl_positions(l, n) if n else []
                fo.write(" ".join(map(str, np.argsort(pos, kind="stable").tolist())) + "\n")

if pair == "enja":
    from datasets import load_from_disk
    d = load_from_disk(enja)
    for split in ("train", "test"):
        ds = d[split]
        links = [[tuple(map(int, x.split("-"))) for x in a.split()] for a in ds["word_alignment"]]
        write(split, ds["source_text"], ds["target_text"], links)
elif pair == "deen":
    from xlpe.features.alignment import align_with_eflomal
    rd = lambda p: [l.rstrip("\n") for l in gzip.open(p, "rt", encoding="utf-8")]
    trs, trt = rd(f"{m30k}/train.lc.norm.tok.de.gz"), rd(f"{m30k}/train.lc.norm.tok.en.gz")
    tes, tet = rd(f"{m30k}/test_2016_flickr.lc.norm.tok.de.gz"), rd(f"{m30k}/test_2016_flickr.lc.norm.tok.en.gz")
    flat = align_with_eflomal(trs + tes, trt + tet)  # stochastic (eflomal cannot be seeded)
    links = [list(zip(f[0::2], f[1::2])) for f in flat]
    write("train", trs, trt, links[:len(trs)]); write("test", tes, tet, links[len(trs):])
else:
    sys.exit(f"unknown pair {pair}")
EOF
}

# ---------------------------------------------------------------------------------------------------------
# 2. train lader on the first N pairs: phrase-table dictionary (script/contiguous-extract.pl) + the lexical
#    feature set of lader's example/train-model.sh (words only: no classes/POS/parse annotations);
#    -attach_null right, -cost 1e-3, pegasos, loss chunk=1 (defaults), 1 thread, fixed number of epochs.
# 3. reorder the test sources (-out_format order, -beam 1, as in example/test-model.sh).
# 4. score against the oracle order.
# ---------------------------------------------------------------------------------------------------------
score() {  # score PRED ORACLE LABEL  -> one JSON line
  python - "$@" <<'EOF'
import json, sys
import numpy as np
from xlpe.features.reordering import fuzzy_reordering_score, kendall_tau
pred_path, oracle_path, label = sys.argv[1:4]
rd = lambda p: [[int(x) for x in l.split()] for l in open(p, encoding="utf-8")]
preds, oracles = rd(pred_path), rd(oracle_path)
assert len(preds) == len(oracles), (len(preds), len(oracles))
st = {k: [] for k in ("tau", "frs", "exact", "mono_tau", "mono_frs", "mono_exact")}
for p, o in zip(preds, oracles):
    n = len(o)
    assert sorted(p) == list(range(n)), (p, o)
    if n < 2:
        continue
    ref, pos, mono = np.argsort(o), np.argsort(p), np.arange(n)  # positions = inverse permutations
    for tag, x in (("", pos), ("mono_", mono)):
        st[tag + "tau"].append(kendall_tau(x, ref))
        st[tag + "frs"].append(fuzzy_reordering_score(x, ref))
        st[tag + "exact"].append(float(np.array_equal(x, ref)))
res = {"label": label, "n_scored": len(st["tau"]), "n_lines": len(oracles)}
res.update({k: round(float(np.mean(v)), 4) for k, v in st.items()})
print(json.dumps(res))
EOF
}

FEATS='LL%SL%ET,RR%SR%ET,LR%LR%ET,RL%RL%ET,O%SL%SR%ET,I%LR%RL%ET,Q%SQE0%ET,Q0%SQ#00%ET,Q1%SQ#01%ET,Q2%SQ#02%ET,CL%CL%ET,B%SB%ET,A%SA%ET,N%SN%ET,BIAS%ET'

for spec in $RUNS; do
  IFS=: read -r pair n iters <<<"$spec"
  prepare "$pair"
  dir=$WORK/$pair
  tag=$pair-${n}
  m=$dir/m$tag
  mkdir -p "$m"
  head -n "$n" "$dir/train.src" > "$m/train.src"
  head -n "$n" "$dir/train.trg" > "$m/train.trg"
  head -n "$n" "$dir/train.align" > "$m/train.align"
  $RUN perl "$LADER_DIR/script/contiguous-extract.pl" "$m/train.src" "$m/train.trg" "$m/train.align" \
    > "$m/train.pt" 2> /dev/null
  # save_features keeps generated features in RAM (~3 GB per 10k short en-ja sentences): only for small runs
  save=false; [[ $n -le 10000 ]] && save=true
  start=$(date +%s)
  $RUN "$LADER_DIR/src/bin/train-lader" -cost 1e-3 -attach_null right \
    -feature_profile "seq=dict=$m/train.pt,$FEATS" -iterations "$iters" -threads 1 -cube_growing false \
    -shuffle true -verbose 1 -write_every_iter true -save_features $save \
    -model_out "$m/train.mod" -source_in "$m/train.src" -align_in "$m/train.align" \
    > "$m/train.log" 2> "$m/train.err"
  echo "$tag iterations=$iters train_wall_s=$(( $(date +%s) - start ))" | tee "$m/wall_time.txt"
  $RUN "$LADER_DIR/src/bin/lader" -model "$m/train.mod" -out_format order -threads 1 -beam 1 \
    -cube_growing true -source_in "$dir/test.src" > "$m/test.order" 2> "$m/test.err"
  if [[ $pair == enja ]]; then size=$n; (( n % 1000 == 0 )) && size=$(( n / 1000 ))k; out=$OUT_DIR/enja_test_$size.order; else out=$OUT_DIR/${pair}_test.order; fi
  cp "$m/test.order" "$out"
  cp "$dir/test.oracle.order" "$OUT_DIR/${pair}_test.oracle.order"
  score "$out" "$dir/test.oracle.order" "$tag it=$iters" | tee -a "$OUT_DIR/scores.jsonl"
done

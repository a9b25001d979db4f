#!/bin/sh
# The reproductions of issue 6 on the embedded pair (shape, not absolute numbers: 4 prompts of 48 tokens
# on a 2-core machine; run one sweep at a time). Each command writes docs/results/<name>/report.md,
# summary.json and results.jsonl, and its plots under docs/img/<name>_*.png. Rerunning resumes from
# the cache folder (delete it to measure again). EXTRA is appended to every command (later flags
# win, e.g. EXTRA="--num-prompts 1 --max-new-tokens 8" for a smoke run); OUT and IMG move the outputs.
set -e
CACHE=${CACHE:-/tmp/draftverify-decode-cache}
DV=${DV:-draftverify}
OUT=${OUT:-docs/results}
IMG=${IMG:-docs/img}

# Seed 004, Tables 1 and 4: SD, SpecTr (kseq), BV, multidraft-bv; K = 3 for the multi-draft
# methods, L in {4, 8, 12, 16}, temperature 0.4. GBV and SpecTr-GBV need a draft whose law depends on
# the prefix alone and the default pair's feature draft is not one (the engine refuses them): add
# them with --tiny (docs/spectr-gbv.md has their exact numbers on known-law pairs).
seed004() {
$DV bench decode --prompts humaneval --num-prompts 4 --seeds 0 --max-new-tokens 48 \
  --methods ar sd kseq bv multidraft-bv --num-drafts 3 --draft-lengths 4 8 12 16 \
  --temperatures 0.4 --deviation-samples 128 --deviation-prompts 1 --threads 1 \
  --title "Seed 004 Tables 1 and 4 on the embedded pair" \
  --out "$OUT/decode_seed004" --plots-dir "$IMG" --prefix decode_seed004 --cache "$CACHE" $EXTRA
}

# Seed 001, Table 4: SpecTr with Global Resolution (ot, solver gr), top-k 100, K in {2, 3, 4},
# L = 8, temperature 1, with its fallback rate; kseq and sd beside it.
seed001() {
$DV bench decode --prompts humaneval --num-prompts 4 --seeds 0 --max-new-tokens 48 \
  --methods ar sd kseq 'ot(solver=gr)' --num-drafts 2 3 4 --draft-lengths 8 --temperatures 1 --top-k 100 \
  --deviation-samples 128 --deviation-prompts 1 --threads 1 \
  --title "Seed 001 Table 4 on the embedded pair" \
  --out "$OUT/decode_seed001" --plots-dir "$IMG" --prefix decode_seed001 --cache "$CACHE" $EXTRA
}

# Seed 002: expected tokens per step (1 - a^(L+1)) / (1 - a) against the measured block efficiency
# of sd, at its table's draft lengths, temperature 1.
seed002() {
$DV bench decode --prompts humaneval --num-prompts 4 --seeds 0 --max-new-tokens 48 \
  --methods ar sd --draft-lengths 1 3 5 7 10 --temperatures 1 --threads 1 \
  --title "Seed 002 tokens per step against measured block efficiency" \
  --out "$OUT/decode_seed002" --plots-dir "$IMG" --prefix decode_seed002 --cache "$CACHE" $EXTRA
}

# usage: sh docs/results/decode_reproduce.sh [004] [001] [002]   (default: all three)
for seed in ${*:-004 001 002}; do "seed$seed"; done

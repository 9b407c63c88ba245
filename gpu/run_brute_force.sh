#!/bin/bash
# On the GPU machine, from the repository root (.gpu carried): brute-force tuning spaces, every configuration of
# each measured by `kerntune tune --strategy exhaustive` (verified against the original, timed), for scoring
# search strategies on them afterwards (bench/strategy_scores.py; Willemsen et al.'s methodology needs complete
# spaces). Each kernel gets a store of its own under $OUT/brute_force (a run cut short is resumed from its store:
# carry it back as RESUME=DIR). A KERNEL written as rewrite:FILE:KERNEL is tuned on its semantic rewrite template
# (`kerntune templatize --rewrite`), FILE:KERNEL on its structural one.
#   usage: [RESUME=DIR] bash gpu/run_brute_force.sh SECONDS_PER_KERNEL [rewrite:]FILE:KERNEL ...
set -o pipefail
source .gpu/gpu-setup.sh /tmp/site >/dev/null || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1 KERNTUNE_CACHE=/tmp/ktcache COLUMNS=160
OUT=${OUT:-/tmp/out}; out="$OUT/brute_force"; mkdir -p "$out"
limit=$1; shift
for spec in "$@"; do
  rewrite=""; case "$spec" in rewrite:*) rewrite=--rewrite; spec=${spec#rewrite:};; esac
  file=${spec%%:*}; kernel=${spec##*:}
  store="$out/$kernel.sqlite"
  [ -n "$RESUME" ] && [ -f "$RESUME/$kernel.sqlite" ] && cp "$RESUME/$kernel.sqlite" "$store"
  export KERNTUNE_WORKDIR=/tmp/brute_force/$kernel  # the template files templatize writes, apart from the repository
  if [ -n "$rewrite" ]; then
    python3 -m agent_core.cli templatize "$file" -k "$kernel" --rewrite --force >/dev/null || exit 1
  fi
  echo "== $kernel ($file${rewrite:+, rewrite template})" | tee -a "$out/brute_force.log"
  timeout -s INT "$limit" python3 -m agent_core.cli tune "$file" -k "$kernel" --strategy exhaustive \
      --budget 100000 --early-stop 0 --backend gpu --store "$store" --json "$out/$kernel.json" 2>&1 \
      | grep -v "^\s*$" | tail -40 | tee -a "$out/brute_force.log"
done

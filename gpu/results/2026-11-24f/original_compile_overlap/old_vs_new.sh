#!/bin/bash
# kerntune tune, exhaustive, fresh store and compile cache each run: the code before (.gpu/old) and after the
# original's compile overlapping the worker's start, alternated, 3 runs each, on row_sum (30) and scale_rows (160).
source .gpu/gpu-setup.sh /tmp/site >/dev/null || exit 1
export PYTHONUNBUFFERED=1 COLUMNS=160
out=${OUT:-/tmp/out}/old_vs_new; mkdir -p $out
root=$PWD
nvidia-smi --query-gpu=compute_cap --format=csv,noheader
for k in examples/row_sum.cu:row_sum examples/scale_rows.cu:scale_rows; do
  f=${k%%:*}; n=${k##*:}
  for i in 1 2 3; do
    for v in old new; do
      if [ $v = old ]; then pp=$PWD/.gpu/old; else pp=$PWD; fi
      rm -rf /tmp/c /tmp/s.sqlite
      t0=$(date +%s.%N)
      (cd $pp && KERNTUNE_CACHE=/tmp/c PYTHONPATH=$pp:$PYTHONPATH python3 -m agent_core.cli tune $root/$f -k $n --strategy exhaustive --budget 1000 \
        --early-stop 0 --backend gpu --store /tmp/s.sqlite --json $out/${n}_${v}_$i.json > $out/${n}_${v}_$i.log 2>&1)
      t1=$(date +%s.%N)
      echo "$n $v $i process wall $(python3 -c "print(round($t1 - $t0, 2))") s; $(grep -E '^where the time went' $out/${n}_${v}_$i.log)"
      grep -E "GPU worker start|compile \(nvcc|overlapped" $out/${n}_${v}_$i.log | sed 's/^/    /'
    done
  done
done

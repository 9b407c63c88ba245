# Sourced by the gpu/run_*bench.sh scripts: kill_unit_worker LOG N BENCH_PID kills (SIGKILL) the Dask worker on
# which the N-th unit of a `kerntune bench --gpus` run (logging to LOG, process BENCH_PID) started, 5 s after it
# started; it waits up to 180 s for that unit and kills nothing when the run ends first.
kill_unit_worker() {
  local log=$1 n=$2 bench=$3 pid=""
  for _ in $(seq 1 1800); do
    pid=$(grep -oP "started on worker \S+ \(pid \K[0-9]+" "$log" | sed -n "${n}p")
    [ -n "$pid" ] && break
    kill -0 "$bench" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$pid" ]; then
    echo "no unit number $n started: nothing killed"
    return
  fi
  sleep 5
  echo "killing Dask worker pid $pid: $(grep -oP '^\S+(?=: started on worker \S+ \(pid '"$pid"',)' "$log" | tail -1) was running on it"
  kill -9 "$pid"
}

#!/bin/bash
# from the repository root on the GPU machine (wheels set up, PYTHONPATH=$PWD); results under $OUT
python3 gpu/experiments/masked_softmax_probe.py > $OUT/probe.json 2> $OUT/probe.err; cat $OUT/probe.json
M=sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__instruction_throughput.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum
for v in a b d; do timeout 120 ncu --metrics $M --csv -k regex:kt_softmax python3 gpu/experiments/masked_softmax_probe.py once $v > $OUT/ncu_$v.csv 2>&1; tail -12 $OUT/ncu_$v.csv | cut -d, -f12- ; done

#!/usr/bin/env bash
# Throughput of two builds at 100-byte rows, alternating A B A B (issue 38:
# variable-length rows against the last fixed-slot engine, 1803dd4).
# Usage: A=<binary> B=<binary> scripts/issue38-throughput.sh OUT_DIR [ROUNDS]
# Prints "round workload A|B txn/s" lines, also appended to OUT_DIR/runs.txt.
set -euo pipefail
out=${1:?usage: A=bin B=bin $0 OUT_DIR [ROUNDS]}
rounds=${2:-3}
: "${A:?A names the first binary}" "${B:?B names the second binary}"
mkdir -p "$out"
workloads=(
  "ycsb-a-log-free:ycsb --workload a --theta 0.9 --records 1000000 --threads 1 --duration 5 --design log-free"
  "ycsb-a-none:ycsb --workload a --theta 0.9 --records 1000000 --threads 1 --duration 5 --design none"
  "ycsb-c-log-free:ycsb --workload c --theta 0.9 --records 1000000 --threads 1 --duration 5 --design log-free"
  "tpcc-log-free:tpcc --warehouses 1 --threads 1 --duration 5 --design log-free"
  "tpcc-none:tpcc --warehouses 1 --threads 1 --duration 5 --design none"
)
for round in $(seq 1 "$rounds"); do
  for w in "${workloads[@]}"; do
    name=${w%%:*}
    read -r -a cmd <<<"${w#*:}"
    for which in A B; do
      bin=${!which}
      rate=$("$bin" "${cmd[@]}" --out "$out/json" 2>&1 | grep -E 'txn/s' | head -1 |
        sed -E 's/.*: ([0-9]+) txn\/s.*/\1/')
      echo "$round $name $which $rate" | tee -a "$out/runs.txt"
    done
  done
done

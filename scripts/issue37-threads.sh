#!/usr/bin/env bash
# YCSB-A (θ 0.9, 100 K rows) at 1, 2, 8 and 32 threads under MVTO and OCC,
# two builds alternating (issue 37: more threads than cores).
# Usage: A=<binary> B=<binary> scripts/issue37-threads.sh [ROUNDS]
# Prints "round design threads A|B txn/s abort%".
set -euo pipefail
rounds=${1:-3}
: "${A:?A names the first binary}" "${B:?B names the second binary}"
out=$(mktemp -d)
for round in $(seq 1 "$rounds"); do
  for design in log-free log-free-occ; do
    for threads in 1 2 8 32; do
      for which in A B; do
        bin=${!which}
        "$bin" ycsb --workload a --theta 0.9 --records 100000 --threads "$threads" \
          --duration 4 --design "$design" --out "$out" 2>&1 | grep 'txn/s' | head -1 |
          sed -E "s/.*: ([0-9]+) txn\/s.*abort rate ([0-9.]+) %.*/$round $design $threads $which \1 \2/"
      done
    done
  done
done
rm -rf "$out"

#!/usr/bin/env bash
# Throughput of two builds at 100-byte rows, alternating A B B A (issue 38:
# variable-length rows against the last fixed-slot engine, 1803dd4). The
# order flips every round, with a pause before each run: a run that
# follows another shares the machine with that process's teardown (its
# mappings and files going); flipping keeps either build from always
# taking that place.
# Usage: A=<binary> B=<binary> scripts/issue38-throughput.sh OUT_DIR [ROUNDS]
# A_ARGS / B_ARGS: options added to that build's runs (e.g. B_ARGS="--head-cache
# off" keeps the head cache, which the fixed-slot build lacks, out of a
# comparison of the row layouts). ONLY: the workloads to run, by name
# (default: all).
# Prints "round workload A|B txn/s" lines, also written to OUT_DIR/runs.txt,
# then each workload's medians and the median B/A ratio of its pairs.
set -euo pipefail
out=${1:?usage: A=bin B=bin $0 OUT_DIR [ROUNDS]}
rounds=${2:-3}
: "${A:?A names the first binary}" "${B:?B names the second binary}"
mkdir -p "$out"
: >"$out/runs.txt"
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
    if [[ -n "${ONLY:-}" && " $ONLY " != *" $name "* ]]; then continue; fi
    read -r -a cmd <<<"${w#*:}"
    order="A B"
    if ((round % 2 == 0)); then order="B A"; fi
    for which in $order; do
      sleep 1
      bin=${!which}
      extra=${which}_ARGS
      read -r -a extra <<<"${!extra:-}"
      rate=$("$bin" "${cmd[@]}" "${extra[@]}" --out "$out/json" 2>&1 | grep -E 'txn/s' | head -1 |
        sed -E 's/.*: ([0-9]+) txn\/s.*/\1/')
      echo "$round $name $which $rate" | tee -a "$out/runs.txt"
    done
  done
done
# Medians of each build and of the B/A ratios of the rounds' pairs.
python3 - "$out/runs.txt" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) == 4 and parts[3].isdigit():
        runs[parts[1]].setdefault(parts[2], {})[parts[0]] = int(parts[3])
for name, by in runs.items():
    a, b = by.get("A", {}), by.get("B", {})
    pairs = [b[r] / a[r] for r in a if r in b]
    if pairs:
        print(f"{name}: A {statistics.median(a.values()):.0f} B {statistics.median(b.values()):.0f} "
              f"B/A median {statistics.median(pairs):.3f} over {len(pairs)} pairs "
              f"({min(pairs):.2f}-{max(pairs):.2f})")
PY

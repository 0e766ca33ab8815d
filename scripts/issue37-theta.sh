#!/usr/bin/env bash
# OCC against MVTO on one build (issue 37): YCSB-A over 1,048,576 rows at
# θ 0, 0.6, 0.9 and 0.99, the two designs alternating (order flipped every
# round), with each run's abort rate and latency to the durable
# acknowledgement (`commit` returns once the commit is durable).
# Usage: BIN=<rebound binary> scripts/issue37-theta.sh OUT_DIR [ROUNDS]
# DESIGNS (default "log-free log-free-occ"), THREADS (default 1).
set -euo pipefail
out=${1:?usage: BIN=binary $0 OUT_DIR [ROUNDS]}
rounds=${2:-3}
: "${BIN:?BIN names the rebound binary}"
read -r -a designs <<<"${DESIGNS:-log-free log-free-occ}"
threads=${THREADS:-1}
mkdir -p "$out"
: >"$out/runs.txt"
for round in $(seq 1 "$rounds"); do
  for theta in 0 0.6 0.9 0.99; do
    order=("${designs[@]}")
    if ((round % 2 == 0)); then
      order=()
      for ((i = ${#designs[@]} - 1; i >= 0; i--)); do order+=("${designs[i]}"); done
    fi
    for design in "${order[@]}"; do
      sleep 1
      line=$("$BIN" ycsb --workload a --theta "$theta" --records 1048576 --threads "$threads" \
        --duration 5 --design "$design" --out "$out/json" 2>&1 | grep -E 'txn/s' | head -1)
      rate=$(sed -E 's/.*: ([0-9]+) txn\/s.*/\1/' <<<"$line")
      aborts=$(sed -E 's/.*abort rate ([0-9.]+) %.*/\1/' <<<"$line")
      p50=$(sed -E 's/.*p50 ([0-9]+) us.*/\1/' <<<"$line")
      p99=$(sed -E 's/.*p99 ([0-9]+) us.*/\1/' <<<"$line")
      echo "$round $theta $design $rate $aborts $p50 $p99" | tee -a "$out/runs.txt"
    done
  done
done
python3 - "$out/runs.txt" "${designs[0]}" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(lambda: collections.defaultdict(dict))
for line in open(sys.argv[1]):
    r, theta, design, rate, aborts, p50, p99 = line.split()
    runs[theta][design][r] = tuple(map(float, (rate, aborts, p50, p99)))
base = sys.argv[2]
print("theta | design | txn/s | ratio to " + base + " (pairs) | aborts % | p50 us | p99 us")
for theta, by in runs.items():
    for design, rs in by.items():
        med = [statistics.median(v[i] for v in rs.values()) for i in range(4)]
        pairs = [rs[r][0] / by[base][r][0] for r in rs if r in by[base]]
        print(f"{theta} | {design} | {med[0]:.0f} | {statistics.median(pairs):.2f} ("
              + " ".join(f"{p:.2f}" for p in pairs)
              + f") | {med[1]:.1f} | {med[2]:.0f} | {med[3]:.0f}")
PY

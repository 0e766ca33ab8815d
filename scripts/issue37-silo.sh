#!/usr/bin/env bash
# One core against DBx1000's Silo (issue 37), alternating in one run: per
# round and workload, Silo, then each Rebound design (order flipped every
# round). TPC-C New-Order + Payment runs twice on Rebound: as specified
# (12.5 rows entered per transaction) and `--without-inserts`, the work
# DBx1000's TPC-C does (its inserts are commented out).
# Needs DBx1000 built: ../shared/anchors/dbx1000/build.sh.
# Usage: BIN=<rebound binary> scripts/issue37-silo.sh OUT_DIR [ROUNDS]
# DESIGNS (default "log-free-occ log-free"), ANCHOR (the anchor's folder),
# THREADS (1 or 2: the anchor builds Silo for both; default 1).
set -euo pipefail
out=${1:?usage: BIN=binary $0 OUT_DIR [ROUNDS]}
rounds=${2:-3}
: "${BIN:?BIN names the rebound binary}"
anchor=${ANCHOR:-$(dirname "$0")/../../shared/anchors/dbx1000}
read -r -a designs <<<"${DESIGNS:-log-free-occ log-free}"
threads=${THREADS:-1}
mkdir -p "$out"
: >"$out/runs.txt"
ycsb="--theta 0.9 --records 1048576 --threads $threads --duration 5"
tpcc="tpcc --warehouses 1 --threads $threads --duration 5 --mix 50,50,0,0,0"
workloads=(
  "ycsb-a:ycsb-a-silo-t$threads:ycsb --workload a $ycsb"
  "ycsb-c:ycsb-c-silo-t$threads:ycsb --workload c $ycsb"
  "no+p:tpcc-silo-t$threads:$tpcc"
  "no+p-without-inserts:tpcc-silo-t$threads:$tpcc --without-inserts --no-check"
)
for round in $(seq 1 "$rounds"); do
  for w in "${workloads[@]}"; do
    IFS=: read -r name silo args <<<"$w"
    read -r -a cmd <<<"$args"
    order=("silo" "${designs[@]}")
    if ((round % 2 == 0)); then order=("${designs[@]}" "silo"); fi
    for who in "${order[@]}"; do
      sleep 1
      if [[ $who == silo ]]; then
        rate=$(DBX_MAX_TXN=300000 "$anchor/run.sh" "$silo" | awk '{print $2}')
      else
        rate=$("$BIN" "${cmd[@]}" --design "$who" --out "$out/json" 2>&1 | grep -E 'txn/s' |
          head -1 | sed -E 's/.*: ([0-9]+) txn\/s.*/\1/')
      fi
      echo "$round $name $who $rate" | tee -a "$out/runs.txt"
    done
  done
done
python3 - "$out/runs.txt" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(lambda: collections.defaultdict(dict))
for line in open(sys.argv[1]):
    r, w, who, v = line.split()
    runs[w][who][r] = float(v)
for w, by in runs.items():
    silo = by.pop("silo")
    text = f"{w}: silo {statistics.median(silo.values()):.0f}"
    for who, rates in by.items():
        pairs = [rates[r] / silo[r] for r in rates if r in silo]
        text += f" | {who} {statistics.median(rates.values()):.0f}, {statistics.median(pairs):.2f}x of silo ("
        text += " ".join(f"{p:.2f}" for p in pairs) + ")"
    print(text)
PY

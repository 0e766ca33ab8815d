#!/usr/bin/env bash
# Put and get MB/s of 1 KiB, 64 KiB and 16 MiB values (issue 38): Rebound
# (log-free), LMDB and RocksDB alternating, ROUNDS rounds (default 3).
# Usage: scripts/issue38-blob.sh OUT_DIR; REBOUND names the binary
# (default target/release/rebound, built with --features rocksdb).
set -euo pipefail
out=${1:?usage: $0 OUT_DIR}
bin=${REBOUND:-target/release/rebound}
rounds=${ROUNDS:-3}
mkdir -p "$out"
# size, values per run (about 300 MB at 1 KiB, 390 MB at 64 KiB, 400 MB
# at 16 MiB)
cases=("1k 300000" "64k 6000" "16m 24")
for round in $(seq 1 "$rounds"); do
  for case in "${cases[@]}"; do
    read -r size count <<<"$case"
    for engine in rebound lmdb rocksdb; do
      "$bin" blob --engine "$engine" --value-size "$size" --count "$count" \
        --out "$out" --name "$engine-$size-$round" | grep -v '^results'
    done
  done
done

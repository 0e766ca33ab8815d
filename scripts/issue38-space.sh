#!/usr/bin/env bash
# Space after loading ~100 MB of rows and after 60 s of updates, as a
# multiple of the live data, per engine and value-size distribution
# (issue 38). Usage: scripts/issue38-space.sh OUT_DIR [ENGINE...]
# ENGINE is log-free, wal, lmdb, rocksdb or fjall (default: all five).
# Needs a release build with `--features rocksdb` for rocksdb; REBOUND
# names the binary (default target/release/rebound). Data on /dev/shm.
set -euo pipefail
out=${1:?usage: $0 OUT_DIR [ENGINE...]}
shift
[ $# -gt 0 ] || set -- log-free wal lmdb rocksdb fjall
engines=("$@")
bin=${REBOUND:-target/release/rebound}
secs=${UPDATE_SECONDS:-60}
mkdir -p "$out"
# distribution name, --value-dist, rows for ~100 MB of keys and values
cases=(
  "fixed100 fixed:100 1000000"
  "uniform uniform:10:1000 200000"
  "lognormal255k lognormal:1k:1.7:255k 24000"
  "lognormal1m lognormal:1k:1.7:1m 23000"
)
for case in "${cases[@]}"; do
  read -r name dist rows <<<"$case"
  for engine in "${engines[@]}"; do
    case $engine in
      log-free | wal) args=(--engine rebound --design "$engine") ;;
      *) args=(--engine "$engine") ;;
    esac
    "$bin" load "${args[@]}" --records "$rows" --value-dist "$dist" \
      --update-seconds "$secs" --out "$out" --name "$name-$engine" |
      grep -E '^(load|space|updates)'
  done
done

#!/usr/bin/env python3
"""Markdown tables of what scripts/issue38-space.sh and issue38-blob.sh
wrote. Usage: scripts/issue38-table.py SPACE_DIR [BLOB_DIR]"""
import glob
import json
import os
import statistics
import sys


def space_table(path):
    print("| values | engine | live MB | after load | (open) | updates | after updates | (apparent) | (open) | writer stalls |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for f in sorted(glob.glob(os.path.join(path, "*.json"))):
        d = json.load(open(f))
        name = os.path.basename(f)[:-5]
        case, engine = name.split("-", 1)
        s = d["space"]
        u = d.get("updates") or {}
        us = u.get("space", {})
        live = (s["live"]["key_bytes"] + s["live"]["value_bytes"]) / 1e6
        updates = u.get("run", {}).get("committed", "")
        # Rebound's GC makes writers wait when it falls behind.
        gc = (us.get("rebound") or {}).get("gc") or {}
        stalls = ""
        if "writer_stalls" in gc:
            waited = gc["writer_stall_time"]["secs"] + gc["writer_stall_time"]["nanos"] / 1e9
            stalls = f"{gc['writer_stalls']} ({waited:.1f} s)"
        print(f"| {case} | {engine} | {live:.1f} | {s['ratio']:.2f}x | {s['open_ratio']:.2f}x | {updates} "
              f"| {us.get('ratio', 0):.2f}x | {us.get('apparent_ratio', 0):.2f}x | {us.get('open_ratio', 0):.2f}x | {stalls} |")


def blob_table(path):
    runs = {}
    for f in sorted(glob.glob(os.path.join(path, "*.json"))):
        d = json.load(open(f))
        engine, size, _ = os.path.basename(f)[:-5].rsplit("-", 2)
        for way in ["put", "get"]:
            if d[way]:
                runs.setdefault((size, engine, way), []).append(d[way]["mb_per_s"])
    print("| size | engine | put MB/s (median) | put rounds | get MB/s (median) | get rounds |")
    print("|---|---|---|---|---|---|")
    for size in sorted({k[0] for k in runs}, key=lambda s: int(s[:-1])):
        for engine in ["rebound", "lmdb", "rocksdb"]:
            put = runs.get((size, engine, "put"), [])
            get = runs.get((size, engine, "get"), [])
            if put:
                fmt = lambda xs: " / ".join(f"{x:.0f}" for x in xs)
                print(f"| {size} | {engine} | {statistics.median(put):.0f} | {fmt(put)} "
                      f"| {statistics.median(get):.0f} | {fmt(get)} |")


space_table(sys.argv[1])
if len(sys.argv) > 2:
    print()
    blob_table(sys.argv[2])

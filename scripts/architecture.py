#!/usr/bin/env python3
"""Counts the figures the design-seam work is judged by, from the source
tree alone: lines of the API layer (`db/`), branches on the design outside
the design layer, `pub` fields of the shared transaction state, imports
that run up the layer order of `lib.rs`, and assertions per module.

    python3 scripts/architecture.py [crates/rebound/src]
"""
import os
import re
import sys

SRC = sys.argv[1] if len(sys.argv) > 1 else "crates/rebound/src"

# Bottom to top; a module may only `use crate::<m>` of modules before it.
LAYERS = ["error", "parallel", "medium", "catalog", "heap", "index", "wal",
          "txn", "checkpoint", "gc", "adaptive", "design", "db"]


def rust_files(root):
    for base, _, files in os.walk(root):
        for name in sorted(files):
            if name.endswith(".rs"):
                yield os.path.join(base, name)


def module_of(path):
    rel = os.path.relpath(path, SRC)
    return rel.split(os.sep)[0].removesuffix(".rs")


def code_lines(path):
    """Lines outside comments and outside `#[cfg(test)]` modules/files."""
    name = os.path.basename(path)
    if name in ("tests.rs", "fuzz_tests.rs", "fuzz_support.rs"):
        return []
    out = []
    skip_depth = None
    pending_cfg_test = False
    depth = 0
    for line in open(path, encoding="utf-8"):
        stripped = line.strip()
        if skip_depth is None and stripped.startswith("#[cfg(test)]"):
            pending_cfg_test = True
            continue
        if pending_cfg_test and skip_depth is None and stripped.startswith("mod "):
            skip_depth = depth
        pending_cfg_test = pending_cfg_test and stripped.startswith("#[")
        opens, closes = line.count("{"), line.count("}")
        depth += opens - closes
        if skip_depth is not None:
            if depth <= skip_depth and closes:
                skip_depth = None
            continue
        if stripped.startswith("//"):
            continue
        out.append(line)
    return out


def main():
    files = list(rust_files(SRC))
    db = [f for f in files if module_of(f) == "db"]
    print("lines of db/ (wc -l):", sum(len(open(f).readlines()) for f in db))
    for f in db:
        print(f"  {os.path.relpath(f, SRC)}: {len(open(f).readlines())}")

    branch = re.compile(r"(Durability|CheckpointMode)::\w+|\.durability\b\s*[!=]=|\bmode\(\)\s*[!=]=")
    outside = {}
    for f in files:
        if module_of(f) in ("design", "checkpoint"):
            continue
        for line in code_lines(f):
            if branch.search(line):
                rel = os.path.relpath(f, SRC)
                outside[rel] = outside.get(rel, 0) + 1
    print("lines naming a design (Durability::/CheckpointMode::) outside design/ and checkpoint/:",
          sum(outside.values()), outside)

    pub_fields = 0
    shared = {}
    for f in files:
        if module_of(f) != "txn":
            continue
        struct = None
        for line in code_lines(f):
            m = re.match(r"\s*pub(?:\(crate\))? struct (\w+)\s*\{", line)
            if m:
                struct = m.group(1)
                continue
            if struct and line.strip() == "}":
                struct = None
            elif struct and re.match(r"\s*pub(\(crate\))? \w+:", line):
                shared[struct] = shared.get(struct, 0) + 1
                pub_fields += 1
    print("pub fields of txn's structs:", pub_fields, shared)

    up = []
    for f in files:
        here = module_of(f)
        if here not in LAYERS:
            continue
        text = "".join(code_lines(f))
        for m in re.finditer(r"crate::(\w+)", text):
            there = m.group(1)
            if there in LAYERS and LAYERS.index(there) > LAYERS.index(here):
                up.append(f"{os.path.relpath(f, SRC)} -> {there}")
    print("imports that run up the layers:", len(up))
    for u in sorted(set(up)):
        print("  ", u)

    impls = {}
    for f in files:
        for line in code_lines(f):
            m = re.match(r"impl(?:<[^>]*>)? (\w+)(?:<[^>]*>)? \{", line)
            if m:
                impls.setdefault(m.group(1), set()).add(os.path.relpath(f, SRC))
    spread = {t: sorted(fs) for t, fs in impls.items() if len(fs) > 2}
    print("types whose inherent impl spans more than two files:", len(spread))
    for t, fs in sorted(spread.items()):
        print(f"   {t}: {', '.join(fs)}")

    asserts = {}
    for f in files:
        n = sum(len(re.findall(r"\b(debug_)?assert(_eq|_ne)?!", l)) for l in code_lines(f))
        asserts[module_of(f)] = asserts.get(module_of(f), 0) + n
    total = sum(asserts.values())
    print("assertions outside tests:", total, dict(sorted(asserts.items())))


main()

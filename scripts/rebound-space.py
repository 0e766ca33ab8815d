#!/usr/bin/env python3
"""Where the bytes of a closed log-free Rebound data file go.

Usage: scripts/rebound-space.py DIR [LIVE_BYTES]

Reads DIR/rebound.db (on-medium format 7, see docs/DESIGN.md) and splits
its allocated bytes (st_blocks: holes take none) into the metadata area,
the images of the checkpoint chain in force, the heap blocks its newest
image lists (with what their directories hold: live records, obsolete
ones, entries, headers, and the free space left in each block), and the
rest (blocks prepared ahead, extents freed but not punched, the growth
tail). With LIVE_BYTES (the rows' key and value bytes) every line also
reads as a multiple of it. Open the database with nothing else: the file
must not change while it is read.
"""
import os
import struct
import sys

DATA_FILE = "rebound.db"
OFFSET_MASK = (1 << 56) - 1
MAX_REGIONS = 128
# Images of entries, and of index nodes (IACoW: no entries).
ENTRIES_MAGIC = b"RBCKPT06"
IMAGE_MAGICS = (ENTRIES_MAGIC, b"RBCKPN05")
FORMAT = 7
# Directory entries: 12 bytes, in pairs of 24 (txn word, place, place,
# txn word). A place is the record's offset (bits 0..30), a seal flag
# (bit 30) and a tombstone flag (bit 31); a record ends where the one of
# the entry before starts (the block's end for entry 0).
ENTRY_BYTES = 12
PLACE_OFFSET = (1 << 30) - 1
SEAL = 1 << 30


def u32(b, at):
    return struct.unpack_from("<I", b, at)[0]


def u64(b, at):
    return struct.unpack_from("<Q", b, at)[0]


def data_ranges(fd, length):
    """The allocated (non-hole) ranges of the file, as (start, end)."""
    ranges, at = [], 0
    while at < length:
        try:
            start = os.lseek(fd, at, os.SEEK_DATA)
        except OSError:
            break
        end = os.lseek(fd, start, os.SEEK_HOLE)
        ranges.append((start, end))
        at = end
    return ranges


def allocated_in(ranges, start, end):
    return sum(max(0, min(e, end) - max(s, start)) for s, e in ranges)


def chain(f, root):
    """(offset, length, depth, magic) of each image, newest first."""
    images, at = [], root
    while at:
        head = pread(f, at, 64)
        images.append((at, u64(head, 24), u32(head, 44), head[:8]))
        at = u64(head, 56)
    return images


def pread(f, at, n):
    return os.pread(f, n, at)


def table_sections(f, image_at, tables):
    """(table id, [(seq, offset)], entries, entry bytes) per section."""
    sections, at = [], image_at + 576
    for _ in range(tables):
        head = pread(f, at, 24 + 8 * MAX_REGIONS)
        table, entries, entry_bytes = u32(head, 0), u64(head, 8), u64(head, 16)
        blocks = sum(u64(head, 24 + 8 * r) for r in range(MAX_REGIONS))
        lists = pread(f, at + len(head), 16 * blocks)
        listed = [(u64(lists, 16 * i), u64(lists, 16 * i + 8)) for i in range(blocks)]
        sections.append((table, listed, entries, entry_bytes))
        at += len(head) + 16 * blocks + entry_bytes + 16 * ((entries + 63) // 64)
    return sections


def entry(block, i):
    """Entry i's txn word and place."""
    pair = 320 + 24 * (i // 2)
    if i % 2 == 0:
        return u64(block, pair), u32(block, pair + 8)
    return u64(block, pair + 16), u32(block, pair + 12)


def block_usage(f, at, size):
    """(entries, record bytes, obsolete entries, obsolete record bytes)."""
    block = pread(f, at, size)
    capacity = u32(block, 32)
    bitmap = block[64:320]
    entries = record = obsolete = obsolete_record = 0
    end = size
    for i in range(capacity):
        word, place = entry(block, i)
        if word == 0:
            break
        offset = place & PLACE_OFFSET
        space = max(0, end - offset)
        end = offset
        entries += 1
        record += space
        if bitmap[i // 8] >> (i % 8) & 1:
            obsolete += 1
            obsolete_record += space
        if place & SEAL:
            break  # the directory ends here
    return entries, record, obsolete, obsolete_record


def main():
    path = os.path.join(sys.argv[1], DATA_FILE)
    live = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    f = os.open(path, os.O_RDONLY)
    st = os.fstat(f)
    sb = pread(f, 0, 256)
    if sb[:8] != b"REBOUND\0" or u32(sb, 8) != FORMAT:
        sys.exit(f"{path}: not a format-{FORMAT} Rebound data file")
    data_start, root = u64(sb, 40), u64(sb, 128) & OFFSET_MASK
    ranges = data_ranges(f, st.st_size)
    rows = []

    def line(what, n):
        rows.append((what, n))

    line("file length (apparent)", st.st_size)
    line("allocated (st_blocks x 512)", st.st_blocks * 512)
    line("metadata area", allocated_in(ranges, 0, data_start))
    accounted = allocated_in(ranges, 0, data_start)
    images = chain(f, root)
    for at, length, depth, magic in images:
        if magic not in IMAGE_MAGICS:
            sys.exit(f"{path}: checkpoint image at {at} has magic {magic!r}")
        n = allocated_in(ranges, at, at + length)
        line(f"checkpoint image depth {depth} ({magic.decode()})", n)
        accounted += n
        if magic == ENTRIES_MAGIC:
            sections = table_sections(f, at, u32(pread(f, at, 64), 32))
            count = sum(s[2] for s in sections)
            entry_bytes = sum(s[3] for s in sections)
            per = f"{length / count:.2f} B/entry, {entry_bytes / count:.2f} in entries" if count else "no entries"
            line(f"  ({count} entries: {per})", 0)
    totals = [0] * 7
    # Blocks whose records are mostly obsolete by bytes but not by count:
    # GC judges a block by the share of its entries that are obsolete.
    dead_by_bytes = [0, 0]
    if images:
        newest = images[0][0]
        tables = u32(pread(f, newest, 64), 32)
        for table, listed, entries, _ in table_sections(f, newest, tables):
            size = u32(pread(f, 12288 + 2048 * table, 64), 32)
            for _, at in listed:
                n, rec, obs, obs_rec = block_usage(f, at, size)
                for i, v in enumerate([1, size, n, rec, obs, obs_rec, allocated_in(ranges, at, at + size)]):
                    totals[i] += v
                if rec and obs_rec >= rec / 2 and obs < n / 2:
                    dead_by_bytes[0] += 1
                    dead_by_bytes[1] += obs_rec
            line(f"table {table}: {len(listed)} blocks of {size} B, {entries} index entries", 0)
    blocks, block_bytes, entries, record, obs, obs_rec, alloc = totals
    line("heap blocks listed by the checkpoint", alloc)
    line("  block headers and bitmaps (320 B each)", 320 * blocks)
    line(f"  directory entries ({ENTRY_BYTES} B each)", ENTRY_BYTES * entries)
    line("  records of live versions", record - obs_rec)
    line("  records of obsolete versions", obs_rec)
    line("  free space left in blocks", block_bytes - 320 * blocks - ENTRY_BYTES * entries - record)
    line(f"  ({entries} versions, {obs} obsolete)", 0)
    line(f"  obsolete records in the {dead_by_bytes[0]} blocks over half obsolete by bytes, under half by count", dead_by_bytes[1])
    accounted += alloc
    # Extents of out-of-line values: a header with the magic at a 4096-
    # aligned offset (freed ones have theirs zeroed, or punched).
    extents = extent_bytes = 0
    for start, end in ranges:
        at = max(start, data_start + 0) // 4096 * 4096
        while at < end:
            head = pread(f, at, 40)
            if head[:4] == b"EXT1":
                length = (64 + u64(head, 32) + 4095) // 4096 * 4096
                extents += 1
                extent_bytes += allocated_in(ranges, at, at + length)
                at += length
            else:
                at += 4096
    line(f"extents of out-of-line values ({extents})", extent_bytes)
    accounted += extent_bytes
    line("rest: prepared blocks, unpunched free extents, growth tail", st.st_blocks * 512 - accounted)
    for what, n in rows:
        ratio = f"{n / live:7.3f}x" if live and n else ""
        print(f"{what:<60} {n:>14,} {ratio}")


if __name__ == "__main__":
    main()

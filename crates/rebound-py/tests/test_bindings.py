"""Tests of the Python bindings; run with `python3 tests/test_bindings.py`
(or pytest) once the `rebound_db` module is importable."""

import os
import shutil
import struct
import sys
import tempfile
import threading
import time

import rebound_db as rb


def fresh_dir():
    # tmpfs where there is one: the engine emulates persistent memory there.
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    return tempfile.mkdtemp(prefix="rebound-py-", dir=base)


def open_db(path):
    return rb.Database(path, background_thread=False)


def test_crud_scan_and_prefix():
    path = fresh_dir()
    try:
        db = open_db(path)
        t = db.create_table("users", max_key_len=16, max_value_len=64)
        assert t.name == "users" and db.table_names() == ["users"]
        s = db.session()
        with s.begin() as tx:
            for name in [b"alice", b"bob", b"carol", b"dave"]:
                tx.insert(t, name, name.upper())
        tx = s.begin()
        assert tx.get(t, b"alice") == b"ALICE"
        assert tx.get(t, b"zed") is None
        assert tx.put(t, b"bob", b"B") is True
        assert tx.put(t, b"erin", b"E") is False
        tx.update(t, b"carol", b"C")
        assert tx.delete(t, b"dave") is True
        assert tx.delete(t, b"dave") is False
        keys = [k for k, _ in tx.scan(t)]
        assert keys == [b"alice", b"bob", b"carol", b"erin"], keys
        assert tx.scan(t, b"b", b"d") == [(b"bob", b"B"), (b"carol", b"C")]
        assert [k for k, _ in tx.scan(t, reverse=True, limit=2)] == [b"erin", b"carol"]
        assert tx.prefix(t, b"a") == [(b"alice", b"ALICE")]
        tx.commit()
        db.close()
    finally:
        shutil.rmtree(path)


def test_errors_are_exceptions():
    path = fresh_dir()
    try:
        db = open_db(path)
        t = db.create_table("t", max_key_len=8)
        s = db.session()
        tx = s.begin()
        tx.insert(t, b"k", b"v")
        expect(rb.DuplicateKeyError, lambda: tx.insert(t, b"k", b"w"))
        expect(rb.KeyNotFoundError, lambda: tx.update(t, b"nope", b"w"))
        expect(rb.KeyLengthError, lambda: tx.get(t, b"x" * 9))
        expect(rb.KeyLengthError, lambda: tx.get(t, b""))
        # Over the default value limit (64 MiB, the engine's largest).
        expect(rb.ValueTooLargeError, lambda: tx.put(t, b"k", b"v" * ((64 << 20) + 1)))
        expect(TypeError, lambda: tx.get(t, "not bytes"))
        tx.commit()
        expect(rb.TransactionClosedError, lambda: tx.get(t, b"k"))
        expect(rb.TransactionClosedError, tx.commit)
        expect(rb.InvalidOptionError, lambda: rb.Database(path + "-x", durability="maybe"))
        expect(rb.TableExistsError, lambda: db.create_table("t"))
        expect(rb.InvalidTableError, lambda: db.create_table("u", max_key_len=0))
        db.close()
    finally:
        shutil.rmtree(path)


def test_optimistic_transactions_conflict_at_commit():
    path = fresh_dir()
    try:
        db = rb.Database(path, background_thread=False, concurrency="occ")
        t = db.create_table("t")
        s1, s2 = db.session(), db.session()
        with s1.begin() as tx:
            tx.insert(t, b"k", b"1")
        reader, writer = s1.begin(), s2.begin()
        assert reader.get(t, b"k") == b"1"
        reader.put(t, b"j", b"1")
        writer.put(t, b"k", b"2")
        writer.commit()
        e = expect(rb.ConflictError, reader.commit)
        assert e.retryable
        expect(rb.InvalidOptionError, lambda: rb.Database(path + "-x", concurrency="2pl"))
        db.close()
    finally:
        shutil.rmtree(path)


def test_snapshots_backup_check_and_range_deletes():
    path = fresh_dir()
    try:
        db = open_db(path)
        t = db.create_table("t")
        s1, s2 = db.session(), db.session()
        with s1.begin() as tx:
            for i in range(10):
                tx.insert(t, struct.pack(">I", i), b"v0")
        snapshot = s1.begin(read_only=True)
        with s2.begin() as tx:
            assert tx.delete_range(t, struct.pack(">I", 2), struct.pack(">I", 5)) == 3
            tx.put(t, struct.pack(">I", 0), b"v1")
        assert snapshot.get(t, struct.pack(">I", 0)) == b"v0"
        assert len(snapshot.scan(t)) == 10
        expect(rb.ReadOnlyError, lambda: snapshot.put(t, b"x", b"y"))
        snapshot.commit()
        bounded = rb.Database(path + "-lag", max_snapshot_lag=5, background_thread=False)
        bt = bounded.create_table("t")
        with bounded.session().begin() as tx:
            tx.put(bt, b"k", b"v0")
        old = bounded.session().begin(read_only=True)
        assert old.get(bt, b"k") == b"v0"
        writer = bounded.session()
        for i in range(10):
            with writer.begin() as tx:
                tx.put(bt, b"k", b"v%d" % i)
        bounded.run_maintenance()
        expect(rb.SnapshotTooOldError, lambda: old.get(bt, b"k"))
        assert bounded.stats()["snapshots"]["expired"] == 1
        bounded.close()
        shutil.rmtree(path + "-lag")
        copy = path + "-copy"
        stats = db.backup_to(copy)
        assert stats["rows"] == 7, stats
        assert db.check_integrity() == []
        gone = db.create_table("gone")
        db.drop_table("gone")
        assert db.table("gone") is None and db.table_names() == ["t"]
        expect(rb.NoSuchTableError, lambda: s1.begin().get(gone, b"k"))
        expect(rb.NoSuchTableError, lambda: db.drop_table("gone"))
        db.close()
        restored = open_db(copy)
        with restored.session().begin(read_only=True) as tx:
            rows = tx.scan(restored.table("t"))
        assert [k for k, _ in rows] == [struct.pack(">I", i) for i in [0, 1, 5, 6, 7, 8, 9]]
        assert rows[0][1] == b"v1"
        restored.close()
        del tx, restored  # the lock goes with the last handle
        reader = rb.Database(copy, read_only=True)
        with reader.session().begin() as tx:
            assert len(tx.scan(reader.table("t"))) == 7
            expect(rb.ReadOnlyError, lambda: tx.put(reader.table("t"), b"x", b"y"))
        expect(rb.ReadOnlyError, lambda: reader.create_table("new"))
        reader.close()
        shutil.rmtree(copy)
    finally:
        shutil.rmtree(path)


def test_every_error_class_derives_from_rebound_error():
    kinds = [
        "Conflict", "NotADatabase", "Corrupt", "UnsupportedVersion", "Locked",
        "NoSuchTable", "TableExists", "InvalidTable", "KeyLength", "ValueTooLarge",
        "DuplicateKey", "KeyNotFound", "UniqueViolation", "NoSuchIndex", "IndexExists",
        "InvalidIndex", "ForeignTable", "TransactionPoisoned", "TooManySessions",
        "TooManyTables", "OutOfSpace", "Closed", "Poisoned", "InvalidOption", "ReadOnly",
        "Io",
    ]
    for kind in kinds:
        cls = getattr(rb, kind + "Error")
        assert issubclass(cls, rb.ReboundError), cls
        assert cls.retryable is (kind == "Conflict"), cls
    for kind in ["KeyLength", "ValueTooLarge", "InvalidTable", "InvalidOption", "NoSuchTable",
                 "TableExists", "ForeignTable", "InvalidIndex", "IndexExists", "NoSuchIndex"]:
        assert issubclass(getattr(rb, kind + "Error"), rb.InvalidArgumentError), kind
    assert issubclass(rb.TransactionPoisonedError, rb.TransactionClosedError)
    assert not issubclass(rb.ConflictError, rb.InvalidArgumentError)


def test_transaction_errors():
    path = fresh_dir()
    try:
        db = open_db(path)
        t = db.create_table("t")
        s1, s2 = db.session(), db.session()
        with s1.begin() as tx:
            tx.insert(t, b"k", b"1")
        older, younger = s1.begin(), s2.begin()
        younger.get(t, b"k")
        e = expect(rb.ConflictError, lambda: older.put(t, b"k", b"2"))
        assert e.retryable
        # After a conflict the transaction can only be aborted.
        e = expect(rb.TransactionPoisonedError, lambda: older.get(t, b"k"))
        assert not e.retryable and isinstance(e, rb.TransactionClosedError)
        older.abort()
        younger.commit()
        other_path = fresh_dir()
        try:
            other = open_db(other_path)
            foreign = other.create_table("t")
            with db.session().begin() as tx:
                expect(rb.ForeignTableError, lambda: tx.get(foreign, b"k"))
                tx.abort()
            other.close()
        finally:
            shutil.rmtree(other_path)
        db.close()
    finally:
        shutil.rmtree(path)


def test_index_errors_and_lookups():
    path = fresh_dir()
    try:
        db = open_db(path)
        t = db.create_table("people", max_key_len=8, max_value_len=16)
        with db.session().begin() as tx:
            tx.insert(t, b"ann", b"oslo0030")
            tx.insert(t, b"bob", b"oslo0040")
        expect(rb.UniqueViolationError,
               lambda: db.create_index(t, "city", [("value", 0, 4)], unique=True))
        by_city = db.create_index(t, "city", [("value", 0, 4)])
        by_age = db.create_index(t, "age", [("value", 4, 8)], unique=True)
        assert by_age.unique and db.index(t, "city").name == "city"
        assert db.index(t, "nope") is None
        expect(rb.IndexExistsError, lambda: db.create_index(t, "city", [("value", 0, 4)]))
        expect(rb.InvalidIndexError, lambda: db.create_index(t, "bad", [("value", 10, 40)]))
        expect(rb.InvalidOptionError, lambda: db.create_index(t, "bad", [("row", 0, 4)]))
        s = db.session()
        with s.begin() as tx:
            expect(rb.UniqueViolationError, lambda: tx.insert(t, b"cat", b"rome0030"))
            tx.insert(t, b"cat", b"rome0050")
            assert tx.index_get(by_age, b"0040") == (b"bob", b"oslo0040")
            assert tx.index_get(by_age, b"0099") is None
            rows = tx.index_scan(by_city, b"oslo", b"osloz")
            assert [k for k, _ in rows] == [b"ann", b"bob"], rows
            assert [k for k, _ in tx.index_scan(by_city, limit=1)] == [b"ann"]
        db.close()
        del db, t, by_city, by_age, s, tx
        # Indexes live in memory: reopened, they are rebuilt.
        db = open_db(path)
        ready_after = db.wait_for_secondary_indexes()
        assert isinstance(ready_after, float) and ready_after > 0, ready_after
        by_age = db.index(db.table("people"), "age")
        with db.session().begin() as tx:
            assert tx.index_get(by_age, b"0050") == (b"cat", b"rome0050")
        db.close()
    finally:
        shutil.rmtree(path)


def test_scans_are_bounded_by_default():
    path = fresh_dir()
    try:
        db = open_db(path)
        t = db.create_table("t")
        by_value = db.create_index(t, "v", [("value", 0, 1)])
        n = rb.DEFAULT_SCAN_LIMIT + 5
        with db.session().begin() as tx:
            for i in range(n):
                tx.insert(t, b"k%06d" % i, b"v")
        with db.session().begin() as tx:
            assert rb.DEFAULT_SCAN_LIMIT == 1000
            assert len(tx.scan(t)) == rb.DEFAULT_SCAN_LIMIT
            assert len(tx.scan(t, reverse=True)) == rb.DEFAULT_SCAN_LIMIT
            assert len(tx.prefix(t, b"k")) == rb.DEFAULT_SCAN_LIMIT
            assert len(tx.index_scan(by_value)) == rb.DEFAULT_SCAN_LIMIT
            assert len(tx.scan(t, limit=None)) == n
            assert len(tx.prefix(t, b"k", limit=None)) == n
            assert len(tx.index_scan(by_value, limit=None)) == n
            assert len(tx.scan(t, limit=n - 1)) == n - 1
            assert tx.scan(t, reverse=True, limit=1)[0][0] == b"k%06d" % (n - 1)
        db.close()
    finally:
        shutil.rmtree(path)


def test_database_errors():
    path = fresh_dir()
    try:
        db = open_db(path)
        t = db.create_table("t")
        expect(rb.LockedError, lambda: open_db(path))
        sessions = []
        expect(rb.TooManySessionsError, lambda: [sessions.append(db.session()) for _ in range(1000)])
        del sessions
        for i in range(1, 1000):
            try:
                db.create_table("t%d" % i, max_key_len=8, max_value_len=8)
            except rb.TooManyTablesError:
                break
        else:
            raise AssertionError("expected TooManyTablesError")
        db.close()
        expect(rb.ClosedError, db.session)
        expect(rb.ClosedError, lambda: db.create_table("late"))
        del db, t
        # Closed, it is locked no more: it opens again.
        open_db(path).close()
    finally:
        shutil.rmtree(path)


def test_out_of_space():
    path = fresh_dir()
    try:
        db = rb.Database(path, background_thread=False, max_size=32 << 20)
        t = db.create_table("t", max_value_len=1024)
        s = db.session()
        acknowledged = 0

        def fill():
            nonlocal acknowledged
            for batch in range(100000):
                with s.begin() as tx:
                    for i in range(64):
                        tx.put(t, b"k%d-%d" % (batch, i), b"v" * 1000)
                acknowledged += 64

        expect(rb.OutOfSpaceError, fill)
        assert acknowledged > 1000
        with s.begin(read_only=True) as tx:
            assert tx.get(t, b"k0-0") == b"v" * 1000
        # The closing checkpoint needs space for its image too: on a medium
        # filled up to its last block it fails the same way, losing nothing.
        try:
            db.close()
        except rb.OutOfSpaceError:
            pass
        del s, t, tx, db
        db = rb.Database(path, background_thread=False, max_size=64 << 20)
        with db.session().begin(read_only=True) as tx:
            assert len(tx.scan(db.table("t"), limit=None)) == acknowledged
        db.close()
    finally:
        shutil.rmtree(path)


def test_poisoned_database():
    path = fresh_dir()
    try:
        db = rb.Database(path)  # with its background thread
        t = db.create_table("t")
        db._inject_background_panic()
        deadline = time.monotonic() + 30
        while not db.stats()["poisoned"]:
            assert time.monotonic() < deadline, "the background thread never panicked"
            time.sleep(0.01)
        e = expect(rb.PoisonedError, lambda: db.session().begin().get(t, b"k"))
        assert not e.retryable
        del t, db
    finally:
        shutil.rmtree(path)


def test_damaged_and_foreign_files():
    path = fresh_dir()
    try:
        db = open_db(path)
        db.create_table("t")
        db.close()
        del db
        data = os.path.join(path, DATA_FILE)
        with open(data, "rb") as f:
            pristine = f.read()
        # A flipped bit in the superblock fails its checksum.
        write_superblock(data, pristine, flip_at=40)
        expect(rb.CorruptError, lambda: open_db(path))
        # A future format version with a valid checksum.
        write_superblock(data, pristine, version=999)
        e = expect(rb.UnsupportedVersionError, lambda: open_db(path))
        assert "999" in str(e)
        with open(data, "wb") as f:
            f.write(b"SQLite format 3\0" + bytes(4096))
        expect(rb.NotADatabaseError, lambda: open_db(path))
        # A path through a regular file: the operating system refuses it.
        expect(rb.IoError, lambda: open_db(os.path.join(data, "below-a-file")))
    finally:
        shutil.rmtree(path)


DATA_FILE = "rebound.db"


def write_superblock(data, pristine, flip_at=None, version=None):
    """Writes `pristine` back with its 64-byte superblock changed: a bit
    flipped, or another format version under a recomputed checksum."""
    sb = bytearray(pristine[:64])
    if flip_at is not None:
        sb[flip_at] ^= 1
    if version is not None:
        sb[8:12] = struct.pack("<I", version)
        sb[12:16] = bytes(4)  # the checksum covers the block with itself zero
        sb[12:16] = struct.pack("<I", crc32c(bytes(sb)))
    with open(data, "wb") as f:
        f.write(bytes(sb) + pristine[64:])


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_blocking_calls_release_the_gil():
    path = fresh_dir()
    try:
        db = open_db(path)
        t = db.create_table("t", max_value_len=4096)
        with db.session().begin() as tx:
            for i in range(3000):
                tx.insert(t, b"k%05d" % i, b"v" * 1000)
        # A Python thread notes the time while the main thread scans. Held
        # for a whole scan, the GIL would keep it from running in the
        # middle of a scan (but for a scan that found the GIL taken at its
        # start and waited); released, it runs in the middle of most.
        stamps, spans = [], []
        stop = threading.Event()

        def note_times():
            while not stop.is_set():
                stamps.append(time.perf_counter())
                for _ in range(1000):
                    pass

        noter = threading.Thread(target=note_times)
        tx = db.session().begin()
        noter.start()
        try:
            for _ in range(10):
                start = time.perf_counter()
                tx.scan(t, limit=None)
                spans.append((start, time.perf_counter()))
        finally:
            stop.set()
            noter.join()
        tx.commit()
        shared = [
            any(start + (end - start) / 4 < at < end - (end - start) / 4 for at in stamps)
            for start, end in spans
        ]
        assert sum(shared) >= 5, "another thread ran in the middle of %d of 10 scans" % sum(shared)
        db.close()
    finally:
        shutil.rmtree(path)


def expect(exception, call):
    """Calls `call`, which must raise `exception`; returns what it raised."""
    try:
        call()
    except exception as e:
        return e
    raise AssertionError("expected %s" % exception.__name__)


if __name__ == "__main__":
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_")]
    failed = 0
    for name, test in tests:
        try:
            test()
            print("ok    ", name)
        except Exception as e:  # report every test, then fail
            failed += 1
            print("FAILED", name, repr(e))
    print("%d passed, %d failed" % (len(tests) - failed, failed))
    sys.exit(1 if failed else 0)

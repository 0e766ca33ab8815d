"""Tests of the Python bindings; run with `python3 tests/test_bindings.py`
(or pytest) once the `rebound_db` module is importable."""

import os
import shutil
import sys
import tempfile

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
        expect(rb.InvalidArgumentError, lambda: tx.get(t, b"x" * 9))
        expect(TypeError, lambda: tx.get(t, "not bytes"))
        tx.commit()
        expect(rb.TransactionClosedError, lambda: tx.get(t, b"k"))
        expect(rb.TransactionClosedError, tx.commit)
        expect(rb.InvalidArgumentError, lambda: rb.Database(path + "-x", durability="maybe"))
        assert issubclass(rb.ConflictError, rb.ReboundError)
        db.close()
    finally:
        shutil.rmtree(path)


def test_conflicts_and_context_manager_abort():
    path = fresh_dir()
    try:
        db = open_db(path)
        t = db.create_table("t")
        s1, s2 = db.session(), db.session()
        with s1.begin() as tx:
            tx.insert(t, b"k", b"1")
        older, younger = s1.begin(), s2.begin()
        assert younger.get(t, b"k") == b"1"
        expect(rb.ConflictError, lambda: older.put(t, b"k", b"2"))
        older.abort()
        younger.commit()
        try:
            with s1.begin() as tx:
                tx.put(t, b"k", b"3")
                raise RuntimeError("the block failed")
        except RuntimeError:
            pass
        with s1.begin() as tx:
            assert tx.get(t, b"k") == b"1", "the failed block was aborted"
        db.close()
    finally:
        shutil.rmtree(path)


def test_stats_and_recovery_report_are_dicts():
    path = fresh_dir()
    try:
        db = open_db(path)
        t = db.create_table("t")
        s = db.session()
        for i in range(10):
            with s.begin() as tx:
                tx.insert(t, b"key%d" % i, b"value")
        stats = db.stats()
        assert stats["commits"] == 10 and stats["tables"][0]["name"] == "t", stats
        assert isinstance(stats["gc"]["time"], float)
        assert db.checkpoint()["entries"] == 10
        report = db.recovery_report()
        assert report["fresh"] is True
        db.close()
        del s, tx, t, db
        db = open_db(path)
        report = db.recovery_report()
        assert report["fresh"] is False and report["from_checkpoint"] is True, report
        assert isinstance(report["total"], float) and report["total"] > 0
        with db.session().begin() as tx:
            assert len(tx.scan(db.table("t"))) == 10
        db.close()
    finally:
        shutil.rmtree(path)


def test_wal_durability_reopens_from_its_log_and_snapshot():
    path = fresh_dir()
    try:
        db = rb.Database(path, durability="wal", background_thread=False)
        t = db.create_table("t")
        s = db.session()
        for i in range(5):
            with s.begin() as tx:
                tx.put(t, b"key%d" % i, b"v%d" % i)
        assert db.stats()["wal"]["group_commits"] >= 5
        del s, tx, t, db  # no close: the next open replays the log
        db = rb.Database(path, durability="wal", background_thread=False)
        assert db.recovery_report()["versions_committed"] == 5
        with db.session().begin() as tx:
            assert tx.get(db.table("t"), b"key3") == b"v3"
        db.close()
    finally:
        shutil.rmtree(path)


def expect(exception, call):
    try:
        call()
    except exception:
        return
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

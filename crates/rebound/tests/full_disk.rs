//! A full disk is an error that loses nothing already acknowledged.
//!
//! The file-size limit (RLIMIT_FSIZE) makes the kernel refuse to grow the
//! data file exactly as a full filesystem would; it applies to this whole
//! test process, which is why this test has a binary of its own.

use rebound::{Database, Error, Options, TableOptions};

#[test]
fn full_disk_is_an_error_and_keeps_acknowledged_commits() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let limit = 6 << 20;
    set_file_size_limit(limit);
    let db = Database::open(dir.path(), Options::default()).unwrap();
    let t = db
        .create_table(
            "t",
            TableOptions::default().max_key_len(8).max_value_len(1000),
        )
        .unwrap();
    let mut s = db.session().unwrap();
    let mut acknowledged = 0u64;
    let failure = loop {
        let mut tx = s.begin();
        match tx
            .insert(&t, &acknowledged.to_be_bytes(), &[7u8; 1000])
            .and_then(|_| tx.commit())
        {
            Ok(()) => acknowledged += 1,
            Err(e) => break e,
        }
        assert!(acknowledged < 1_000_000, "the size limit never took effect");
    };
    assert!(
        matches!(failure, Error::OutOfSpace(_)),
        "expected OutOfSpace, got {failure}"
    );
    // Reads still work on a full disk.
    let mut tx = s.begin();
    assert_eq!(
        tx.get(&t, &0u64.to_be_bytes()).unwrap(),
        Some(vec![7u8; 1000])
    );
    drop(tx);
    drop(s);
    drop(db);

    let db = Database::open(dir.path(), Options::default()).unwrap();
    let t = db.table("t").unwrap().unwrap();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    let rows = tx.scan::<&[u8]>(&t, .., usize::MAX).unwrap();
    assert_eq!(rows.len() as u64, acknowledged);
    assert!(acknowledged > 1000);
}

#[allow(unsafe_code)]
fn set_file_size_limit(bytes: u64) {
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit/signal on the calling process with valid arguments;
    // ignoring SIGXFSZ turns "file too large" into an EFBIG error return.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
    }
}

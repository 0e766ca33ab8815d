//! Space a loaded table takes on its medium, as a multiple of the data it
//! holds: `cargo run --release --example space -- DIR [ROWS] [VALUE_LEN]`
//! loads ROWS (100 000) rows of 8-byte keys and VALUE_LEN-byte (100)
//! values into a table with default options, closes the database, and
//! prints the bytes the directory's files occupy (allocated blocks, as
//! `du` counts them) over rows × (key + value), and what the table's
//! statistics say its versions take.

use rebound::{Database, Options, TableOptions};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().ok_or("usage: space DIR [ROWS] [VALUE_LEN]")?;
    let rows: u64 = args.next().map_or(Ok(100_000), |a| a.parse())?;
    let value_len: usize = args.next().map_or(Ok(100), |a| a.parse())?;
    let db = Database::open(&dir, Options::default())?;
    let table = db.create_table("t", TableOptions::default())?;
    let mut session = db.session()?;
    let value = vec![0x5A; value_len];
    for chunk in (0..rows).collect::<Vec<_>>().chunks(1000) {
        let mut tx = session.begin();
        for &k in chunk {
            tx.insert(&table, &k.to_be_bytes(), &value)?;
        }
        tx.commit()?;
    }
    drop(session);
    let stats = db.stats();
    if let Some(t) = stats.tables.iter().find(|t| t.name == "t") {
        println!(
            "heap: {} blocks, {} bytes; versions take {} bytes ({:.2}x the data)",
            t.blocks,
            t.block_bytes,
            t.live_bytes + t.obsolete_bytes,
            (t.live_bytes + t.obsolete_bytes) as f64 / (rows * (8 + value_len as u64)) as f64
        );
    }
    db.close()?;
    let used = allocated_bytes(Path::new(&dir))?;
    let live = rows * (8 + value_len as u64);
    println!(
        "rows {rows} value {value_len} B: {used} bytes allocated for {live} bytes of data = {:.2}x",
        used as f64 / live as f64
    );
    Ok(())
}

/// Bytes the files under `dir` occupy on their file system.
fn allocated_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let meta = std::fs::metadata(&path)?;
        total += match meta.is_dir() {
            true => allocated_bytes(&path)?,
            false => meta.blocks() * 512,
        };
    }
    Ok(total)
}

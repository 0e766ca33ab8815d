//! Inspection from the shell: `stat`, `dump`, `check` and `backup` of an
//! existing database, with its own design (told by its files).
//!
//! Each opens the database itself, so it runs recovery into it if it was
//! not closed cleanly, with the background thread off (it writes nothing
//! else). A database another process holds is refused with a message
//! saying so: opening one read-only is not supported.

use crate::common::BoxResult;
use clap::Args;
use rebound::{Database, Error, Options};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct StatArgs {
    /// Directory of the database.
    pub dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct DumpArgs {
    /// Directory of the database.
    pub dir: PathBuf,
    /// Table to dump, one `key<TAB>value` line per row in key order.
    pub table: String,
    /// First key (inclusive), escaped like the output.
    #[arg(long)]
    pub from: Option<String>,
    /// Last key (exclusive), escaped like the output.
    #[arg(long)]
    pub to: Option<String>,
    /// Print keys and values in hexadecimal instead of escaped text.
    #[arg(long)]
    pub hex: bool,
    /// Stop after this many rows.
    #[arg(long)]
    pub limit: Option<usize>,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Directory of the database.
    pub dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct BackupArgs {
    /// Directory of the database to copy.
    pub source: PathBuf,
    /// Directory to create with the copy (must not exist).
    pub target: PathBuf,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// Directory of the database.
    pub dir: PathBuf,
    /// File to write the stream to (default: standard output).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// Directory to create the database in (must not exist).
    pub dir: PathBuf,
    /// File to read the stream from (default: standard input).
    #[arg(long = "in")]
    pub input: Option<PathBuf>,
    /// Durability design of the new database (see `rebound compare --help`).
    #[arg(long, default_value = "log-free")]
    pub design: String,
}

/// Opens `dir` read-only with its own design (nothing is written to its
/// files), or says why not in words a user can act on.
fn open_existing(dir: &Path) -> BoxResult<Database> {
    let options = Options::for_existing(dir)?.read_only(true);
    match Database::open(dir, options) {
        Ok(db) => Ok(db),
        Err(Error::Locked) => Err(format!(
            "{} is open for writing in another process, which granted no read \
             lease within 10 s: its background thread is off, or one of its \
             transactions has been running that long",
            dir.display()
        )
        .into()),
        Err(e) => Err(e.into()),
    }
}

/// `rebound stat DIR`: tables, rows, space, indexes, checkpoint, recovery.
pub fn stat(args: StatArgs) -> BoxResult<()> {
    let db = open_existing(&args.dir)?;
    db.wait_for_indexes();
    let stats = db.stats();
    let recovery = db.recovery_report();
    println!("database    {}", args.dir.display());
    println!("design      {:?}", db.durability());
    println!("file bytes  {}", stats.medium_bytes);
    println!(
        "recovery    {} in {:.1} ms ({} versions redone, {} undone{})",
        if recovery.fresh { "created" } else { "opened" },
        recovery.total.as_secs_f64() * 1e3,
        recovery.versions_committed,
        recovery.versions_undone,
        match recovery.from_checkpoint {
            true => format!(", from checkpoint {}", recovery.checkpoint_sequence),
            false => String::new(),
        }
    );
    println!();
    println!(
        "{:<20} {:>12} {:>8} {:>14} {:>14} {:>14}",
        "table", "rows", "blocks", "live bytes", "obsolete bytes", "block bytes"
    );
    for table in &stats.tables {
        println!(
            "{:<20} {:>12} {:>8} {:>14} {:>14} {:>14}",
            table.name,
            table.index_entries,
            table.blocks,
            table.live_bytes,
            table.obsolete_bytes,
            table.block_bytes
        );
    }
    let indexes = db.index_stats();
    if !indexes.is_empty() {
        println!();
        println!(
            "{:<20} {:<20} {:>8} {:>12} {:>6}",
            "table", "index", "unique", "entries", "ready"
        );
        for index in indexes {
            println!(
                "{:<20} {:<20} {:>8} {:>12} {:>6}",
                index.table, index.name, index.unique, index.entries, index.ready
            );
        }
    }
    Ok(())
}

/// `rebound dump DIR TABLE`: the rows of one table through a snapshot.
pub fn dump(args: DumpArgs) -> BoxResult<()> {
    let db = open_existing(&args.dir)?;
    let table = db
        .table(&args.table)?
        .ok_or_else(|| format!("no table {:?}; tables: {:?}", args.table, db.table_names()))?;
    let lower = args.from.as_deref().map(unescape).transpose()?;
    let upper = args.to.as_deref().map(unescape).transpose()?;
    let range = (
        lower.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Included),
        upper.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded),
    );
    let mut session = db.session()?;
    let mut snapshot = session.begin_read_only();
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let show = |bytes: &[u8]| match args.hex {
        true => hex(bytes),
        false => escape(bytes),
    };
    for row in snapshot
        .range(&table, range)?
        .take(args.limit.unwrap_or(usize::MAX))
    {
        let (key, value) = row?;
        if writeln!(out, "{}\t{}", show(&key), show(&value)).is_err() {
            break; // The reader went away (`| head`).
        }
    }
    let _ = out.flush();
    Ok(())
}

/// `rebound check DIR`: every checksum and index invariant; exits non-zero
/// on damage.
pub fn check(args: CheckArgs) -> BoxResult<()> {
    let db = match open_existing(&args.dir) {
        Ok(db) => db,
        Err(e) => return Err(format!("damaged: the database does not open: {e}").into()),
    };
    let report = db.check_integrity()?;
    println!(
        "checked {} tables, {} rows, {} slots, {} index entries in {:.1} ms",
        report.tables,
        report.rows,
        report.slots_verified,
        report.index_entries_checked,
        report.elapsed.as_secs_f64() * 1e3
    );
    for problem in &report.problems {
        println!("damaged: {problem}");
    }
    match report.is_intact() {
        true => {
            println!("intact");
            Ok(())
        }
        false => Err(format!("{} damaged places", report.problems.len()).into()),
    }
}

/// `rebound backup SOURCE TARGET`: a consistent copy.
pub fn backup(args: BackupArgs) -> BoxResult<()> {
    let db = open_existing(&args.source)?;
    let stats = db.backup_to(&args.target)?;
    let seconds = stats.elapsed.as_secs_f64();
    println!(
        "copied {} tables, {} indexes, {} rows, {} bytes in {:.2} s ({:.1} MB/s)",
        stats.tables,
        stats.indexes,
        stats.rows,
        stats.bytes,
        seconds,
        stats.bytes as f64 / 1e6 / seconds.max(1e-9)
    );
    Ok(())
}

/// `rebound export DIR`: every table, row and index definition as one
/// stream, readable by `import` of any later build.
pub fn export(args: ExportArgs) -> BoxResult<()> {
    let db = open_existing(&args.dir)?;
    let stats = match &args.out {
        Some(path) => db.export(std::io::BufWriter::new(std::fs::File::create(path)?))?,
        None => db.export(std::io::BufWriter::new(std::io::stdout().lock()))?,
    };
    eprintln!(
        "exported {} tables, {} indexes, {} rows ({} bytes)",
        stats.tables, stats.indexes, stats.rows, stats.bytes
    );
    Ok(())
}

/// `rebound import DIR`: a new database from an export stream.
pub fn import(args: ImportArgs) -> BoxResult<()> {
    let options = crate::common::design_options(&args.design)?;
    let db = match &args.input {
        Some(path) => Database::import(&args.dir, options, std::fs::File::open(path)?)?,
        None => Database::import(&args.dir, options, std::io::stdin().lock())?,
    };
    let rows: usize = db
        .stats()
        .tables
        .iter()
        .map(|t| t.index_entries as usize)
        .sum();
    let tables = db.table_names().len();
    db.close()?;
    eprintln!(
        "imported {tables} tables, {rows} keys into {}",
        args.dir.display()
    );
    Ok(())
}

/// Printable ASCII as is, `\\` and `\t` escaped, every other byte `\xNN`.
fn escape(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => text.push_str("\\\\"),
            b'\t' => text.push_str("\\t"),
            0x20..=0x7e => text.push(b as char),
            _ => text.push_str(&format!("\\x{b:02x}")),
        }
    }
    text
}

/// The inverse of `escape`.
fn unescape(text: &str) -> BoxResult<Vec<u8>> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        rest = tail;
        if b != b'\\' {
            bytes.push(b);
            continue;
        }
        let (byte, tail) = match rest {
            [b'\\', tail @ ..] => (b'\\', tail),
            [b't', tail @ ..] => (b'\t', tail),
            [b'x', h, l, tail @ ..] => {
                let pair = std::str::from_utf8(&[*h, *l])?.to_owned();
                (u8::from_str_radix(&pair, 16)?, tail)
            }
            _ => return Err(format!("bad escape in {text:?}").into()),
        };
        bytes.push(byte);
        rest = tail;
    }
    Ok(bytes)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::{escape, unescape};

    #[test]
    fn escaping_round_trips_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(unescape(&escape(&all)).unwrap(), all);
        assert_eq!(escape(b"a\tb\\\x00"), "a\\tb\\\\\\x00");
        assert!(unescape("\\q").is_err());
    }
}

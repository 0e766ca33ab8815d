//! What the timeline child tells the parent on stdout, one line per fact,
//! and the parent's parser. Times are milliseconds since the child's
//! t = 0: the call of `Database::open` (after a crash) or the start of
//! the workload (before it).
//!
//! ```text
//! T0 <unix ms>              t = 0
//! OPENED <ms>               Database::open returned
//! READY <ms>                the workers start
//! S <ms> <count>            transactions done in the interval ending at <ms>
//! FIRST <ms>                the first transaction was done
//! END <json>                the child's report (after a crash only)
//! ```

use super::ChildReport;
use std::io::{BufRead, Write};

/// Writes one line and flushes it; exits when the parent is gone (the
/// pipe is closed), since nobody would read what the child does.
pub fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    let written = writeln!(out, "{line}").and_then(|()| out.flush());
    if written.is_err() {
        std::process::exit(3);
    }
}

/// Everything a child said, in the parent.
#[derive(Debug, Default)]
pub struct ChildLog {
    pub t0_unix_ms: Option<f64>,
    pub opened_ms: Option<f64>,
    pub ready_ms: Option<f64>,
    /// (end of the interval in ms, transactions done in it).
    pub samples: Vec<(f64, u64)>,
    pub first_ms: Option<f64>,
    pub report: Option<ChildReport>,
    /// Lines that did not parse (reported, never silently dropped).
    pub unparsed: Vec<String>,
}

impl ChildLog {
    /// Adds one line; returns what kind of line it was.
    pub fn add(&mut self, line: &str) -> Option<&'static str> {
        let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
        let number = |s: &str| s.trim().parse::<f64>().ok();
        let kind = match tag {
            "T0" => set(&mut self.t0_unix_ms, number(rest), "T0"),
            "OPENED" => set(&mut self.opened_ms, number(rest), "OPENED"),
            "READY" => set(&mut self.ready_ms, number(rest), "READY"),
            "FIRST" => set(&mut self.first_ms, number(rest), "FIRST"),
            "S" => rest.split_once(' ').and_then(|(t, n)| {
                self.samples
                    .push((number(t)?, n.trim().parse::<u64>().ok()?));
                Some("S")
            }),
            "END" => {
                self.report = serde_json::from_str(rest).ok();
                self.report.as_ref().map(|_| "END")
            }
            _ => None,
        };
        if kind.is_none() {
            self.unparsed.push(line.to_owned());
        }
        kind
    }

    /// Reads lines until the child closes its stdout, calling `on_line`
    /// with the kind of each line as it arrives.
    pub fn read(input: impl BufRead, mut on_line: impl FnMut(&str, &ChildLog)) -> ChildLog {
        let mut log = ChildLog::default();
        for line in input.lines().map_while(Result::ok) {
            if let Some(kind) = log.add(&line) {
                on_line(kind, &log);
            }
        }
        log
    }
}

/// Stores a parsed number; the line's kind if it parsed.
fn set(slot: &mut Option<f64>, value: Option<f64>, kind: &'static str) -> Option<&'static str> {
    *slot = Some(value?);
    Some(kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parser_reads_what_the_child_writes_and_keeps_the_rest() {
        let text = "T0 1700000000000.5\nOPENED 12.5\nREADY 12.6\nS 50 0\nS 100 1234\nFIRST 13.1\nnoise\nS x 1\n";
        let mut kinds = Vec::new();
        let log = ChildLog::read(text.as_bytes(), |kind, _| kinds.push(kind.to_owned()));
        assert_eq!(log.t0_unix_ms, Some(1_700_000_000_000.5));
        assert_eq!(log.opened_ms, Some(12.5));
        assert_eq!(log.ready_ms, Some(12.6));
        assert_eq!(log.first_ms, Some(13.1));
        assert_eq!(log.samples, vec![(50.0, 0), (100.0, 1234)]);
        assert_eq!(log.unparsed, vec!["noise", "S x 1"]);
        assert_eq!(kinds, ["T0", "OPENED", "READY", "S", "S", "FIRST"]);
        assert!(log.report.is_none());
    }
}

//! Segment files: creating, appending, recycling, and reading them back
//! at recovery, where a torn tail is found and cut off.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use super::fs::{FsFile, WalDir};
use super::log::Resume;
use super::record::{self, Record};
use crate::error::{Error, Result};
use crate::medium::FileView;
use std::sync::Arc;

/// The last byte is the format version: 3 logs variable-length versions
/// (txn word and record, see `heap`); 2 logged fixed-slot layouts and has
/// the dropped flag in table records; 1 did not have that flag.
pub const SEGMENT_MAGIC: [u8; 8] = *b"RBWAL\0\0\x03";
pub const SEGMENT_HEADER: usize = 32;

/// What the log remembers of a segment file.
#[derive(Debug, Clone)]
pub struct Segment {
    pub number: u64,
    pub bytes: u64,
    /// Newest timestamp of any record in it (0 if none).
    pub max_ts: u64,
    /// Full: no frame will be added.
    pub closed: bool,
}

pub fn segment_name(number: u64) -> String {
    format!("{number:016x}.log")
}

/// Deletes segment `number` and syncs the directory.
pub fn remove(dir: &WalDir, number: u64) -> Result<()> {
    match dir.remove(&segment_name(number)) {
        // An earlier attempt removed it and then failed to sync the
        // directory: only the sync is left to do.
        Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
        outcome => outcome?,
    }
    dir.sync()
}

fn header(number: u64, first_round: u64) -> [u8; SEGMENT_HEADER] {
    let mut header = [0u8; SEGMENT_HEADER];
    let mut at = 0;
    for field in [
        &SEGMENT_MAGIC[..],
        &number.to_le_bytes(),
        &first_round.to_le_bytes(),
    ] {
        if let Some(dst) = header.get_mut(at..at + field.len()) {
            dst.copy_from_slice(field);
        }
        at += field.len();
    }
    let crc = crc32c::crc32c(header.get(..24).unwrap_or_default());
    if let Some(dst) = header.get_mut(24..28) {
        dst.copy_from_slice(&crc.to_le_bytes());
    }
    header
}

/// A segment of another format version is `UnsupportedVersion`, not
/// damage: its records are not ours to read.
fn check_version(bytes: &[u8]) -> Result<()> {
    let (stem, version) = SEGMENT_MAGIC.split_at(7);
    match (bytes.get(..7), bytes.get(7)) {
        (Some(found), Some(&v)) if found == stem && Some(&v) != version.first() => {
            Err(Error::UnsupportedVersion {
                found: u32::from(v),
                supported: u32::from(version.first().copied().unwrap_or_default()),
            })
        }
        _ => Ok(()),
    }
}

/// Number and first round of a segment header, if it is intact.
fn parse_header(bytes: &[u8]) -> Option<(u64, u64)> {
    let head = bytes.get(..SEGMENT_HEADER)?;
    let crc = u32::from_le_bytes(head.get(24..28)?.try_into().ok()?);
    if head.get(..8)? != SEGMENT_MAGIC || crc32c::crc32c(head.get(..24)?) != crc {
        return None;
    }
    let number = u64::from_le_bytes(head.get(8..16)?.try_into().ok()?);
    let first_round = u64::from_le_bytes(head.get(16..24)?.try_into().ok()?);
    Some((number, first_round))
}

/// The segment file the writer appends to.
pub struct SegmentFile {
    file: FsFile,
    number: u64,
    len: u64,
    /// Bytes written ahead as zeros: appending inside them changes no file
    /// metadata, so `fdatasync` flushes only the frame.
    preallocated: u64,
    max_ts: u64,
}

/// A zero-filled file, synced, under a temporary name, waiting to become
/// segment `number`.
pub struct Prepared {
    file: FsFile,
    temp: String,
    number: u64,
    size: u64,
}

/// Writes a zero-filled file of `size` bytes for segment `number`.
pub fn prepare(dir: &WalDir, number: u64, size: u64) -> Result<Prepared> {
    let temp = format!("{}.creating", segment_name(number));
    let file = dir.create(&temp)?;
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < size {
        let n = (size - at).min(zeros.len() as u64) as usize;
        file.write_all_at(zeros.get(..n).unwrap_or_default(), at)?;
        at += n as u64;
    }
    file.sync_all()?;
    Ok(Prepared {
        file,
        temp,
        number,
        size,
    })
}

impl Prepared {
    /// Writes the header (first frame `first_round`), syncs it and puts the
    /// file in place, so a segment file in place always has an intact
    /// header.
    pub fn install(self, dir: &WalDir, first_round: u64) -> Result<SegmentFile> {
        self.file
            .write_all_at(&header(self.number, first_round), 0)?;
        self.file.sync_data()?;
        dir.rename(&self.temp, &segment_name(self.number))?;
        dir.sync()?;
        Ok(SegmentFile {
            file: self.file,
            number: self.number,
            len: SEGMENT_HEADER as u64,
            preallocated: self.size,
            max_ts: 0,
        })
    }

    pub fn number(&self) -> u64 {
        self.number
    }
}

impl SegmentFile {
    /// Creates segment `number` whose first frame will be `first_round`,
    /// `preallocate` bytes written ahead as zeros.
    pub fn create(
        dir: &WalDir,
        number: u64,
        first_round: u64,
        preallocate: u64,
    ) -> Result<SegmentFile> {
        prepare(dir, number, preallocate)?.install(dir, first_round)
    }

    pub fn append(&mut self, frame: &[u8], max_ts: u64) -> Result<()> {
        self.file.write_all_at(frame, self.len)?;
        self.len += frame.len() as u64;
        self.max_ts = self.max_ts.max(max_ts);
        Ok(())
    }

    /// Whether frames still land in bytes written ahead.
    pub fn is_preallocated(&self) -> bool {
        self.len < self.preallocated
    }

    pub fn sync(&self) -> Result<()> {
        self.file.sync_data()?;
        Ok(())
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn number(&self) -> u64 {
        self.number
    }

    pub fn segment(&self) -> Segment {
        Segment {
            number: self.number,
            bytes: self.len.max(self.preallocated),
            max_ts: self.max_ts,
            closed: false,
        }
    }
}

/// Numbers of the segment files in `dir`, ascending. With `clean` (only
/// at open: later the next segment may be in the making), leftover
/// temporary files of a crash during creation are removed.
fn list(dir: &WalDir, clean: bool) -> Result<Vec<u64>> {
    let mut numbers = Vec::new();
    for name in dir.names()? {
        if name.ends_with(".log.creating") {
            if clean {
                dir.remove(&name)?;
            }
            continue;
        }
        if let Some(stem) = name.strip_suffix(".log") {
            let number = u64::from_str_radix(stem, 16)
                .map_err(|_| Error::Corrupt(format!("unexpected log file {name}")))?;
            numbers.push(number);
        }
    }
    numbers.sort_unstable();
    Ok(numbers)
}

/// Reads every segment, on up to `threads` threads, and hands each record
/// to `visit` with the state `init` made for its segment from the segment's
/// mapped bytes (which the records point into, unless a group commit spans
/// frames); the states come back in log order. A torn or damaged frame at the end of the newest
/// segment is the crash that interrupted a write: everything from it on is
/// cut off the file. Older segments may end in zeros written ahead; any
/// other damage (a gap in the rounds, a bad frame before the end) is
/// `Corrupt`, never skipped. A `reader` (a read-only open beside the
/// log's writer) changes nothing: it leaves temporary files, and takes the
/// newest segment's end, torn or being written, as the log's end.
pub fn replay<S: Send>(
    dir: &WalDir,
    (threads, reader): (usize, bool),
    init: impl Fn(Arc<FileView>) -> S + Sync,
    visit: impl Fn(&mut S, Record<'_>) -> Result<()> + Sync,
) -> Result<(Resume, Vec<S>)> {
    let numbers = list(dir, !reader)?;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let read = |_| {
        let mut done = Vec::new();
        loop {
            let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(&number) = numbers.get(at) else {
                return done;
            };
            // A reader beside the writer copies the bytes: the writer
            // appends to (and a restarting one may cut) what a mapping
            // would show changing or fault on.
            let view = match reader {
                true => dir.read(&segment_name(number)).map(FileView::from_bytes),
                false => dir.view(&segment_name(number)),
            };
            let parsed = view.and_then(|view| {
                let view = Arc::new(view);
                let mut state = init(view.clone());
                let segment = read_segment(&view, number, |rec| visit(&mut state, rec))?;
                Ok((segment, state, view))
            });
            done.push((at, parsed));
        }
    };
    let threads = threads.clamp(1, numbers.len().max(1));
    let mut parsed: Vec<_> = crate::parallel::map(0..threads, read)
        .into_iter()
        .flatten()
        .collect();
    parsed.sort_by_key(|(at, _)| *at);
    let mut segments = Vec::new();
    let mut states = Vec::new();
    let mut next_round = None;
    for (i, (_, outcome)) in parsed.into_iter().enumerate() {
        let (segment, state, view) = outcome?;
        let number = segment.number;
        let last = i + 1 == numbers.len();
        if i > 0 && numbers.get(i - 1).map(|p| p + 1) != Some(number) {
            return Err(Error::Corrupt(format!(
                "log segment {number:x} follows a gap"
            )));
        }
        if next_round.is_some_and(|r| r != segment.first_round) {
            return Err(Error::Corrupt(format!(
                "log segment {number:x} does not continue the log"
            )));
        }
        if !segment.clean_end {
            if !last {
                return Err(Error::Corrupt(format!(
                    "log segment {number:x}: damaged frame at byte {} before the log's end",
                    segment.end
                )));
            }
            view.narrow(segment.end);
            if !reader {
                cut(dir, &segment_name(number), segment.end as u64)?;
            }
        }
        next_round = Some(segment.round);
        segments.push(Segment {
            number,
            bytes: segment.end as u64,
            max_ts: segment.max_ts,
            closed: true,
        });
        states.push(state);
    }
    let resume = Resume {
        next_segment: numbers.last().map_or(1, |n| n + 1),
        next_round: next_round.unwrap_or(1),
        segments,
    };
    Ok((resume, states))
}

/// What reading one segment found.
struct ReadSegment {
    number: u64,
    first_round: u64,
    /// Where its whole group commits end, and the round after them.
    end: usize,
    round: u64,
    max_ts: u64,
    /// Nothing but zeros written ahead follows them.
    clean_end: bool,
}

fn read_segment(
    view: &FileView,
    number: u64,
    mut visit: impl FnMut(Record<'_>) -> Result<()>,
) -> Result<ReadSegment> {
    let bytes = view.bytes();
    check_version(bytes)?;
    let (found, first_round) = parse_header(bytes)
        .ok_or_else(|| Error::Corrupt(format!("log segment {number:x}: bad header")))?;
    if found != number {
        return Err(Error::Corrupt(format!(
            "log segment {number:x} does not continue the log"
        )));
    }
    let (end, round, max_ts) = read_frames(bytes, first_round, &mut visit)?;
    // A segment ends in zeros written ahead that no frame reached.
    let clean_end = bytes.get(end..).is_some_and(|t| t.iter().all(|&b| b == 0));
    Ok(ReadSegment {
        number,
        first_round,
        end,
        round,
        max_ts,
        clean_end,
    })
}

/// Reads the records of the segments in place while the log runs (for a
/// delta snapshot): every frame that is whole, up to the first that is
/// not (the one being written, or zeros written ahead). A damaged header
/// is `Corrupt`.
pub fn scan(dir: &WalDir, mut visit: impl FnMut(Record<'_>) -> Result<()>) -> Result<()> {
    for number in list(dir, false)? {
        let bytes = match dir.read(&segment_name(number)) {
            Ok(bytes) => bytes,
            // Recycled since it was listed: it held nothing newer.
            Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let (_, first_round) = parse_header(&bytes)
            .ok_or_else(|| Error::Corrupt(format!("log segment {number:x}: bad header")))?;
        read_frames(&bytes, first_round, &mut visit)?;
    }
    Ok(())
}

/// Visits the records of the whole group commits of one segment; returns
/// where they end, the round after the last one, and the newest timestamp
/// seen. A group whose last frame is missing ends them like a torn frame.
fn read_frames(
    bytes: &[u8],
    first_round: u64,
    visit: &mut impl FnMut(Record<'_>) -> Result<()>,
) -> Result<(usize, u64, u64)> {
    let (mut at, mut round, mut max_ts) = (SEGMENT_HEADER, first_round, 0);
    let (mut group_end, mut group_round) = (at, round);
    let mut group: Vec<u8> = Vec::new();
    while let Some((payload, len, continued)) =
        bytes.get(at..).and_then(|b| record::read_frame(b, round))
    {
        at += len;
        round += 1;
        if continued {
            group.extend_from_slice(payload);
            continue;
        }
        let whole = match group.is_empty() {
            true => payload,
            false => {
                group.extend_from_slice(payload);
                group.as_slice()
            }
        };
        for rec in record::records(whole) {
            let rec = rec.ok_or_else(|| {
                Error::Corrupt(format!("log frame {}: a record does not decode", round - 1))
            })?;
            max_ts = max_ts.max(record_ts(&rec));
            visit(rec)?;
        }
        group.clear();
        (group_end, group_round) = (at, round);
    }
    Ok((group_end, group_round, max_ts))
}

fn record_ts(rec: &Record<'_>) -> u64 {
    match rec {
        Record::Commit { ts, .. } | Record::Table { ts, .. } | Record::Index { ts, .. } => *ts,
        Record::Rows { .. } => 0,
    }
}

/// Cuts a torn tail off a segment, durably, so that frames written after
/// recovery never sit behind garbage.
fn cut(dir: &WalDir, name: &str, len: u64) -> Result<()> {
    let file = dir.open(name, true)?;
    file.set_len(len)?;
    file.sync_all()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn commit(ts: u64) -> Vec<u8> {
        let mut buf = Vec::new();
        let at = record::start_commit(&mut buf, ts);
        record::finish_commit(&mut buf, at, 0);
        buf
    }

    /// A group commit split over frames counts only once its last frame
    /// is there; the records may be cut anywhere between the frames.
    #[test]
    fn a_group_in_several_frames_is_kept_whole_or_not_at_all() {
        let mut payload = commit(7);
        payload.extend(commit(8));
        let mut bytes = header(1, 10).to_vec();
        record::push_frame(&mut bytes, 10, &commit(5), false);
        let first_group_end = bytes.len();
        record::push_frame(&mut bytes, 11, &payload[..5], true);
        record::push_frame(&mut bytes, 12, &payload[5..20], true);
        record::push_frame(&mut bytes, 13, &payload[20..], false);
        let mut seen = Vec::new();
        let mut visit = |rec: Record<'_>| {
            seen.push(record_ts(&rec));
            Ok(())
        };
        assert_eq!(
            read_frames(&bytes, 10, &mut visit).unwrap(),
            (bytes.len(), 14, 8)
        );
        assert_eq!(seen, vec![5, 7, 8]);
        let without_last = bytes.len() - (FRAME_HEADER_LEN + payload.len() - 20);
        seen.clear();
        let mut visit = |rec: Record<'_>| {
            seen.push(record_ts(&rec));
            Ok(())
        };
        let (end, round, _) = read_frames(&bytes[..without_last], 10, &mut visit).unwrap();
        assert_eq!((end, round, seen), (first_group_end, 11, vec![5]));
    }

    const FRAME_HEADER_LEN: usize = record::FRAME_HEADER;
}

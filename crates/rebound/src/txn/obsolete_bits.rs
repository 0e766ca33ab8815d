//! Obsolete bits set by commits whose write-back waits.
//!
//! A commit sets its predecessors' obsolete bits once it is durable. The
//! bits only nominate blocks for GC (each slot is judged by the index), so
//! they need not be durable with the commit; but a bit lost for good keeps
//! its block forever. Writing their lines back at every commit cost about
//! 3 % of YCSB-A: the write-back evicts the line on the CPUs measured, the
//! next commit's bit in the same line misses, and the commit's next locked
//! instruction waits for the write-back.
//!
//! So a commit leaves its predecessors' words to the next checkpoint,
//! which takes them once its image has resolved every entry and writes
//! them back before it is in force (`Store::write_back_obsolete_bits`). A
//! crash before then loses them, and recovery from the checkpoint in force
//! sets them again. A commit that published after that checkpoint's take
//! was running when its redo horizons were read, or began later, so it is
//! redone; and it was not committed yet when the image resolved its keys.
//! Its predecessor is either redone too (`recovery::newest_versions` marks
//! every redone version a newer one of its key supersedes) or is its key's
//! version in the checkpoint, which the load finds displaced by the redone
//! one (`checkpoint::cold`, `recovery` for node images). Entry images drop
//! tombstones, so a tombstone predecessor's word goes back with the
//! worker's next commit, beside its LCTT line. DESIGN.md ("Obsolete
//! bits") gives the argument and what a crash can still lose.
//!
//! A worker that remembers too many lines (no checkpoints, or a very fast
//! worker between two checkpoints) writes them back itself, so the memory
//! and what a crash can lose stay bounded.

use crate::heap::is_bitmap_word;
use crate::medium::{Medium, LINE};

/// Checks that `word` is a word of a block's obsolete bitmap: the only
/// words a commit sets bits in and a write-back may touch.
fn assert_bitmap_word(word: u64) {
    assert!(
        is_bitmap_word(word),
        "obsolete-bit words lie in a block's bitmap: {word:#x}"
    );
}

/// Distinct lines after which the worker writes them back itself.
const WRITE_BACK_AT: usize = 4096;
/// Slots of a worker's line set: twice the lines it holds at most, so a
/// probe ends within a few slots.
const SET_SLOTS: usize = 2 * WRITE_BACK_AT;
/// An empty slot (no bitmap word is all ones).
const EMPTY: u64 = u64::MAX;

/// Bitmap words a worker set bits in and has not written back.
#[derive(Default)]
pub(crate) struct ObsoleteBits {
    /// Bits recovery sets again if a crash loses them: left to the
    /// checkpoints.
    lines: LineSet,
    /// Bits of tombstone predecessors, written back with the worker's next
    /// commit (or by a checkpoint before that).
    next_commit: Vec<u64>,
}

impl ObsoleteBits {
    /// Remembers a bit that must be written back with the next commit.
    pub(crate) fn remember_for_next_commit(&mut self, word: u64) {
        assert_bitmap_word(word);
        self.next_commit.push(word);
    }

    /// Starts writing back the bits kept for this commit, once per line;
    /// the commit's fence makes them durable.
    pub(crate) fn write_back_with_commit(&mut self, medium: &Medium) {
        write_back_lines(medium, &mut self.next_commit);
    }

    /// Remembers that a bit in bitmap word `word` was set; writes every
    /// remembered line back and fences once too many distinct lines are
    /// remembered (no checkpoint will take them any more, and this thread
    /// may not fence again soon).
    pub(crate) fn remember(&mut self, medium: &Medium, word: u64) {
        assert_bitmap_word(word);
        self.lines.insert(word);
        if self.lines.len >= WRITE_BACK_AT {
            self.write_back(medium);
            // Hints only: a failed fence is the medium's failure, which the
            // next commit's fence reports.
            let _ = medium.fence();
        }
    }

    /// Starts writing back every remembered line, once per line, and
    /// forgets them; the caller fences.
    pub(crate) fn write_back(&mut self, medium: &Medium) {
        self.lines.drain(|word| {
            assert_bitmap_word(word);
            medium.persist(word, 8);
        });
    }

    /// Moves every remembered word into `into`, leaving this one empty
    /// with its capacity.
    pub(crate) fn move_into(&mut self, into: &mut Vec<u64>) {
        self.lines.drain(|word| into.push(word));
        into.append(&mut self.next_commit);
    }

    #[cfg(test)]
    fn lines(&self) -> usize {
        let mut words: Vec<u64> = self.lines.iter().collect();
        words.extend_from_slice(&self.next_commit);
        compact(&mut words);
        words.len()
    }
}

/// One word per line, in an open-addressed table. Sorting a list of words
/// every 8,192 to keep it short took 3 % of a YCSB-A transaction's
/// instructions (about 200 a remembered word); a probe takes a few.
#[derive(Default)]
struct LineSet {
    /// `EMPTY` or a bitmap word; allocated at the first insert.
    slots: Vec<u64>,
    len: usize,
}

impl LineSet {
    fn insert(&mut self, word: u64) {
        if self.slots.is_empty() {
            self.slots = vec![EMPTY; SET_SLOTS];
        }
        let mask = SET_SLOTS - 1;
        let line = word / LINE;
        let mut at = (line.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 51) as usize & mask;
        loop {
            let slot = &mut self.slots[at];
            if *slot == EMPTY {
                *slot = word;
                self.len += 1;
                assert!(self.len < SET_SLOTS, "the set is drained before it fills");
                return;
            }
            if *slot / LINE == line {
                return;
            }
            at = (at + 1) & mask;
        }
    }

    #[cfg(test)]
    fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.slots.iter().copied().filter(|&w| w != EMPTY)
    }

    /// Hands every word to `take`, once per line, and empties the set.
    fn drain(&mut self, mut take: impl FnMut(u64)) {
        for slot in &mut self.slots {
            let word = std::mem::replace(slot, EMPTY);
            if word != EMPTY {
                take(word);
            }
        }
        self.len = 0;
    }
}

/// Starts writing back the lines of `words`, once each, and empties it.
pub(crate) fn write_back_lines(medium: &Medium, words: &mut Vec<u64>) {
    compact(words);
    for &word in words.iter() {
        assert_bitmap_word(word);
        medium.persist(word, 8);
    }
    words.clear();
}

/// Keeps one word per line.
fn compact(words: &mut Vec<u64>) {
    words.sort_unstable_by_key(|word| word / LINE);
    words.dedup_by_key(|word| *word / LINE);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap::BLOCK_ALIGN;
    use crate::medium::SimDevice;

    fn sim(bytes: u64) -> (SimDevice, Medium) {
        let device = SimDevice::new(bytes);
        let medium = Medium::simulated(device.clone());
        medium.grow(bytes).unwrap();
        (device, medium)
    }

    /// The words of `words` that hold `value` after each of 32 simulated
    /// crashes (a line that was not made durable is lost in about a third).
    fn surviving(device: &SimDevice, words: &[u64], value: u64) -> Vec<u64> {
        let mut kept = words.to_vec();
        for seed in 1..=32 {
            let crashed = Medium::simulated(device.crash(seed));
            kept.retain(|&word| crashed.load(word) == value);
        }
        kept
    }

    /// The offset of bitmap line `n`, counting the 4 lines of each
    /// block's obsolete bitmap one block after another.
    fn bitmap_line(n: u64) -> u64 {
        crate::heap::bitmap_line(n, LINE)
    }

    #[test]
    #[should_panic(expected = "obsolete-bit words lie in a block's bitmap")]
    fn remembering_a_word_outside_a_bitmap_trips() {
        let (_, medium) = sim(1 << 20);
        // A slot's first word, not a bitmap word.
        ObsoleteBits::default().remember(&medium, crate::heap::FIRST_SLOT_OF_SECOND_BLOCK);
    }

    #[test]
    fn remembered_lines_are_durable_after_the_drain_and_a_fence() {
        let (device, medium) = sim(1 << 20);
        let mut bits = ObsoleteBits::default();
        // Two words in one line, one in another, and a repeat.
        for word in [64, 72, 4096 + 64, 64] {
            medium.store(word, 1);
            bits.remember(&medium, word);
        }
        assert_eq!(bits.lines(), 2);
        // One kept for the next commit, which a checkpoint takes too.
        medium.store(8192 + 64, 1);
        bits.remember_for_next_commit(8192 + 64);
        assert!(
            surviving(&device, &[4096 + 64], 1).is_empty(),
            "nothing was written back yet"
        );
        let mut drained = Vec::new();
        bits.move_into(&mut drained);
        assert_eq!(bits.lines(), 0);
        write_back_lines(&medium, &mut drained);
        medium.fence().unwrap();
        assert_eq!(
            surviving(&device, &[64, 72, 4096 + 64, 8192 + 64], 1),
            [64, 72, 4096 + 64, 8192 + 64]
        );
        // A commit writes back what was kept for it, and its fence makes
        // it durable.
        medium.store(12288 + 64, 1);
        bits.remember_for_next_commit(12288 + 64);
        bits.write_back_with_commit(&medium);
        medium.fence().unwrap();
        assert_eq!(surviving(&device, &[12288 + 64], 1), [12288 + 64]);
        assert!(bits.next_commit.is_empty());
    }

    #[test]
    fn a_worker_writes_back_itself_past_the_limit_and_keeps_memory_bounded() {
        let distinct = WRITE_BACK_AT as u64 + 10;
        let hot_at = bitmap_line(distinct).next_multiple_of(BLOCK_ALIGN);
        let (device, medium) = sim(hot_at + 4 * BLOCK_ALIGN);
        let mut bits = ObsoleteBits::default();
        for line in 0..distinct {
            let word = bitmap_line(line);
            medium.store(word, 1);
            bits.remember(&medium, word);
            assert!(bits.lines.len < WRITE_BACK_AT, "memory must stay bounded");
        }
        medium.fence().unwrap();
        // Every line is either written back or still remembered.
        let words: Vec<u64> = (0..distinct).map(bitmap_line).collect();
        let written = surviving(&device, &words, 1).len();
        assert_eq!(written, WRITE_BACK_AT, "reaching the limit writes all back");
        assert_eq!(bits.lines(), 10);

        // Repeats of a few lines never reach the limit: nothing goes back.
        let mut hot = ObsoleteBits::default();
        for i in 0..4 * WRITE_BACK_AT as u64 {
            let word = hot_at + bitmap_line(i % 16);
            medium.store(word, 2);
            hot.remember(&medium, word);
        }
        medium.fence().unwrap();
        assert!(hot.lines() <= 16);
        assert!(surviving(&device, &[hot_at + bitmap_line(0)], 2).is_empty());
    }
}

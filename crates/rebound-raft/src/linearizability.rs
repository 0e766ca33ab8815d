//! A linearizability checker for histories of single-register-per-key
//! clients (reads and writes of whole values), after Wing & Gong's search
//! with Lowe's memoization, as Porcupine does it.
//!
//! A history is partitioned by key (registers are independent, so a
//! history is linearizable iff each key's is). For one key, the calls and
//! returns are sorted by time into a linked list; the search repeatedly
//! picks a call, in list order, whose operation the register can take
//! next, lifts it (and its return) out of the list and descends; meeting
//! a return first means the pending operation of that return cannot be
//! ordered later, so it backtracks. A set of (operations linearized,
//! register value) configurations already explored cuts repeated work.
//!
//! A write whose outcome the client never learned (the node failed while
//! it waited) may or may not have taken effect: give it
//! [`Operation::never_returned`], which puts its return after everything.
//! A read that never returned has no effect: leave it out.

use std::collections::{BTreeMap, HashSet};

/// What a client did to one key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// Wrote the value (`None`: deleted the key).
    Write(Option<Vec<u8>>),
    /// Read and saw the value (`None`: the key was absent).
    Read(Option<Vec<u8>>),
}

/// One completed (or abandoned) client operation: `call` and `ret` are
/// times on one clock, `call <= ret`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    pub key: Vec<u8>,
    pub action: Action,
    pub call: u64,
    pub ret: u64,
}

impl Operation {
    /// The return time of an operation whose outcome is unknown.
    pub const NEVER: u64 = u64::MAX;

    pub fn never_returned(key: Vec<u8>, action: Action, call: u64) -> Operation {
        Operation {
            key,
            action,
            call,
            ret: Operation::NEVER,
        }
    }
}

/// A key whose operations admit no linearization.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {operations} operations on key {key:?} are not linearizable")]
pub struct Violation {
    pub key: Vec<u8>,
    pub operations: usize,
}

/// Checks every key's history; the first key (in key order) that admits
/// no linearization is the error.
pub fn check(history: &[Operation]) -> Result<(), Violation> {
    let mut by_key: BTreeMap<&[u8], Vec<&Operation>> = BTreeMap::new();
    for op in history {
        by_key.entry(&op.key).or_default().push(op);
    }
    for (key, ops) in by_key {
        if !linearizable(&ops) {
            return Err(Violation {
                key: key.to_vec(),
                operations: ops.len(),
            });
        }
    }
    Ok(())
}

/// A node of the event list: the call or the return of operation `op`.
struct Event {
    op: usize,
    is_call: bool,
    /// For a call, the node of its return.
    partner: usize,
    prev: usize,
    next: usize,
}

/// The time-ordered events of one key with a sentinel head at index 0;
/// lifting and unlifting in LIFO order restores the links (dancing links).
struct Events {
    nodes: Vec<Event>,
}

const HEAD: usize = 0;

impl Events {
    fn new(ops: &[&Operation]) -> Events {
        let mut order: Vec<(u64, bool, usize)> = Vec::with_capacity(ops.len() * 2);
        for (i, op) in ops.iter().enumerate() {
            order.push((op.call, true, i));
            order.push((op.ret, false, i));
        }
        // At equal times calls go first: such operations overlap.
        order.sort_by_key(|&(time, is_call, op)| (time, !is_call, op));
        let mut nodes = vec![Event {
            op: usize::MAX,
            is_call: false,
            partner: 0,
            prev: 0,
            next: 0,
        }];
        let mut return_node = vec![0; ops.len()];
        for (position, &(_, is_call, op)) in order.iter().enumerate() {
            let index = position + 1;
            if !is_call {
                return_node[op] = index;
            }
            nodes.push(Event {
                op,
                is_call,
                partner: 0,
                prev: index - 1,
                next: if position + 1 == order.len() {
                    usize::MAX
                } else {
                    index + 1
                },
            });
        }
        nodes[HEAD].next = if order.is_empty() { usize::MAX } else { 1 };
        for node in nodes.iter_mut().skip(1) {
            if node.is_call {
                node.partner = return_node[node.op];
            }
        }
        Events { nodes }
    }

    fn first(&self) -> usize {
        self.nodes[HEAD].next
    }

    fn unlink(&mut self, index: usize) {
        let (prev, next) = (self.nodes[index].prev, self.nodes[index].next);
        self.nodes[prev].next = next;
        if next != usize::MAX {
            self.nodes[next].prev = prev;
        }
    }

    fn relink(&mut self, index: usize) {
        let (prev, next) = (self.nodes[index].prev, self.nodes[index].next);
        self.nodes[prev].next = index;
        if next != usize::MAX {
            self.nodes[next].prev = index;
        }
    }

    fn lift(&mut self, call: usize) {
        self.unlink(call);
        self.unlink(self.nodes[call].partner);
    }

    fn unlift(&mut self, call: usize) {
        self.relink(self.nodes[call].partner);
        self.relink(call);
    }
}

/// The register after `action`, or `None` if the register cannot take it.
fn step(state: &Option<Vec<u8>>, action: &Action) -> Option<Option<Vec<u8>>> {
    match action {
        Action::Write(value) => Some(value.clone()),
        Action::Read(seen) => (seen == state).then(|| state.clone()),
    }
}

fn linearizable(ops: &[&Operation]) -> bool {
    let mut events = Events::new(ops);
    let mut state: Option<Vec<u8>> = None;
    let mut done = vec![0u64; ops.len().div_ceil(64)];
    let mut seen: HashSet<(Vec<u64>, Option<Vec<u8>>)> = HashSet::new();
    // (call node lifted, register before it)
    let mut stack: Vec<(usize, Option<Vec<u8>>)> = Vec::new();
    let mut at = events.first();
    while events.first() != usize::MAX {
        let event = &events.nodes[at];
        if event.is_call {
            let op = event.op;
            if let Some(next_state) = step(&state, &ops[op].action) {
                done[op / 64] |= 1 << (op % 64);
                if seen.insert((done.clone(), next_state.clone())) {
                    stack.push((at, std::mem::replace(&mut state, next_state)));
                    events.lift(at);
                    at = events.first();
                    continue;
                }
                done[op / 64] &= !(1 << (op % 64));
            }
            at = event.next;
        } else {
            let Some((call, previous)) = stack.pop() else {
                return false;
            };
            state = previous;
            let op = events.nodes[call].op;
            done[op / 64] &= !(1 << (op % 64));
            events.unlift(call);
            at = events.nodes[call].next;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(value: &str, call: u64, ret: u64) -> Operation {
        Operation {
            key: b"k".to_vec(),
            action: Action::Write(Some(value.as_bytes().to_vec())),
            call,
            ret,
        }
    }

    fn read(value: Option<&str>, call: u64, ret: u64) -> Operation {
        Operation {
            key: b"k".to_vec(),
            action: Action::Read(value.map(|v| v.as_bytes().to_vec())),
            call,
            ret,
        }
    }

    #[test]
    fn accepts_a_concurrent_history_that_needs_reordering() {
        // The read of "2" returns before the write of "2" does, and the
        // read of "1" must go before both.
        let history = [
            write("1", 0, 10),
            write("2", 5, 100),
            read(Some("1"), 6, 20),
            read(Some("2"), 30, 40),
            read(Some("2"), 50, 60),
            read(None, 0, 1),
        ];
        assert_eq!(check(&history), Ok(()));
    }

    #[test]
    fn rejects_a_stale_read() {
        let history = [
            write("1", 0, 10),
            write("2", 20, 30),
            read(Some("1"), 40, 50),
        ];
        assert_eq!(
            check(&history),
            Err(Violation {
                key: b"k".to_vec(),
                operations: 3
            })
        );
    }

    #[test]
    fn rejects_a_value_that_comes_back() {
        // Two concurrent writes take effect once each, so reads cannot
        // flip from "1" to "2" and back.
        let history = [
            write("1", 0, 100),
            write("2", 0, 100),
            read(Some("1"), 10, 20),
            read(Some("2"), 30, 40),
            read(Some("1"), 50, 60),
        ];
        assert!(check(&history).is_err());
    }

    #[test]
    fn rejects_a_read_of_a_value_never_written() {
        assert!(check(&[write("1", 0, 10), read(Some("9"), 20, 30)]).is_err());
        assert!(check(&[read(Some("1"), 0, 5), write("1", 10, 20)]).is_err());
    }

    #[test]
    fn an_unacknowledged_write_may_or_may_not_have_happened() {
        let lost = Operation::never_returned(b"k".to_vec(), Action::Write(Some(b"3".to_vec())), 5);
        let taken = [write("1", 0, 1), lost.clone(), read(Some("3"), 100, 110)];
        assert_eq!(check(&taken), Ok(()));
        let not_taken = [write("1", 0, 1), lost.clone(), read(Some("1"), 100, 110)];
        assert_eq!(check(&not_taken), Ok(()));
        // But it happens at most once, and never before it was called.
        let twice = [
            write("1", 0, 1),
            lost.clone(),
            read(Some("3"), 100, 110),
            write("1", 120, 130),
            read(Some("3"), 140, 150),
        ];
        assert!(check(&twice).is_err());
        assert!(check(&[read(Some("3"), 0, 4), lost]).is_err());
    }

    #[test]
    fn keys_are_independent_registers() {
        let mut other = write("1", 0, 10);
        other.key = b"other".to_vec();
        let mut stale = read(None, 20, 30);
        stale.key = b"other".to_vec();
        assert_eq!(check(&[write("1", 0, 10), read(Some("1"), 20, 30)]), Ok(()));
        let err = check(&[write("1", 0, 10), read(Some("1"), 20, 30), other, stale]).unwrap_err();
        assert_eq!(err.key, b"other".to_vec());
    }

    #[test]
    fn accepts_a_long_history_of_overlapping_writes() {
        // 400 operations, each write overlapping the next one and the
        // reads beside it: the search must not blow up on a linearizable
        // history of this size.
        let mut history = Vec::new();
        let mut last = None;
        for round in 0..200u64 {
            let value = format!("v{round}");
            let start = round * 10;
            history.push(write(&value, start, start + 15));
            history.push(read(last.as_deref(), start, start + 1));
            last = Some(value);
        }
        assert_eq!(check(&history), Ok(()));
    }
}

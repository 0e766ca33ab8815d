//! Commit steps 1, 2 and 4 of the optimistic protocol (lock, commit id,
//! install) and the undo of a failed commit; step 3 is `validate`.

use super::{Found, Installed, Lock, OccSet};
use crate::error::{Error, Result};
use crate::heap::tile::{ABORTED, LOCKED, PENDING, REAPED};
use crate::heap::{Addr, VersionHeader};
use crate::index::{InsertError, LeafMoved, UpdateHint};
use crate::txn::{TableRt, TxnState};
use std::sync::atomic::Ordering::{Acquire, Release, SeqCst};

impl<'s> TxnState<'s> {
    /// Commit steps 1 to 4 (module docs). After an error, `rollback`
    /// releases what is held.
    pub(in crate::txn) fn occ_prepare(&mut self) -> Result<()> {
        // Out of its cell while committing, so that its keys can be
        // borrowed across the writes below.
        let cell = self
            .occ
            .take()
            .expect("only optimistic transactions commit optimistically");
        let result = self.prepare_with(&mut cell.borrow_mut());
        self.occ = Some(cell);
        result
    }

    fn prepare_with(&mut self, occ: &mut OccSet) -> Result<()> {
        if occ.writes.is_empty() {
            return self.validate(occ);
        }
        // Step 3 would fail whatever step 1 did: give up before the lock
        // phase appends and enters placeholders that an abort must undo.
        if self.read_superseded(occ) {
            return Err(Error::Conflict);
        }
        self.lock_write_set(occ)?;
        let commit_id = self.store.clock.next(&self.store.medium)?;
        self.validate(occ)?;
        self.install(occ, commit_id)
    }

    /// Step 1, in (table, key) order.
    fn lock_write_set(&mut self, occ: &mut OccSet) -> Result<()> {
        let mut order = std::mem::take(&mut occ.order);
        order.extend(0..occ.writes.len());
        order.sort_unstable_by(|&a, &b| {
            let (a, b) = (&occ.writes[a], &occ.writes[b]);
            (a.table, a.head)
                .cmp(&(b.table, b.head))
                .then_with(|| occ.key(a).cmp(occ.key(b)))
        });
        occ.order = order;
        let region = self.store.write_sets[self.worker].lock().region;
        let mut hints = std::mem::take(&mut self.hints);
        let mut moved = None;
        let mut locked = Ok(());
        for i in 0..occ.order.len() {
            let write = &occ.writes[occ.order[i]];
            let table = self.store.table(write.table);
            let kv = (occ.key(write), occ.value(write));
            let found = (write.found, &mut hints[..], &mut moved);
            match self.lock_one(table, kv, found, region) {
                Ok((lock, header)) => {
                    occ.locks.push(lock);
                    self.occ_headers.locked.push(header);
                }
                Err(e) => {
                    locked = Err(e);
                    break;
                }
            }
        }
        self.hints = hints;
        locked?;
        // Before the commit id, as placeholders: a lookup that validates
        // after we take it finds our entries.
        for i in 0..occ.order.len() {
            let write = &occ.writes[occ.order[i]];
            let table = self.store.table(write.table);
            if table.secondaries.count() == 0 {
                continue;
            }
            let old = match occ.locks[i] {
                Lock::Head { head, .. } => self.live_value(table, head)?,
                Lock::Placeholder(_) => None,
            };
            self.maintain_indexes(table, occ.key(write), occ.value(write), old.as_deref())?;
        }
        Ok(())
    }

    /// The value of a version we hold locked; `None` for a deletion.
    fn live_value(&self, table: &TableRt, head: Addr) -> Result<Option<Vec<u8>>> {
        let mut value = Vec::new();
        Ok(table
            .read_value(&self.store.medium, head, &mut value)?
            .then_some(value))
    }

    /// Locks what a write found: the head (with its header), or, for a
    /// key that had none, a placeholder. `Conflict` if that changed.
    /// `moved` is the leaf the last placeholder went into, which the hint
    /// of the next one, taken before, follows (`UpdateHint::follow`).
    fn lock_one(
        &mut self,
        table: &'s TableRt,
        (key, value): (&[u8], Option<&[u8]>),
        (found, hints, moved): (Found, &mut [UpdateHint<'s>], &mut Option<LeafMoved<'s>>),
        region: usize,
    ) -> Result<(Lock, Option<&'s VersionHeader>)> {
        let (head, begin, (hint, deleted)) = match found {
            Found::Head {
                head,
                begin,
                hint,
                deleted,
            } => (head, begin, (hint, deleted)),
            Found::Absent { hint } => {
                let hint = hint.map(|at| {
                    if let Some(moved) = moved.as_ref() {
                        hints[at].follow(moved);
                    }
                    &hints[at]
                });
                let (placed, left) = self.enter_placeholder(table, (key, value), hint, region)?;
                *moved = LeafMoved::chain(moved.take(), left);
                return match placed {
                    Some(addr) => Ok((Lock::Placeholder(addr), None)),
                    None => Err(Error::Conflict),
                };
            }
        };
        let read = self.version(table, head)?;
        if read.begin.load(Acquire) != begin {
            return Err(Error::Conflict);
        }
        let mut target = (head, hint);
        let mut header = read;
        loop {
            match header
                .end
                .compare_exchange(0, LOCKED | self.ts, SeqCst, SeqCst)
            {
                Ok(_) => break,
                // Another committer: it is about to publish or give up.
                Err(end) if end & LOCKED != 0 && end != REAPED => {
                    self.wait_for_writer(&header.end, end)?
                }
                // GC copied what we read: lock its copy instead (the leaf
                // changed, so no hint).
                Err(_) => match self.relocated_head(table, head) {
                    Some(copy) if copy != target.0 => {
                        target = (copy, None);
                        header = self.version(table, copy)?;
                    }
                    _ => return Err(Error::Conflict),
                },
            }
        }
        // The head read had `begin` (checked above, and a slot is reused
        // only after its end is set): what we locked carries what we read.
        if read.begin.load(Acquire) != begin {
            header.end.store(0, Release);
            return Err(Error::Conflict);
        }
        let lock = Lock::Head {
            head: target.0,
            hint: target.1,
            deleted,
        };
        Ok((lock, Some(header)))
    }

    /// Appends our version of `key` after `head` (locked by us, with
    /// header `locked`) and points the index at it, from the leaf the
    /// write found it in if unchanged; with how that leaf was left, if the
    /// index was set from it.
    fn append_after<'t>(
        &mut self,
        table: &'t TableRt,
        (key, value): (&[u8], Option<&[u8]>),
        (head, locked): (Addr, &VersionHeader),
        (region, hint): (usize, Option<&UpdateHint<'t>>),
    ) -> Result<(Addr, &'t VersionHeader, Option<LeafMoved<'t>>)> {
        let (new, header) = self.append_version(table, key, value, region)?;
        header.prev.store(head.0 + 1, Release);
        header.begin.store(PENDING | self.ts, Release);
        // Publish checks the lock under the id the versions carry.
        let held = locked.end.swap(LOCKED | self.ts, SeqCst);
        assert_eq!(
            held,
            LOCKED | self.began,
            "a head stays locked by its committer until its successor is installed ({head:?})"
        );
        let repointed = match hint {
            Some(hint) => table
                .index
                .compare_and_set_hinted(hint, key, head.0, new.0, self.began),
            None => table
                .index
                .compare_and_set(key, head.0, new.0, self.began)
                .map(|()| None),
        };
        match repointed {
            Ok(moved) => Ok((new, header, moved)),
            Err(_) => {
                // Nothing repoints a head we hold locked; fail safe if it happens.
                self.discard(table, new)?;
                Err(Error::Conflict)
            }
        }
    }

    /// Appends the new version of a key the index lacks and enters it,
    /// pending under our id; `None` if the key appeared meanwhile.
    /// With the leaf the entry went into from the hint, if it did.
    fn enter_placeholder(
        &mut self,
        table: &'s TableRt,
        (key, value): (&[u8], Option<&[u8]>),
        hint: Option<&UpdateHint<'s>>,
        region: usize,
    ) -> Result<(Option<Addr>, Option<LeafMoved<'s>>)> {
        let (new, header) = self.append_version(table, key, value, region)?;
        header.prev.store(0, Release);
        header.begin.store(PENDING | self.ts, Release);
        // Nobody marks gaps under OCC (GC reads no absent keys): no phantom.
        match table.insert_absent(key, new.0, hint, (u64::MAX, self.ts)) {
            Ok(moved) => Ok((Some(new), moved)),
            Err(InsertError::Exists(_) | InsertError::Phantom) => {
                self.discard(table, new)?;
                Ok((None, None))
            }
        }
    }

    /// Step 4: our versions under the commit id, into the write set that
    /// MVTO's commit makes durable and publishes.
    fn install(&mut self, occ: &mut OccSet, commit_id: u64) -> Result<()> {
        self.ts = commit_id;
        // Before anything is published: the vacuum keeps an entry whose
        // value is at least the newest version's id (`judge_stale`), and
        // ours carry the begin id until now.
        for (_, index, entry) in &self.entered {
            let _ = index
                .tree
                .insert_or_raise(entry, commit_id, commit_id, self.began);
        }
        let store = self.store;
        let mut set = store.write_sets[self.worker].lock();
        set.ts = commit_id;
        let mut hints = std::mem::take(&mut self.hints);
        // The leaf the last install set a value in: the next write's hint,
        // taken from that leaf before, follows it (a Delivery sets ten
        // order lines of one leaf).
        let mut moved: Option<LeafMoved<'s>> = None;
        let mut result = Ok(());
        for i in 0..occ.locks.len() {
            let write = &occ.writes[occ.order[i]];
            let table = store.table(write.table);
            let kv = (occ.key(write), occ.value(write));
            let installed = match occ.locks[i] {
                Lock::Head {
                    head,
                    hint,
                    deleted,
                } => {
                    let hint = hint.map(|at| {
                        if let Some(moved) = moved.as_ref() {
                            hints[at].follow(moved);
                        }
                        &hints[at]
                    });
                    let locked = self.occ_headers.locked[i]
                        .expect("a locked head's header was kept when it was locked");
                    let new = self.append_after(table, kv, (head, locked), (set.region, hint));
                    new.map(|(new, header, left)| {
                        moved = LeafMoved::chain(moved.take(), left);
                        Installed {
                            new,
                            header,
                            prev: Some((head, deleted)),
                            placeholder_bytes: None,
                        }
                    })
                }
                Lock::Placeholder(new) => {
                    self.publish_placeholder(table, new)
                        .map(|(bytes, header)| Installed {
                            new,
                            header,
                            prev: None,
                            placeholder_bytes: Some(bytes),
                        })
                }
            };
            match installed {
                Ok(Installed {
                    new,
                    header,
                    prev,
                    placeholder_bytes,
                }) => {
                    self.occ_headers.installed.push(header);
                    let mut entry = self.written(table, new, prev, kv, &mut set);
                    // `written` measured the slot last encoded, not this one.
                    if let Some(bytes) = placeholder_bytes {
                        entry.bytes = bytes;
                    }
                    set.writes.push(entry);
                    occ.installed = i + 1;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.hints = hints;
        result
    }

    /// A placeholder's version under the commit id. Its slot keeps the
    /// begin id: rewriting it would put a larger id in a block before a
    /// block some later placeholder of ours may have started (block min
    /// txns must ascend), and the begin id orders its chain as well: the
    /// key had no head since before we began (a tombstone is reaped only
    /// below every running transaction), and every later version of it
    /// commits above our commit id.
    fn publish_placeholder<'t>(
        &mut self,
        table: &'t TableRt,
        addr: Addr,
    ) -> Result<(u32, &'t VersionHeader)> {
        let header = self.version(table, addr)?;
        header.begin.store(PENDING | self.ts, Release);
        Ok((table.heap.slot_bytes(&self.store.medium, addr), header))
    }

    /// After a failed commit: undoes the locks not turned into entries of
    /// the write set (`rollback` undoes those).
    pub(in crate::txn) fn release_occ_locks(&mut self) {
        let Some(cell) = self.occ.as_ref() else {
            return;
        };
        let mut occ = cell.borrow_mut();
        let (store, lock_id) = (self.store, self.began);
        let mut holes = false;
        for i in occ.installed..occ.locks.len() {
            let write = &occ.writes[occ.order[i]];
            let table = store.table(write.table);
            let key = occ.key(write);
            let new = match occ.locks[i] {
                Lock::Head { head, .. } => {
                    if let Some(header) = table.heap.header(head) {
                        header.end.store(0, Release);
                    }
                    continue;
                }
                Lock::Placeholder(new) => {
                    table.index.remove_if(key, new.0, 0, lock_id);
                    new
                }
            };
            holes = true;
            if let Some(header) = table.heap.header(new) {
                header.begin.store(ABORTED, Release);
            }
            table.heap.make_hole(&store.medium, new, lock_id);
        }
        // As MVTO's aborts: fenced holes, which no later LCTT resurrects;
        // a failed fence leaves them above LCTT, which recovery drops.
        if holes {
            let _ = store.medium.fence();
        }
        occ.locks.clear();
        occ.installed = 0;
    }
}

//! Work fanned out over scoped threads (recovery, index loads and builds,
//! checksums of checkpoint images).

/// Threads worth running at once: one per core.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs `work` on every item, the first in the calling thread and each
/// other in a thread of its own; results in item order. A panic in any of
/// them is a bug, never a verdict on the data: it is raised in the caller
/// with its own message.
pub fn map<T: Send, R: Send>(
    items: impl IntoIterator<Item = T>,
    work: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    std::thread::scope(|scope| {
        let work = &work;
        let mut items = items.into_iter();
        let first = items.next();
        let handles: Vec<_> = items.map(|item| scope.spawn(move || work(item))).collect();
        let mut results: Vec<R> = first.map(work).into_iter().collect();
        results.extend(handles.into_iter().map(|h| {
            h.join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        }));
        results
    })
}

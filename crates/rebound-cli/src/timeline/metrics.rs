//! What the timeline reports, computed from the per-interval counts.
//!
//! Samples are `(end of the interval in ms since t = 0, transactions done
//! in the interval)`, intervals of equal length back to back.

/// Throughput per interval as (end of the interval in s, txn/s).
pub fn rates(samples: &[(f64, u64)], interval_ms: f64) -> Vec<(f64, f64)> {
    samples
        .iter()
        .map(|&(end, n)| (end / 1e3, n as f64 * 1e3 / interval_ms))
        .collect()
}

/// The median of the interval rates of the last second: the throughput
/// the crash interrupted.
pub fn last_second_median(samples: &[(f64, u64)], interval_ms: f64) -> Option<f64> {
    let n = ((1000.0 / interval_ms).round() as usize).max(1);
    let mut last: Vec<f64> = rates(&samples[samples.len().saturating_sub(n)..], interval_ms)
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    median(&mut last)
}

/// When throughput got back to `target` txn/s: the start (ms) of the
/// first run of `sustain` consecutive intervals whose mean rate is at
/// least `target`. `None` if it never did within the samples.
pub fn reached(
    samples: &[(f64, u64)],
    interval_ms: f64,
    target: f64,
    sustain: usize,
) -> Option<f64> {
    let sustain = sustain.max(1);
    let needed = target * interval_ms / 1e3 * sustain as f64;
    samples.windows(sustain).find_map(|w| {
        let done: u64 = w.iter().map(|&(_, n)| n).sum();
        (done as f64 >= needed).then_some(w[0].0 - interval_ms)
    })
}

/// Transactions done in the intervals that ended by `until_ms`.
pub fn done_by(samples: &[(f64, u64)], until_ms: f64) -> u64 {
    samples
        .iter()
        .filter(|&&(end, _)| end <= until_ms + 1e-6)
        .map(|&(_, n)| n)
        .sum()
}

/// The middle value (the upper one of an even count).
pub fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// The median of times where `None` means "never" and ranks after every
/// time: the median is `None` when at least half the runs never got there.
pub fn median_time(times: &[Option<f64>]) -> Option<f64> {
    let mut sorted = times.to_vec();
    sorted.sort_by(|a, b| match (a, b) {
        (Some(a), Some(b)) => a.total_cmp(b),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    sorted.get(sorted.len() / 2).copied().flatten()
}

/// The per-interval median over several runs' series of the same grid
/// (the shortest one decides the length).
pub fn pointwise_median(series: &[Vec<(f64, f64)>]) -> Vec<(f64, f64)> {
    let len = series.iter().map(Vec::len).min().unwrap_or(0);
    (0..len)
        .map(|i| {
            let mut at: Vec<f64> = series.iter().map(|s| s[i].1).collect();
            (series[0][i].0, median(&mut at).unwrap_or(0.0))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 50 ms intervals ending at 50, 100, ... with these counts.
    fn grid(counts: &[u64]) -> Vec<(f64, u64)> {
        counts
            .iter()
            .enumerate()
            .map(|(i, &n)| ((i + 1) as f64 * 50.0, n))
            .collect()
    }

    #[test]
    fn the_target_must_hold_over_the_whole_window() {
        // 100 txn per 50 ms is 2000 txn/s.
        let s = grid(&[0, 0, 100, 0, 100, 100, 100, 100, 20]);
        // One good interval alone does not count with a window of 4.
        assert_eq!(reached(&s, 50.0, 1800.0, 4), Some(200.0));
        assert_eq!(reached(&s, 50.0, 1800.0, 1), Some(100.0));
        assert_eq!(reached(&s, 50.0, 2100.0, 1), None);
        // A window averaging the target counts even with a dip inside.
        assert_eq!(reached(&s, 50.0, 1000.0, 4), Some(50.0));
    }

    #[test]
    fn pre_crash_throughput_is_the_median_of_the_last_second() {
        let mut counts = vec![1u64; 30];
        counts.extend([100; 19]);
        counts.push(0); // the interval the kill cut short, among 20
        let s = grid(&counts);
        assert_eq!(last_second_median(&s, 50.0), Some(2000.0));
        assert_eq!(last_second_median(&[], 50.0), None);
        assert_eq!(done_by(&s, 100.0), 2);
    }

    #[test]
    fn never_ranks_after_every_time() {
        assert_eq!(median_time(&[Some(3.0), None, Some(1.0)]), Some(3.0));
        assert_eq!(median_time(&[None, Some(1.0), None]), None);
        assert_eq!(median_time(&[]), None);
        let a = vec![(0.05, 1.0), (0.1, 5.0)];
        let b = vec![(0.05, 3.0), (0.1, 1.0)];
        let c = vec![(0.05, 2.0)];
        assert_eq!(pointwise_median(&[a, b, c]), vec![(0.05, 2.0)]);
    }
}

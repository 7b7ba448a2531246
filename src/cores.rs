//! Work spread over the machine's cores, its results kept in order.

use std::ops::Range;

/// The cores this process may run on.
pub fn available() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// `work` run on `0..n` cut into `threads` contiguous ranges, one thread each; the results of
/// the ranges concatenated in order, so the outcome is that of `work(0..n)` on one thread.
/// A worker's panic is carried on to the caller, as it would be on one thread.
pub fn in_ranges<R: Send>(
    n: usize,
    threads: usize,
    work: impl Fn(Range<usize>) -> Vec<R> + Sync,
) -> Vec<R> {
    let threads = threads.clamp(1, n.max(1));
    if threads == 1 {
        return work(0..n);
    }
    let each = n.div_ceil(threads);
    std::thread::scope(|scope| {
        let work = &work;
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let range = (t * each).min(n)..((t + 1) * each).min(n);
                scope.spawn(move || work(range))
            })
            .collect();
        let mut out = Vec::new();
        for h in handles {
            match h.join() {
                Ok(part) => out.extend(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_everything_once_in_order() {
        for n in [0, 1, 2, 7, 100] {
            for threads in [1, 2, 3, 8, 200] {
                let got = in_ranges(n, threads, |r| r.collect());
                assert_eq!(got, (0..n).collect::<Vec<_>>(), "n {n} threads {threads}");
            }
        }
    }
}

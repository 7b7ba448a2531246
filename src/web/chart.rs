//! The overview's traffic chart: decisions per time bucket, stacked by kind, laid out here as
//! rectangles for the template to draw as inline SVG (nothing is fetched by the browser).

use crate::registry::EventKind;

/// The columns a bar stacks, bottom to top, with their colours; [`column`] says which one a
/// decision counts in (the overview's table counts the same way).
pub const KINDS: [(&str, &str); 5] = [
    ("accepted", "#2e7d32"),
    ("partial", "#f9a825"),
    ("rejected", "#c62828"),
    ("duplicate", "#607d8b"),
    ("conflict", "#6a1b9a"),
];

/// The column of [`KINDS`] a decision counts in: a file with no readable interchange is a
/// rejection; `in_progress` and notes are not traffic.
pub fn column(kind: EventKind) -> Option<usize> {
    match kind {
        EventKind::Accepted => Some(0),
        EventKind::Partial => Some(1),
        EventKind::Rejected | EventKind::Unreadable => Some(2),
        EventKind::Duplicate => Some(3),
        EventKind::Conflict => Some(4),
        _ => None,
    }
}

const WIDTH: u32 = 720;
const HEIGHT: u32 = 160;
/// Room under the bars for the time labels.
const AXIS: u32 = 18;

pub struct Rect {
    pub x: u32,
    pub y: u32,
    pub w: u32,
    pub h: u32,
    pub color: &'static str,
    /// The tooltip: bucket, kind, count.
    pub title: String,
}

pub struct Label {
    pub x: u32,
    pub text: String,
}

pub struct Chart {
    pub width: u32,
    pub height: u32,
    pub rects: Vec<Rect>,
    pub labels: Vec<Label>,
    pub max: u64,
    pub total: u64,
}

/// `counts[i]` holds bucket `i`'s (kind, count); `label(i)` names bucket `i` (every
/// `label_every`-th is printed under the axis).
pub fn stacked(
    counts: &[Vec<(EventKind, u64)>],
    label: &dyn Fn(usize) -> String,
    label_every: usize,
) -> Chart {
    let columns: Vec<[u64; 5]> = counts
        .iter()
        .map(|bucket| {
            let mut c = [0u64; 5];
            for (kind, n) in bucket {
                if let Some(slot) = column(*kind).and_then(|i| c.get_mut(i)) {
                    *slot += n;
                }
            }
            c
        })
        .collect();
    let totals: Vec<u64> = columns.iter().map(|c| c.iter().sum()).collect();
    let max = totals.iter().copied().max().unwrap_or(0);
    let n = u32::try_from(counts.len().max(1)).unwrap_or(u32::MAX);
    let slot = (WIDTH / n).max(1);
    let plot = HEIGHT - AXIS;
    let mut rects = Vec::new();
    let mut labels = Vec::new();
    for (i, c) in columns.iter().enumerate() {
        let x = u32::try_from(i).unwrap_or(0).saturating_mul(slot);
        for (kind, h, y) in heights(c, max, plot) {
            let (name, color) = KINDS[kind];
            rects.push(Rect {
                x,
                y,
                w: slot.saturating_sub(2).max(1),
                h,
                color,
                title: format!("{}: {} {name}", label(i), c[kind]),
            });
        }
        if label_every > 0 && i % label_every == 0 {
            labels.push(Label { x, text: label(i) });
        }
    }
    Chart {
        width: WIDTH,
        height: HEIGHT,
        rects,
        labels,
        max,
        total: totals.iter().sum(),
    }
}

/// (column, height, top) of each non-empty part of one bar whose counts are `c`, scaled so
/// that `max` fills `plot`: the bar's height is its total's share, and every part gets at
/// least one pixel (taken from the tallest part), so that one rejection among a thousand
/// acceptances still shows.
fn heights(c: &[u64; 5], max: u64, plot: u32) -> Vec<(usize, u32, u32)> {
    let total: u64 = c.iter().sum();
    if max == 0 || total == 0 {
        return Vec::new();
    }
    let scale = |v: u64| -> u32 {
        u32::try_from(u128::from(v) * u128::from(plot) / u128::from(max)).unwrap_or(plot)
    };
    let bar = scale(total).max(1);
    let mut parts: Vec<(usize, u32)> = c
        .iter()
        .enumerate()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| {
            let share = u128::from(*v) * u128::from(bar) / u128::from(total);
            (k, u32::try_from(share).unwrap_or(bar).max(1))
        })
        .collect();
    // Rounding and the one-pixel floor may miss or pass the bar's height: the tallest part
    // absorbs the difference (it stays at least one pixel; a bar of n parts is n pixels
    // at least).
    let sum: u32 = parts.iter().map(|(_, h)| h).sum();
    if let Some(tallest) = parts.iter_mut().max_by_key(|(_, h)| *h) {
        tallest.1 = (tallest.1 + bar).saturating_sub(sum).max(1);
    }
    let mut top = plot;
    parts
        .into_iter()
        .map(|(k, h)| {
            top = top.saturating_sub(h);
            (k, h, top)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_stack_to_scale_and_a_small_count_still_shows() {
        let counts = vec![
            vec![(EventKind::Accepted, 1000), (EventKind::Rejected, 1)],
            vec![],
            vec![(EventKind::Accepted, 500), (EventKind::Unreadable, 2)],
        ];
        let c = stacked(&counts, &|i| format!("h{i}"), 1);
        assert_eq!(c.max, 1001);
        assert_eq!(c.total, 1503);
        assert_eq!(c.rects.len(), 4);
        let plot = HEIGHT - AXIS;
        // The first bar fills the plot; its rejected part is one pixel at least, on top.
        assert_eq!(c.rects[0].h + c.rects[1].h, plot);
        assert!(c.rects[1].h >= 1);
        assert_eq!(c.rects[1].y + c.rects[1].h, c.rects[0].y, "stacked, no gap");
        assert_eq!(c.rects[1].y, 0);
        assert_eq!(c.rects[1].title, "h0: 1 rejected");
        // Half the largest bar's count is (about) half its height; an unreadable file is
        // a rejection.
        assert!((c.rects[2].h as i64 + c.rects[3].h as i64 - plot as i64 / 2).abs() <= 1);
        assert_eq!(c.rects[3].title, "h2: 2 rejected");
        assert!(c.rects.iter().all(|r| r.h >= 1 && r.y + r.h <= plot));
        assert_eq!(c.labels.len(), 3);
    }

    #[test]
    fn no_traffic_draws_no_bars_and_notes_are_not_traffic() {
        let c = stacked(
            &[vec![], vec![(EventKind::Placed, 3)]],
            &|i| i.to_string(),
            0,
        );
        assert!(c.rects.is_empty());
        assert_eq!(c.max, 0);
    }

    #[test]
    fn every_part_of_a_tiny_bar_shows() {
        // Five kinds of one each beside a bar of a million: the small bar is five pixels.
        let c = stacked(
            &[
                vec![(EventKind::Accepted, 1_000_000)],
                vec![
                    (EventKind::Accepted, 1),
                    (EventKind::Partial, 1),
                    (EventKind::Rejected, 1),
                    (EventKind::Duplicate, 1),
                    (EventKind::Conflict, 1),
                ],
            ],
            &|i| i.to_string(),
            0,
        );
        let small: Vec<&Rect> = c.rects.iter().filter(|r| r.x > 0).collect();
        assert_eq!(small.len(), 5);
        assert!(small.iter().all(|r| r.h == 1));
    }
}

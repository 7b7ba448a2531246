//! The overview's traffic chart: decisions per time bucket, stacked by kind, laid out here as
//! rectangles for the template to draw as inline SVG (nothing is fetched by the browser).

use crate::registry::EventKind;

/// The kinds a bar stacks, bottom to top, with their colours.
pub const KINDS: [(EventKind, &str); 5] = [
    (EventKind::Accepted, "#2e7d32"),
    (EventKind::Partial, "#f9a825"),
    (EventKind::Rejected, "#c62828"),
    (EventKind::Duplicate, "#607d8b"),
    (EventKind::Conflict, "#6a1b9a"),
];

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
    let of = |bucket: &Vec<(EventKind, u64)>, kind: EventKind| {
        bucket
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, n)| *n)
            .sum::<u64>()
    };
    let totals: Vec<u64> = counts
        .iter()
        .map(|b| KINDS.iter().map(|(k, _)| of(b, *k)).sum())
        .collect();
    let max = totals.iter().copied().max().unwrap_or(0);
    let n = u32::try_from(counts.len().max(1)).unwrap_or(u32::MAX);
    let slot = (WIDTH / n).max(1);
    let plot = HEIGHT - AXIS;
    let scale = |v: u64| -> u32 {
        if max == 0 {
            return 0;
        }
        // Rounded up so that a bucket of one among thousands still shows.
        u32::try_from((u128::from(v) * u128::from(plot)).div_ceil(u128::from(max)))
            .unwrap_or(plot)
            .min(plot)
    };
    let mut rects = Vec::new();
    let mut labels = Vec::new();
    for (i, bucket) in counts.iter().enumerate() {
        let x = u32::try_from(i).unwrap_or(0).saturating_mul(slot);
        let mut top = plot;
        for (kind, color) in KINDS {
            let v = of(bucket, kind);
            if v == 0 {
                continue;
            }
            let h = scale(v).min(top);
            top -= h;
            rects.push(Rect {
                x,
                y: top,
                w: slot.saturating_sub(2).max(1),
                h,
                color,
                title: format!("{}: {v} {kind}", label(i)),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_stack_to_scale_and_a_small_count_still_shows() {
        let counts = vec![
            vec![(EventKind::Accepted, 1000), (EventKind::Rejected, 1)],
            vec![],
            vec![(EventKind::Accepted, 500)],
        ];
        let c = stacked(&counts, &|i| format!("h{i}"), 1);
        assert_eq!(c.max, 1001);
        assert_eq!(c.total, 1501);
        assert_eq!(c.rects.len(), 3);
        let plot = HEIGHT - AXIS;
        // The first bar fills the plot; its rejected part is one pixel at least, on top.
        assert_eq!(c.rects[0].h + c.rects[1].h, plot);
        assert!(c.rects[1].h >= 1);
        assert!(c.rects[1].y < c.rects[0].y);
        assert_eq!(c.rects[1].title, "h0: 1 rejected");
        // Half the largest bar's count is (about) half its height.
        assert!((c.rects[2].h as i64 - plot as i64 / 2).abs() <= 1);
        assert_eq!(c.labels.len(), 3);
    }

    #[test]
    fn no_traffic_draws_no_bars() {
        let c = stacked(&[vec![], vec![]], &|i| i.to_string(), 0);
        assert!(c.rects.is_empty());
        assert_eq!(c.max, 0);
    }
}

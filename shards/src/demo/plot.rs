//! The demo's chart: requests per minute by source over time, drawn as the
//! simulator draws Fig. 4 (`coral sim origin-load --plot`), by the same
//! [`coral_plot::line_chart`]. The y axis is logarithmic as in the paper;
//! an interval in which a source served nothing sits on the floor labelled
//! 0 instead of vanishing.

use coral_plot::Series;

/// The SVG document: one line per source, its points (minute, requests per
/// minute).
pub fn chart(title: &str, lines: &[Series]) -> String {
    coral_plot::line_chart(
        title,
        "Time (minutes)",
        "Requests / minute (log scale, 0 drawn)",
        lines,
        true,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_stay_on_the_log_axis() {
        let svg = chart(
            "t",
            &[Series {
                label: "origin".into(),
                points: vec![(0.5, 12.0), (1.0, 0.0), (1.5, 0.0)],
            }],
        );
        // Three points drawn, two of them on the zero line at the bottom of
        // the plot area (top margin 50 px + plot height 380 px).
        assert_eq!(svg.matches("<circle").count(), 3);
        let zero_y = "430";
        assert_eq!(svg.matches(&format!("cy=\"{zero_y}\"")).count(), 2);
        assert!(svg.contains(">0</text>"));
    }
}

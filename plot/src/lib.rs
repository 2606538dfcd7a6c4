//! Plain SVG plots of coral's results: line charts (the latency CDFs of
//! Fig. 6, the per-minute loads of Fig. 4), bar charts (the per-node put
//! load of Fig. 8) and maps of nodes coloured by cluster (Fig. 7). The
//! simulator's experiments (`coral sim ... --plot`) and the demo
//! (`coral demo --plot`) draw with it; the experiments themselves, in the
//! core crate, only return data.
//!
//! Each function returns the whole document as a `String`; writing it out
//! is the caller's business. No dependencies, no I/O, and the output is a
//! pure function of the input (iteration is over slices and ordered maps
//! only), so plots can be compared byte for byte. Text is XML-escaped;
//! non-finite values, and negative ones on a log scale, are skipped; zeros
//! on a log scale sit on a floor one decade below the data, labelled 0 (a
//! series that falls to zero, as Fig. 4's origin load does, stays drawn to
//! its end instead of seeming to stop).
//!
//! - [`chart`]: [`line_chart`] and [`bar_chart`].
//! - [`map`]: [`world_map`] and [`us_map`].
//! - `draw`: the frame, axes and document builder they share.

#![forbid(unsafe_code)]

pub mod chart;
mod draw;
pub mod map;
#[cfg(test)]
mod tests;

pub use chart::{bar_chart, line_chart};
pub use map::{us_map, world_map};

/// One line of a [`line_chart`].
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Its name in the legend.
    pub label: String,
    /// `(x, y)` points, drawn joined in the order given.
    pub points: Vec<(f64, f64)>,
}

/// One node on a [`world_map`] or [`us_map`].
#[derive(Clone, Debug, PartialEq)]
pub struct MapPoint {
    /// Latitude in degrees (north positive).
    pub lat: f64,
    /// Longitude in degrees (east positive).
    pub lon: f64,
    /// Shown when the pointer rests on the point (an SVG `<title>`).
    pub label: String,
    /// The point's cluster: sets its colour and its letter (see
    /// [`group_letter`]).
    pub group: u32,
}

/// Ten distinct colours (the "Tableau 10" palette).
const PALETTE: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// The colour for series or group `index`: ten distinct palette colours,
/// then hues spread by the golden angle.
pub fn colour(index: usize) -> String {
    match PALETTE.get(index) {
        Some(c) => (*c).to_string(),
        None => {
            let hue = (index as f64 * 137.508) % 360.0;
            format!("hsl({hue:.0},65%,42%)")
        }
    }
}

/// The letter a map uses for cluster `group`: A–Z, then AA, AB, ...
pub fn group_letter(group: u32) -> String {
    let mut n = u64::from(group) + 1;
    let mut letters = Vec::new();
    while n > 0 {
        let rem = ((n - 1) % 26) as u8;
        letters.push(char::from(b'A' + rem));
        n = (n - 1) / 26;
    }
    letters.iter().rev().collect()
}

/// `text` with the five XML special characters escaped.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
    }
    out
}

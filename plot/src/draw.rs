//! Chart primitives shared by [`crate::chart`] and [`crate::map`]: the
//! standard frame, axes with round ticks, and an SVG document builder.

use crate::escape;

/// Width of a chart's plot area, in pixels.
pub(crate) const PLOT_WIDTH: f64 = 640.0;
/// Height of a chart's plot area, in pixels.
pub(crate) const PLOT_HEIGHT: f64 = 380.0;
/// Space left of the plot area, for the y tick labels and axis label.
pub(crate) const MARGIN_LEFT: f64 = 80.0;
/// Space right of the plot area when there is no legend.
pub(crate) const MARGIN_RIGHT: f64 = 30.0;
/// Space above the plot area, for the title.
pub(crate) const MARGIN_TOP: f64 = 50.0;
/// Space below the plot area, for the x tick labels and axis label.
pub(crate) const MARGIN_BOTTOM: f64 = 70.0;
/// Roughly how wide one character of 12 px sans-serif text is.
pub(crate) const CHAR_WIDTH: f64 = 7.0;
/// About how many ticks an axis gets.
pub(crate) const TICKS_TARGET: usize = 6;

/// An SVG document under construction.
pub(crate) struct Svg {
    out: String,
}

impl Svg {
    /// Opens a document of the given size, white background and title.
    pub(crate) fn new(width: f64, height: f64, title: &str) -> Svg {
        let mut out = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
             viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n",
            w = num(width),
            h = num(height)
        );
        out.push_str(&format!("<title>{}</title>\n", escape(title)));
        out.push_str("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
        out.push_str(&format!(
            "<text x=\"{}\" y=\"28\" text-anchor=\"middle\" font-size=\"16\" \
             font-weight=\"bold\">{}</text>\n",
            num(width / 2.0),
            escape(title)
        ));
        Svg { out }
    }

    /// Appends one element (already well-formed SVG) on its own line.
    pub(crate) fn line(&mut self, element: &str) {
        self.out.push_str(element);
        self.out.push('\n');
    }

    /// Appends escaped `text` at `(x, y)` with the given anchor and any
    /// extra attributes (each starting with a space).
    pub(crate) fn text(&mut self, x: f64, y: f64, anchor: &str, attributes: &str, text: &str) {
        self.line(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"{anchor}\"{attributes}>{}</text>",
            num(x),
            num(y),
            escape(text)
        ));
    }

    /// Opens a `<g>` group, noting what it holds (`what` must be escaped).
    pub(crate) fn open_group(&mut self, what: &str) {
        self.line(&format!("<g class=\"{what}\">"));
    }

    /// Closes the innermost group.
    pub(crate) fn close_group(&mut self) {
        self.line("</g>");
    }

    /// Closes the document.
    pub(crate) fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

/// One axis: its range, scale and tick positions (in data units).
pub(crate) struct Axis {
    min: f64,
    max: f64,
    log: bool,
    ticks: Vec<f64>,
    /// A log axis whose bottom tick (`min`) stands for zero.
    zero_floor: bool,
}

impl Axis {
    /// A linear axis over `range` (or 0..1 when there is no data), widened
    /// to round tick values at both ends.
    pub(crate) fn linear(range: Option<(f64, f64)>) -> Axis {
        let (mut lo, mut hi) = range.unwrap_or((0.0, 1.0));
        if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
            let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.5 };
            lo -= pad;
            hi += pad;
        }
        let step = nice_step((hi - lo) / TICKS_TARGET as f64);
        let min = (lo / step).floor() * step;
        let max = (hi / step).ceil() * step;
        Axis {
            min,
            max,
            log: false,
            ticks: nice_ticks(min, max),
            zero_floor: false,
        }
    }

    /// A base-10 logarithmic axis over `range` (positive values only; 1..10
    /// when there are none), from one power of ten to another. When it spans
    /// two decades or fewer, 2× and 5× ticks are added.
    pub(crate) fn log(range: Option<(f64, f64)>) -> Axis {
        let (lo, hi) = range.unwrap_or((1.0, 10.0));
        let mut lo_exp = lo.log10().floor();
        let mut hi_exp = hi.log10().ceil();
        if !lo_exp.is_finite() || !hi_exp.is_finite() {
            (lo_exp, hi_exp) = (0.0, 1.0);
        }
        if hi_exp <= lo_exp {
            hi_exp = lo_exp + 1.0;
        }
        let dense = hi_exp - lo_exp <= 2.0;
        let mut ticks = Vec::new();
        let mut e = lo_exp;
        while e <= hi_exp {
            let decade = 10f64.powf(e);
            ticks.push(decade);
            if dense && e < hi_exp {
                ticks.push(2.0 * decade);
                ticks.push(5.0 * decade);
            }
            e += 1.0;
        }
        Axis {
            min: 10f64.powf(lo_exp),
            max: 10f64.powf(hi_exp),
            log: true,
            ticks,
            zero_floor: false,
        }
    }

    /// Extends a log axis one decade down; its new bottom tick stands for
    /// zero (labelled 0), where zeros are drawn.
    pub(crate) fn add_zero_floor(&mut self) {
        self.min /= 10.0;
        self.ticks.insert(0, self.min);
        self.zero_floor = true;
    }

    /// Where `v` falls along the axis, from 0 (min) to 1 (max).
    pub(crate) fn fraction(&self, v: f64) -> f64 {
        if self.log {
            let (lo, hi) = (self.min.log10(), self.max.log10());
            if self.zero_floor && v <= self.min {
                return 0.0;
            }
            (v.max(self.min * 1e-3).log10() - lo) / (hi - lo)
        } else {
            (v - self.min) / (self.max - self.min)
        }
    }

    /// The tick label for `v`.
    pub(crate) fn label(&self, v: f64) -> String {
        if self.zero_floor && v == self.min {
            "0".to_string()
        } else if self.log {
            format_value(v)
        } else {
            let step = match self.ticks.as_slice() {
                [a, b, ..] => b - a,
                _ => 1.0,
            };
            format_tick(v, step)
        }
    }
}

/// A chart's layout: the plot area within the whole drawing.
pub(crate) struct Frame {
    pub(crate) left: f64,
    pub(crate) top: f64,
    pub(crate) width: f64,
    pub(crate) height: f64,
    pub(crate) total_width: f64,
    pub(crate) total_height: f64,
}

impl Frame {
    /// The standard chart layout, with room for a legend `legend_width`
    /// wide on the right.
    pub(crate) fn chart(legend_width: f64) -> Frame {
        Frame {
            left: MARGIN_LEFT,
            top: MARGIN_TOP,
            width: PLOT_WIDTH,
            height: PLOT_HEIGHT,
            total_width: MARGIN_LEFT + PLOT_WIDTH + MARGIN_RIGHT + legend_width,
            total_height: MARGIN_TOP + PLOT_HEIGHT + MARGIN_BOTTOM,
        }
    }

    pub(crate) fn x(&self, axis: &Axis, v: f64) -> f64 {
        self.left + axis.fraction(v) * self.width
    }

    pub(crate) fn y(&self, axis: &Axis, v: f64) -> f64 {
        self.top + (1.0 - axis.fraction(v)) * self.height
    }

    /// Both axes with ticks, grid lines and labels.
    pub(crate) fn draw_axes(
        &self,
        svg: &mut Svg,
        x_axis: &Axis,
        y_axis: &Axis,
        x_label: &str,
        y_label: &str,
    ) {
        self.draw_y_axis(svg, y_axis, y_label);
        svg.open_group("x axis");
        for &t in &x_axis.ticks {
            let x = self.x(x_axis, t);
            let bottom = self.top + self.height;
            svg.line(&format!(
                "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#e4e4e4\"/>",
                num(x),
                num(self.top),
                num(x),
                num(bottom)
            ));
            svg.line(&format!(
                "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>",
                num(x),
                num(bottom),
                num(x),
                num(bottom + 5.0)
            ));
            svg.text(x, bottom + 18.0, "middle", "", &x_axis.label(t));
        }
        svg.close_group();
        self.draw_x_axis_line(svg);
        self.draw_x_label(svg, x_label);
    }

    /// The x axis line itself.
    pub(crate) fn draw_x_axis_line(&self, svg: &mut Svg) {
        let bottom = self.top + self.height;
        svg.line(&format!(
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>",
            num(self.left),
            num(bottom),
            num(self.left + self.width),
            num(bottom)
        ));
    }

    /// The x axis's label, centred below the tick labels.
    pub(crate) fn draw_x_label(&self, svg: &mut Svg, x_label: &str) {
        svg.text(
            self.left + self.width / 2.0,
            self.top + self.height + 50.0,
            "middle",
            "",
            x_label,
        );
    }

    /// The y axis: line, ticks, grid lines, tick labels and rotated label.
    pub(crate) fn draw_y_axis(&self, svg: &mut Svg, y_axis: &Axis, y_label: &str) {
        svg.open_group("y axis");
        for &t in &y_axis.ticks {
            let y = self.y(y_axis, t);
            svg.line(&format!(
                "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#e4e4e4\"/>",
                num(self.left),
                num(y),
                num(self.left + self.width),
                num(y)
            ));
            svg.line(&format!(
                "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>",
                num(self.left - 5.0),
                num(y),
                num(self.left),
                num(y)
            ));
            svg.text(self.left - 8.0, y + 4.0, "end", "", &y_axis.label(t));
        }
        svg.line(&format!(
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>",
            num(self.left),
            num(self.top),
            num(self.left),
            num(self.top + self.height)
        ));
        let (x, y) = (20.0, self.top + self.height / 2.0);
        svg.text(
            x,
            y,
            "middle",
            &format!(" transform=\"rotate(-90 {} {})\"", num(x), num(y)),
            y_label,
        );
        svg.close_group();
    }

    /// A "no data" note in the middle of the plot area.
    pub(crate) fn no_data(&self, svg: &mut Svg) {
        svg.text(
            self.left + self.width / 2.0,
            self.top + self.height / 2.0,
            "middle",
            " fill=\"#999\"",
            "no data",
        );
    }
}

/// The smallest and largest of `values`, or `None` if there are none.
pub(crate) fn min_max(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// A round step (1, 2 or 5 times a power of ten) near `raw`.
pub(crate) fn nice_step(raw: f64) -> f64 {
    if !raw.is_finite() || raw <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    let fraction = raw / magnitude;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// Round tick values from `min` to `max`, about [`TICKS_TARGET`] of them.
pub(crate) fn nice_ticks(min: f64, max: f64) -> Vec<f64> {
    let step = nice_step((max - min) / TICKS_TARGET as f64);
    let first = (min / step).ceil();
    let last = (max / step + 1e-9).floor();
    let mut ticks = Vec::new();
    let mut k = first;
    // Bounded: at most a few more than TICKS_TARGET by construction.
    while k <= last && ticks.len() <= 4 * TICKS_TARGET {
        // Adding 0.0 turns -0 into 0.
        ticks.push(k * step + 0.0);
        k += 1.0;
    }
    ticks
}

/// A linear-axis tick label with as many decimals as `step` needs.
pub(crate) fn format_tick(v: f64, step: f64) -> String {
    let v = v + 0.0;
    if v != 0.0 && (v.abs() >= 1e7 || v.abs() < 1e-5) {
        return format!("{v:e}");
    }
    let decimals = if step >= 1.0 {
        0
    } else {
        ((-step.log10()).ceil() as usize).min(8)
    };
    format!("{v:.decimals$}")
}

/// A value as a short label: integers bare, others with up to four
/// significant decimals, very large or small ones in `e` notation.
pub(crate) fn format_value(v: f64) -> String {
    let v = v + 0.0;
    if v == 0.0 {
        return "0".to_string();
    }
    if v.abs() >= 1e7 || v.abs() < 1e-4 {
        return format!("{v:e}");
    }
    let text = format!("{v:.4}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    text.to_string()
}

/// A coordinate or size with two decimals, trailing zeros dropped.
pub(crate) fn num(v: f64) -> String {
    let v = if v.is_finite() { v + 0.0 } else { 0.0 };
    let text = format!("{v:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_string()
    } else {
        text.to_string()
    }
}

/// A grid line's label, such as `30°N` or `90°W`.
pub(crate) fn degrees(v: f64, positive: char, negative: char) -> String {
    let whole = v.round() as i64;
    match whole {
        0 => "0°".to_string(),
        w if w > 0 => format!("{w}°{positive}"),
        w => format!("{}°{negative}", -w),
    }
}

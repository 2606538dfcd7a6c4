//! Line charts (the latency CDFs of Fig. 6, the per-minute loads of Fig. 4)
//! and bar charts (the per-node put load of Fig. 8).

use crate::draw::{format_value, min_max, nice_ticks, num, Axis, Frame, Svg, CHAR_WIDTH};
use crate::{colour, escape, Series};

/// The widest a legend may be.
const LEGEND_WIDTH_MAX: f64 = 300.0;
/// Bars narrower than this (in pixels) are drawn as one filled outline.
const BAR_WIDTH_MIN: f64 = 2.0;
/// Bar charts with at most this many bars label every bar.
const BARS_LABELLED_MAX: usize = 40;
/// Series with at most this many points also mark each point.
const MARKED_POINTS_MAX: usize = 40;

/// A line chart of `series`, each in its own colour, with a legend. With
/// `log_y` the y axis is logarithmic (as for Fig. 6's latency CDF: x the
/// fraction of requests, y the latency in seconds): points with `y < 0` are
/// skipped, and `y == 0` is drawn on a floor labelled 0, a decade below the
/// smallest positive value. Non-finite points are always skipped.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_y: bool,
) -> String {
    let usable = |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite() && (!log_y || y >= 0.0);
    let all = || {
        series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .filter(usable)
    };
    let x_axis = Axis::linear(min_max(all().map(|p| p.0)));
    let y_axis = if log_y {
        let mut axis = Axis::log(min_max(all().map(|p| p.1).filter(|&y| y > 0.0)));
        if all().any(|p| p.1 == 0.0) {
            axis.add_zero_floor();
        }
        axis
    } else {
        Axis::linear(min_max(all().map(|p| p.1)))
    };

    let legend_chars = series
        .iter()
        .map(|s| s.label.chars().count())
        .max()
        .unwrap_or(0);
    let legend_width = if series.is_empty() {
        0.0
    } else {
        (legend_chars as f64 * CHAR_WIDTH + 50.0).min(LEGEND_WIDTH_MAX)
    };
    let frame = Frame::chart(legend_width);
    let mut svg = Svg::new(frame.total_width, frame.total_height, title);
    frame.draw_axes(&mut svg, &x_axis, &y_axis, x_label, y_label);

    let mut any = false;
    for (index, s) in series.iter().enumerate() {
        let colour = colour(index);
        let mut pixels: Vec<(f64, f64)> = Vec::with_capacity(s.points.len());
        for &point in s.points.iter().filter(|p| usable(p)) {
            let px = (frame.x(&x_axis, point.0), frame.y(&y_axis, point.1));
            // Drop points that would not move the pen: CDFs of many
            // thousand samples stay small.
            let moves = match pixels.last() {
                Some(&(lx, ly)) => (px.0 - lx).abs() >= 0.25 || (px.1 - ly).abs() >= 0.25,
                None => true,
            };
            if moves {
                pixels.push(px);
            }
        }
        if pixels.is_empty() {
            continue;
        }
        any = true;
        svg.open_group(&format!("series {}", escape(&s.label)));
        if pixels.len() > 1 {
            let list: Vec<String> = pixels
                .iter()
                .map(|&(x, y)| format!("{},{}", num(x), num(y)))
                .collect();
            svg.line(&format!(
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.8\" \
                 stroke-linejoin=\"round\" points=\"{}\"/>",
                list.join(" ")
            ));
        }
        if pixels.len() == 1 || s.points.len() <= MARKED_POINTS_MAX {
            for &(x, y) in &pixels {
                svg.line(&format!(
                    "<circle cx=\"{}\" cy=\"{}\" r=\"2.5\" fill=\"{colour}\"/>",
                    num(x),
                    num(y)
                ));
            }
        }
        svg.close_group();
    }
    if !any {
        frame.no_data(&mut svg);
    }

    // Legend, right of the plot area.
    if !series.is_empty() {
        let left = frame.left + frame.width + 20.0;
        for (index, s) in series.iter().enumerate() {
            let y = frame.top + 10.0 + 20.0 * index as f64;
            svg.line(&format!(
                "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"3\"/>",
                num(left),
                num(y),
                num(left + 22.0),
                num(y),
                colour(index)
            ));
            svg.text(left + 28.0, y + 4.0, "start", "", &s.label);
        }
    }
    svg.finish()
}

/// A bar chart, one bar per `(label, value)` in the order given (as for
/// Fig. 8: put RPCs per minute at each node, nodes sorted by distance to the
/// key). With many bars (up to tens of thousands) each pixel column draws
/// the tallest bar that falls in it, as one filled outline. An optional
/// horizontal reference line (such as the β·log n bound) is drawn dashed,
/// with its label. Non-finite values count as zero.
pub fn bar_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    bars: &[(String, f64)],
    reference_line: Option<(f64, &str)>,
) -> String {
    let value = |v: f64| if v.is_finite() { v } else { 0.0 };
    let reference = reference_line.filter(|(v, _)| v.is_finite());
    let values = bars
        .iter()
        .map(|(_, v)| value(*v))
        .chain(reference.iter().map(|(v, _)| *v))
        .chain(std::iter::once(0.0));
    let y_axis = Axis::linear(min_max(values));
    let count = bars.len();
    let frame = Frame::chart(0.0);
    let mut svg = Svg::new(frame.total_width, frame.total_height, title);
    frame.draw_y_axis(&mut svg, &y_axis, y_label);
    frame.draw_x_label(&mut svg, x_label);

    let bar_width = frame.width / count.max(1) as f64;
    let base = frame.y(&y_axis, 0.0);
    let fill = colour(0);
    if count == 0 {
        frame.no_data(&mut svg);
    } else if bar_width >= BAR_WIDTH_MIN {
        svg.open_group("bars");
        let gap = if bar_width >= 4.0 {
            bar_width * 0.15
        } else {
            0.0
        };
        for (index, (label, v)) in bars.iter().enumerate() {
            let x = frame.left + index as f64 * bar_width + gap / 2.0;
            let y = frame.y(&y_axis, value(*v));
            let (top, height) = if y < base {
                (y, base - y)
            } else {
                (base, y - base)
            };
            svg.line(&format!(
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{fill}\">\
                 <title>{}: {}</title></rect>",
                num(x),
                num(top),
                num(bar_width - gap),
                num(height),
                escape(label),
                escape(&format_value(value(*v)))
            ));
        }
        svg.close_group();
    } else {
        // One column per pixel; each shows the largest magnitude among its
        // bars, so a spike at one node is never averaged away.
        let columns = frame.width.ceil() as usize;
        let mut tallest: Vec<Option<f64>> = vec![None; columns];
        for (index, (_, v)) in bars.iter().enumerate() {
            let column = ((index as f64 * bar_width) as usize).min(columns - 1);
            let v = value(*v);
            let slot = &mut tallest[column];
            *slot = Some(match *slot {
                Some(old) if old.abs() >= v.abs() => old,
                _ => v,
            });
        }
        let mut path = format!("M{},{}", num(frame.left), num(base));
        let mut last = 0.0;
        for (column, v) in tallest.iter().enumerate() {
            let v = v.unwrap_or(last);
            last = v;
            let y = num(frame.y(&y_axis, v));
            let x0 = frame.left + column as f64;
            let x1 = (x0 + 1.0).min(frame.left + frame.width);
            path.push_str(&format!(" L{},{y} L{},{y}", num(x0), num(x1)));
        }
        path.push_str(&format!(
            " L{},{} Z",
            num(frame.left + frame.width),
            num(base)
        ));
        svg.line(&format!(
            "<path d=\"{path}\" fill=\"{fill}\" stroke=\"{fill}\" stroke-width=\"0.5\"/>"
        ));
    }

    // x tick labels: every bar when few, else bars at round positions.
    if count > 0 && count <= BARS_LABELLED_MAX {
        let longest = bars
            .iter()
            .map(|(l, _)| l.chars().count())
            .max()
            .unwrap_or(0);
        let rotate = longest as f64 * CHAR_WIDTH > bar_width * 0.85;
        for (index, (label, _)) in bars.iter().enumerate() {
            let x = frame.left + (index as f64 + 0.5) * bar_width;
            let y = frame.top + frame.height + 16.0;
            if rotate {
                svg.text(
                    x,
                    y,
                    "end",
                    &format!(" transform=\"rotate(-40 {} {})\"", num(x), num(y)),
                    label,
                );
            } else {
                svg.text(x, y, "middle", "", label);
            }
        }
    } else if count > 0 {
        for tick in nice_ticks(0.0, (count - 1) as f64) {
            let index = tick as usize;
            let x = frame.left + (index as f64 + 0.5) * bar_width;
            let y = frame.top + frame.height;
            svg.line(&format!(
                "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>",
                num(x),
                num(y),
                num(x),
                num(y + 5.0)
            ));
            let label = match bars.get(index) {
                Some((l, _)) if !l.is_empty() => l.clone(),
                _ => index.to_string(),
            };
            svg.text(x, y + 18.0, "middle", "", &label);
        }
    }
    frame.draw_x_axis_line(&mut svg);

    if let Some((v, label)) = reference {
        let y = frame.y(&y_axis, v);
        svg.open_group("reference line");
        svg.line(&format!(
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#d62728\" \
             stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>",
            num(frame.left),
            num(y),
            num(frame.left + frame.width),
            num(y)
        ));
        svg.text(
            frame.left + frame.width - 4.0,
            y - 5.0,
            "end",
            " fill=\"#d62728\"",
            label,
        );
        svg.close_group();
    }
    svg.finish()
}

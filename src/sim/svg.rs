//! Plain SVG plots of simulation results, for `--plot`: line charts (the
//! latency CDFs of Fig. 6), bar charts (the per-node put load of Fig. 8) and
//! maps of nodes coloured by cluster (Fig. 7).
//!
//! Each function returns the whole document as a `String`; writing it out
//! is the caller's business. No dependencies, no I/O, and the output is a
//! pure function of the input (iteration is over slices and ordered maps
//! only), so plots can be compared byte for byte. Text is XML-escaped;
//! non-finite values, and negative ones on a log scale, are skipped; zeros
//! on a log scale sit on a floor one decade below the data, labelled 0 (a
//! series that falls to zero, as Fig. 4's origin load does, stays drawn to
//! its end instead of seeming to stop).

use std::collections::BTreeMap;

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

/// Width of a chart's plot area, in pixels.
const PLOT_WIDTH: f64 = 640.0;
/// Height of a chart's plot area, in pixels.
const PLOT_HEIGHT: f64 = 380.0;
/// Space left of the plot area, for the y tick labels and axis label.
const MARGIN_LEFT: f64 = 80.0;
/// Space right of the plot area when there is no legend.
const MARGIN_RIGHT: f64 = 30.0;
/// Space above the plot area, for the title.
const MARGIN_TOP: f64 = 50.0;
/// Space below the plot area, for the x tick labels and axis label.
const MARGIN_BOTTOM: f64 = 70.0;
/// Roughly how wide one character of 12 px sans-serif text is.
const CHAR_WIDTH: f64 = 7.0;
/// The widest a legend may be.
const LEGEND_WIDTH_MAX: f64 = 300.0;
/// About how many ticks an axis gets.
const TICKS_TARGET: usize = 6;
/// Bars narrower than this (in pixels) are drawn as one filled outline.
const BAR_WIDTH_MIN: f64 = 2.0;
/// Bar charts with at most this many bars label every bar.
const BARS_LABELLED_MAX: usize = 40;
/// Series with at most this many points also mark each point.
const MARKED_POINTS_MAX: usize = 40;
/// Width of a map's drawing, in pixels.
const MAP_WIDTH: f64 = 760.0;
/// The widest a map may be, legend included (a typical screen or page).
const MAP_TOTAL_WIDTH_MAX: f64 = 1000.0;

/// Coarse coastlines (longitude, latitude), a few dozen points per land
/// mass: enough to tell the continents apart behind the nodes, not a survey.
const LAND: &[&[(f64, f64)]] = &[
    // North and Central America.
    &[
        (-168.0, 66.0),
        (-162.0, 70.0),
        (-140.0, 70.0),
        (-125.0, 70.0),
        (-95.0, 72.0),
        (-80.0, 73.0),
        (-62.0, 60.0),
        (-56.0, 52.0),
        (-66.0, 45.0),
        (-70.0, 41.0),
        (-76.0, 35.0),
        (-81.0, 31.0),
        (-80.0, 25.0),
        (-82.0, 27.0),
        (-84.0, 30.0),
        (-90.0, 29.0),
        (-97.0, 27.0),
        (-97.0, 21.0),
        (-92.0, 18.0),
        (-87.0, 21.0),
        (-88.0, 16.0),
        (-83.0, 10.0),
        (-78.0, 8.0),
        (-85.0, 11.0),
        (-92.0, 15.0),
        (-105.0, 20.0),
        (-110.0, 23.0),
        (-117.0, 32.0),
        (-121.0, 35.0),
        (-124.0, 40.0),
        (-124.0, 48.0),
        (-130.0, 55.0),
        (-140.0, 60.0),
        (-150.0, 61.0),
        (-158.0, 57.0),
        (-165.0, 62.0),
    ],
    // South America.
    &[
        (-78.0, 8.0),
        (-72.0, 12.0),
        (-62.0, 10.0),
        (-50.0, 0.0),
        (-35.0, -5.0),
        (-39.0, -15.0),
        (-48.0, -26.0),
        (-58.0, -35.0),
        (-65.0, -42.0),
        (-68.0, -52.0),
        (-72.0, -50.0),
        (-74.0, -40.0),
        (-71.0, -30.0),
        (-70.0, -18.0),
        (-76.0, -14.0),
        (-81.0, -5.0),
        (-80.0, 1.0),
    ],
    // Greenland.
    &[
        (-45.0, 60.0),
        (-20.0, 70.0),
        (-20.0, 80.0),
        (-60.0, 80.0),
        (-60.0, 76.0),
        (-53.0, 68.0),
    ],
    // Europe and Asia.
    &[
        (-10.0, 36.0),
        (-9.0, 43.0),
        (-2.0, 44.0),
        (-4.0, 48.0),
        (2.0, 51.0),
        (5.0, 53.0),
        (8.0, 57.0),
        (5.0, 62.0),
        (14.0, 68.0),
        (25.0, 71.0),
        (40.0, 67.0),
        (60.0, 70.0),
        (80.0, 73.0),
        (105.0, 78.0),
        (140.0, 72.0),
        (180.0, 68.0),
        (180.0, 65.0),
        (170.0, 60.0),
        (160.0, 58.0),
        (156.0, 51.0),
        (143.0, 59.0),
        (135.0, 55.0),
        (140.0, 48.0),
        (131.0, 43.0),
        (129.0, 35.0),
        (122.0, 31.0),
        (121.0, 25.0),
        (110.0, 20.0),
        (106.0, 10.0),
        (100.0, 13.0),
        (103.0, 1.0),
        (98.0, 8.0),
        (92.0, 20.0),
        (80.0, 15.0),
        (77.0, 8.0),
        (73.0, 19.0),
        (67.0, 25.0),
        (57.0, 25.0),
        (50.0, 30.0),
        (48.0, 29.0),
        (56.0, 24.0),
        (58.0, 21.0),
        (52.0, 16.0),
        (43.0, 13.0),
        (39.0, 21.0),
        (33.0, 29.0),
        (35.0, 32.0),
        (36.0, 36.0),
        (27.0, 37.0),
        (23.0, 38.0),
        (20.0, 40.0),
        (19.0, 42.0),
        (16.0, 38.0),
        (12.0, 42.0),
        (9.0, 44.0),
        (3.0, 43.0),
        (0.0, 39.0),
        (-5.0, 36.0),
    ],
    // Africa.
    &[
        (-17.0, 21.0),
        (-10.0, 30.0),
        (-6.0, 36.0),
        (10.0, 37.0),
        (20.0, 31.0),
        (32.0, 31.0),
        (34.0, 28.0),
        (43.0, 12.0),
        (51.0, 12.0),
        (40.0, -5.0),
        (40.0, -15.0),
        (35.0, -25.0),
        (27.0, -34.0),
        (18.0, -34.0),
        (12.0, -18.0),
        (13.0, -6.0),
        (9.0, 4.0),
        (-8.0, 4.0),
        (-17.0, 14.0),
    ],
    // Great Britain and Ireland.
    &[
        (-5.0, 50.0),
        (1.0, 51.0),
        (0.0, 54.0),
        (-3.0, 59.0),
        (-6.0, 57.0),
        (-10.0, 54.0),
        (-6.0, 52.0),
    ],
    // Japan.
    &[
        (130.0, 31.0),
        (140.0, 35.0),
        (142.0, 40.0),
        (141.0, 45.0),
        (140.0, 41.0),
        (135.0, 34.0),
    ],
    // Australia.
    &[
        (114.0, -22.0),
        (122.0, -18.0),
        (130.0, -12.0),
        (137.0, -12.0),
        (142.0, -11.0),
        (146.0, -19.0),
        (153.0, -26.0),
        (150.0, -37.0),
        (141.0, -38.0),
        (132.0, -32.0),
        (115.0, -34.0),
    ],
];
/// A map legend lists at most this many groups.
const MAP_LEGEND_GROUPS_MAX: usize = 30;

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

/// A world map (equirectangular, latitudes 60°S to 80°N) of `points`, each
/// drawn in its group's colour with its group's letter, as the paper's
/// Fig. 7 marks each node with its cluster. A faint latitude/longitude grid
/// stands in for coastlines.
pub fn world_map(title: &str, points: &[MapPoint]) -> String {
    map(
        title,
        points,
        &MapBounds {
            lon_min: -180.0,
            lon_max: 180.0,
            lat_min: -60.0,
            lat_max: 80.0,
            grid_deg: 30.0,
            standard_parallel: 0.0,
        },
    )
}

/// Like [`world_map`], zoomed to the continental US (longitude −125 to −66,
/// latitude 24 to 50); points outside it are counted in a note, not drawn.
pub fn us_map(title: &str, points: &[MapPoint]) -> String {
    map(
        title,
        points,
        &MapBounds {
            lon_min: -125.0,
            lon_max: -66.0,
            lat_min: 24.0,
            lat_max: 50.0,
            grid_deg: 5.0,
            standard_parallel: 37.0,
        },
    )
}

/// The part of the globe a map shows.
struct MapBounds {
    lon_min: f64,
    lon_max: f64,
    lat_min: f64,
    lat_max: f64,
    /// Spacing of the latitude/longitude grid, in degrees.
    grid_deg: f64,
    /// The equirectangular projection's true-scale latitude.
    standard_parallel: f64,
}

fn map(title: &str, points: &[MapPoint], b: &MapBounds) -> String {
    let mut groups: BTreeMap<u32, usize> = BTreeMap::new();
    for p in points {
        *groups.entry(p.group).or_insert(0) += 1;
    }
    let legend_width = if groups.is_empty() { 0.0 } else { 150.0 };
    let per_degree = MAP_WIDTH / ((b.lon_max - b.lon_min) * b.standard_parallel.to_radians().cos());
    let x_scale = per_degree * b.standard_parallel.to_radians().cos();
    let height = per_degree * (b.lat_max - b.lat_min);
    let (left, top) = (60.0, MARGIN_TOP);
    let total_width = left + MAP_WIDTH + 20.0 + legend_width;
    let total_height = top + height + 60.0;
    let x = |lon: f64| left + (lon - b.lon_min) * x_scale;
    let y = |lat: f64| top + (b.lat_max - lat) * per_degree;

    debug_assert!(total_width <= MAP_TOTAL_WIDTH_MAX);
    let mut svg = Svg::new(total_width, total_height, title);
    svg.line(&format!(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#eef4fa\" stroke=\"#999\"/>",
        num(left),
        num(top),
        num(MAP_WIDTH),
        num(height)
    ));
    // Land, clipped to the map.
    svg.line(&format!(
        "<clipPath id=\"map-area\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/></clipPath>",
        num(left),
        num(top),
        num(MAP_WIDTH),
        num(height)
    ));
    svg.line("<g class=\"land\" clip-path=\"url(#map-area)\">");
    for shape in LAND {
        let list: Vec<String> = shape
            .iter()
            .map(|&(lon, lat)| format!("{},{}", num(x(lon)), num(y(lat))))
            .collect();
        svg.line(&format!(
            "<polygon points=\"{}\" fill=\"#faf7f0\" stroke=\"#b8ad98\" stroke-width=\"0.8\"/>",
            list.join(" ")
        ));
    }
    svg.line("</g>");
    svg.open_group("grid");
    let mut lon = (b.lon_min / b.grid_deg).ceil() * b.grid_deg;
    while lon <= b.lon_max + 1e-9 {
        let px = x(lon);
        svg.line(&format!(
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#c8d4e0\" stroke-width=\"0.6\"/>",
            num(px),
            num(top),
            num(px),
            num(top + height)
        ));
        svg.text(
            px,
            top + height + 16.0,
            "middle",
            " fill=\"#666\"",
            &degrees(lon, 'E', 'W'),
        );
        lon += b.grid_deg;
    }
    let mut lat = (b.lat_min / b.grid_deg).ceil() * b.grid_deg;
    while lat <= b.lat_max + 1e-9 {
        let py = y(lat);
        svg.line(&format!(
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#c8d4e0\" stroke-width=\"0.6\"/>",
            num(left),
            num(py),
            num(left + MAP_WIDTH),
            num(py)
        ));
        svg.text(
            left - 6.0,
            py + 4.0,
            "end",
            " fill=\"#666\"",
            &degrees(lat, 'N', 'S'),
        );
        lat += b.grid_deg;
    }
    svg.close_group();

    let mut outside = 0usize;
    let mut centroids: BTreeMap<u32, (f64, f64, usize)> = BTreeMap::new();
    svg.open_group("nodes");
    for p in points {
        let inside = p.lat.is_finite()
            && p.lon.is_finite()
            && (b.lat_min..=b.lat_max).contains(&p.lat)
            && (b.lon_min..=b.lon_max).contains(&p.lon);
        if !inside {
            outside += 1;
            continue;
        }
        let (px, py) = (x(p.lon), y(p.lat));
        let c = colour(p.group as usize);
        svg.line(&format!(
            "<g><title>{} ({})</title><circle cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"{c}\" \
             stroke=\"white\" stroke-width=\"0.6\"/></g>",
            escape(&p.label),
            group_letter(p.group),
            num(px),
            num(py),
        ));
        let e = centroids.entry(p.group).or_insert((0.0, 0.0, 0));
        (e.0, e.1, e.2) = (e.0 + px, e.1 + py, e.2 + 1);
    }
    svg.close_group();
    // One letter per cluster, where its nodes are on average (a letter
    // beside every node overlapped wherever nodes are dense).
    svg.open_group("cluster labels");
    for (&group, &(sx, sy, n)) in &centroids {
        let (cx, cy) = (sx / n as f64, sy / n as f64);
        svg.line(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"{}\" font-size=\"13\" \
             font-weight=\"bold\" stroke=\"white\" stroke-width=\"3\" paint-order=\"stroke\">{}</text>",
            num(cx),
            num(cy - 6.0),
            colour(group as usize),
            group_letter(group)
        ));
    }
    svg.close_group();
    if points.is_empty() {
        svg.text(
            left + MAP_WIDTH / 2.0,
            top + height / 2.0,
            "middle",
            " fill=\"#999\"",
            "no data",
        );
    }
    if outside > 0 {
        let note = if outside == 1 {
            "1 point outside the map not shown".to_string()
        } else {
            format!("{outside} points outside the map not shown")
        };
        svg.text(left, top + height + 40.0, "start", " fill=\"#666\"", &note);
    }

    // Legend: one row per group, in group order.
    let legend_left = left + MAP_WIDTH + 20.0;
    for (row, (&group, &count)) in groups.iter().take(MAP_LEGEND_GROUPS_MAX).enumerate() {
        let ly = top + 12.0 + 18.0 * row as f64;
        svg.line(&format!(
            "<circle cx=\"{}\" cy=\"{}\" r=\"5\" fill=\"{}\"/>",
            num(legend_left + 5.0),
            num(ly - 4.0),
            colour(group as usize)
        ));
        let noun = if count == 1 { "node" } else { "nodes" };
        svg.text(
            legend_left + 16.0,
            ly,
            "start",
            "",
            &format!("{}: {count} {noun}", group_letter(group)),
        );
    }
    if groups.len() > MAP_LEGEND_GROUPS_MAX {
        let ly = top + 12.0 + 18.0 * MAP_LEGEND_GROUPS_MAX as f64;
        let more = groups.len() - MAP_LEGEND_GROUPS_MAX;
        svg.text(
            legend_left,
            ly,
            "start",
            " fill=\"#666\"",
            &format!("and {more} more groups"),
        );
    }
    svg.finish()
}

/// An SVG document under construction.
struct Svg {
    out: String,
}

impl Svg {
    /// Opens a document of the given size, white background and title.
    fn new(width: f64, height: f64, title: &str) -> Svg {
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
    fn line(&mut self, element: &str) {
        self.out.push_str(element);
        self.out.push('\n');
    }

    /// Appends escaped `text` at `(x, y)` with the given anchor and any
    /// extra attributes (each starting with a space).
    fn text(&mut self, x: f64, y: f64, anchor: &str, attributes: &str, text: &str) {
        self.line(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"{anchor}\"{attributes}>{}</text>",
            num(x),
            num(y),
            escape(text)
        ));
    }

    /// Opens a `<g>` group, noting what it holds (`what` must be escaped).
    fn open_group(&mut self, what: &str) {
        self.line(&format!("<g class=\"{what}\">"));
    }

    /// Closes the innermost group.
    fn close_group(&mut self) {
        self.line("</g>");
    }

    /// Closes the document.
    fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

/// One axis: its range, scale and tick positions (in data units).
struct Axis {
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
    fn linear(range: Option<(f64, f64)>) -> Axis {
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
    fn log(range: Option<(f64, f64)>) -> Axis {
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
    fn add_zero_floor(&mut self) {
        self.min /= 10.0;
        self.ticks.insert(0, self.min);
        self.zero_floor = true;
    }

    /// Where `v` falls along the axis, from 0 (min) to 1 (max).
    fn fraction(&self, v: f64) -> f64 {
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
    fn label(&self, v: f64) -> String {
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
struct Frame {
    left: f64,
    top: f64,
    width: f64,
    height: f64,
    total_width: f64,
    total_height: f64,
}

impl Frame {
    /// The standard chart layout, with room for a legend `legend_width`
    /// wide on the right.
    fn chart(legend_width: f64) -> Frame {
        Frame {
            left: MARGIN_LEFT,
            top: MARGIN_TOP,
            width: PLOT_WIDTH,
            height: PLOT_HEIGHT,
            total_width: MARGIN_LEFT + PLOT_WIDTH + MARGIN_RIGHT + legend_width,
            total_height: MARGIN_TOP + PLOT_HEIGHT + MARGIN_BOTTOM,
        }
    }

    fn x(&self, axis: &Axis, v: f64) -> f64 {
        self.left + axis.fraction(v) * self.width
    }

    fn y(&self, axis: &Axis, v: f64) -> f64 {
        self.top + (1.0 - axis.fraction(v)) * self.height
    }

    /// Both axes with ticks, grid lines and labels.
    fn draw_axes(&self, svg: &mut Svg, x_axis: &Axis, y_axis: &Axis, x_label: &str, y_label: &str) {
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
    fn draw_x_axis_line(&self, svg: &mut Svg) {
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
    fn draw_x_label(&self, svg: &mut Svg, x_label: &str) {
        svg.text(
            self.left + self.width / 2.0,
            self.top + self.height + 50.0,
            "middle",
            "",
            x_label,
        );
    }

    /// The y axis: line, ticks, grid lines, tick labels and rotated label.
    fn draw_y_axis(&self, svg: &mut Svg, y_axis: &Axis, y_label: &str) {
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
    fn no_data(&self, svg: &mut Svg) {
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
fn min_max(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// A round step (1, 2 or 5 times a power of ten) near `raw`.
fn nice_step(raw: f64) -> f64 {
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
fn nice_ticks(min: f64, max: f64) -> Vec<f64> {
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
fn format_tick(v: f64, step: f64) -> String {
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
fn format_value(v: f64) -> String {
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
fn num(v: f64) -> String {
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
fn degrees(v: f64, positive: char, negative: char) -> String {
    let whole = v.round() as i64;
    match whole {
        0 => "0°".to_string(),
        w if w > 0 => format!("{w}°{positive}"),
        w => format!("{}°{negative}", -w),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Balanced enough to open in a browser: one root, every group closed,
    /// no numbers that failed to print.
    fn assert_well_formed(svg: &str) {
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        assert!(svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<svg").count(), 1);
        assert_eq!(svg.matches("</svg>").count(), 1);
        assert_eq!(svg.matches("<g").count(), svg.matches("</g>").count());
        assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
        for bad in ["NaN", "inf"] {
            assert!(!svg.contains(bad), "contains {bad}");
        }
    }

    fn cdf(label: &str, scale: f64) -> Series {
        Series {
            label: label.to_string(),
            points: (1..=1000)
                .map(|i| (i as f64 / 1000.0, scale * (1.0 + i as f64 / 50.0)))
                .collect(),
        }
    }

    #[test]
    fn fig_6_latency_cdf_on_a_log_scale() {
        let svg = line_chart(
            "Fig. 6: get latency",
            "fraction of requests",
            "latency (s)",
            &[cdf("Coral, 3 levels", 0.01), cdf("Coral, 1 level", 0.1)],
            true,
        );
        assert_well_formed(&svg);
        for text in [
            "Fig. 6: get latency",
            "fraction of requests",
            "latency (s)",
            "Coral, 3 levels",
            "Coral, 1 level",
        ] {
            assert!(svg.contains(text), "missing {text}");
        }
        assert_eq!(svg.matches("<polyline").count(), 2);
        // Decades from 0.01 s to 10 s are labelled.
        for tick in [">0.01<", ">0.1<", ">1<", ">10<"] {
            assert!(svg.contains(tick), "missing tick {tick}");
        }
        assert!(svg.contains("#1f77b4") && svg.contains("#ff7f0e"));
    }

    #[test]
    fn fig_4_log_scale_draws_zeros_on_a_floor_to_the_end_of_the_run() {
        // Origin requests per minute: a burst, then zero for the rest of a
        // 30-minute run. Every minute is drawn, the zeros on a floor
        // labelled 0 at the bottom of the plot area.
        let mut points = vec![(0.0, 12.0), (1.0, 3.0)];
        points.extend((2..30).map(|m| (f64::from(m), 0.0)));
        let s = Series {
            label: "origin".to_string(),
            points,
        };
        let svg = line_chart("fig 4", "minute", "requests", &[s], true);
        assert_well_formed(&svg);
        assert!(svg.contains(">0</text>"), "no 0 tick");
        let polyline = svg
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        let pts: Vec<(f64, f64)> = polyline
            .split(' ')
            .map(|p| {
                let (x, y) = p.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect();
        // The line reaches minute 29 (the right end), and its last points
        // are all on one floor, below the positive ones.
        let right = pts.iter().map(|p| p.0).fold(f64::MIN, f64::max);
        let first_x = pts[0].0;
        assert!(right - first_x > 100.0, "{pts:?}");
        let floor = pts.last().unwrap().1;
        assert!(pts.iter().all(|p| p.1 <= floor), "{pts:?}");
        assert!(pts[0].1 < floor && pts[1].1 < floor);
    }

    #[test]
    fn log_scale_skips_negative_values_and_floors_zero() {
        let s = Series {
            label: "mixed".to_string(),
            points: vec![
                (0.0, 0.0),
                (0.2, -1.0),
                (0.4, 0.5),
                (0.6, f64::NAN),
                (0.8, 2.0),
            ],
        };
        let svg = line_chart("t", "x", "y", &[s], true);
        assert_well_formed(&svg);
        // (0, 0) on the zero floor, 0.5 and 2: the negative and NaN skipped.
        assert_eq!(svg.matches("<circle").count(), 3);
    }

    #[test]
    fn line_chart_handles_empty_input() {
        for series in [
            vec![],
            vec![Series {
                label: "none".to_string(),
                points: vec![],
            }],
        ] {
            for log_y in [false, true] {
                let svg = line_chart("empty", "x", "y", &series, log_y);
                assert_well_formed(&svg);
                assert!(svg.contains("no data"));
            }
        }
        let flat = Series {
            label: "one".to_string(),
            points: vec![(3.0, 3.0)],
        };
        let svg = line_chart("one point", "x", "y", &[flat], false);
        assert_well_formed(&svg);
        assert_eq!(svg.matches("<circle").count(), 1);
    }

    #[test]
    fn labels_are_xml_escaped() {
        let s = Series {
            label: "a<b & \"c\"".to_string(),
            points: vec![(0.0, 1.0), (1.0, 2.0)],
        };
        let svg = line_chart("<title>", "x & y", "y's", &[s], false);
        assert_well_formed(&svg);
        assert!(svg.contains("a&lt;b &amp; &quot;c&quot;"));
        assert!(svg.contains("&lt;title&gt;"));
        assert!(svg.contains("x &amp; y"));
        assert!(svg.contains("y&apos;s"));
        assert!(!svg.contains("a<b"));
    }

    #[test]
    fn fig_8_bar_chart_with_few_bars_labels_each_with_the_bound() {
        let bars: Vec<(String, f64)> = (0..12)
            .map(|i| (format!("node {i}"), 100.0 / (i + 1) as f64))
            .collect();
        let svg = bar_chart(
            "Fig. 8: put load",
            "nodes by distance to key",
            "RPCs / minute",
            &bars,
            Some((48.0, "β·log n bound")),
        );
        assert_well_formed(&svg);
        assert_eq!(svg.matches("<rect x=").count(), 12);
        for text in [
            "node 0",
            "node 11",
            "β·log n bound",
            "RPCs / minute",
            "stroke-dasharray",
        ] {
            assert!(svg.contains(text), "missing {text}");
        }
    }

    #[test]
    fn fig_8_bar_chart_with_ten_thousand_bars_draws_one_outline() {
        let bars: Vec<(String, f64)> = (0..10_000)
            .map(|i| {
                (
                    i.to_string(),
                    if i == 0 { 300.0 } else { 12.0 + (i % 7) as f64 },
                )
            })
            .collect();
        let svg = bar_chart(
            "10,000 nodes",
            "node",
            "RPCs / minute",
            &bars,
            Some((60.0, "bound")),
        );
        assert_well_formed(&svg);
        assert_eq!(svg.matches("<path").count(), 1);
        assert!(!svg.contains("<rect x="));
        assert!(svg.len() < 100_000, "{} bytes", svg.len());
        // The spike at the closest node survives the per-pixel envelope:
        // the axis reaches 300.
        assert!(svg.contains(">300<"));
    }

    #[test]
    fn bar_chart_handles_empty_input_and_odd_values() {
        let svg = bar_chart("none", "x", "y", &[], None);
        assert_well_formed(&svg);
        assert!(svg.contains("no data"));
        let odd = vec![
            ("nan".to_string(), f64::NAN),
            ("neg".to_string(), -5.0),
            ("inf".to_string(), f64::INFINITY),
        ];
        let svg = bar_chart("odd", "x", "y", &odd, Some((f64::NAN, "ignored")));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(!svg.contains("NaN"));
        assert!(!svg.contains("ignored"));
    }

    fn fig_7_points() -> Vec<MapPoint> {
        vec![
            MapPoint {
                lat: 42.36,
                lon: -71.09,
                label: "MIT".to_string(),
                group: 0,
            },
            MapPoint {
                lat: 40.73,
                lon: -74.00,
                label: "NYU".to_string(),
                group: 0,
            },
            MapPoint {
                lat: 37.87,
                lon: -122.26,
                label: "Berkeley".to_string(),
                group: 1,
            },
            MapPoint {
                lat: 52.33,
                lon: 4.87,
                label: "Amsterdam".to_string(),
                group: 2,
            },
            MapPoint {
                lat: 22.34,
                lon: 114.26,
                label: "HK <HKUST>".to_string(),
                group: 30,
            },
        ]
    }

    #[test]
    fn fig_7_world_map_colours_and_letters_clusters() {
        let svg = world_map("Fig. 7: level-1 clusters", &fig_7_points());
        assert_well_formed(&svg);
        for text in [
            "MIT",
            "Berkeley",
            "Amsterdam",
            "HK &lt;HKUST&gt;",
            "A: 2 nodes",
            "B: 1 node",
            "C: 1 node",
            "AE: 1 node",
        ] {
            assert!(svg.contains(text), "missing {text}");
        }
        assert!(svg.contains("30°N") && svg.contains("90°W"));
        assert!(!svg.contains("outside the map"));
        // Coastlines behind the nodes, and everything within 1000 px.
        assert!(svg.matches("<polygon").count() >= 6);
        let width: f64 = svg
            .split("width=\"")
            .nth(1)
            .and_then(|w| w.split('"').next())
            .and_then(|w| w.parse().ok())
            .unwrap();
        assert!(width <= 1000.0, "{width}");
        // One letter per cluster, not one per node.
        assert_eq!(svg.matches(">A</text>").count(), 1);
    }

    #[test]
    fn us_map_leaves_out_points_beyond_the_continental_us() {
        let svg = us_map("level-2 clusters", &fig_7_points());
        assert_well_formed(&svg);
        assert!(svg.contains("Berkeley"));
        assert!(!svg.contains("Amsterdam"));
        assert!(svg.contains("2 points outside the map not shown"));
        let svg = us_map("empty", &[]);
        assert_well_formed(&svg);
        assert!(svg.contains("no data"));
    }

    #[test]
    fn output_is_deterministic() {
        let series = [cdf("a", 1.0), cdf("b", 2.0)];
        assert_eq!(
            line_chart("t", "x", "y", &series, false),
            line_chart("t", "x", "y", &series, false)
        );
        assert_eq!(
            world_map("m", &fig_7_points()),
            world_map("m", &fig_7_points())
        );
    }

    #[test]
    fn group_letters_run_a_to_z_then_aa() {
        assert_eq!(group_letter(0), "A");
        assert_eq!(group_letter(25), "Z");
        assert_eq!(group_letter(26), "AA");
        assert_eq!(group_letter(27), "AB");
        assert_eq!(group_letter(701), "ZZ");
        assert_eq!(group_letter(702), "AAA");
        assert_ne!(colour(3), colour(13));
    }

    #[test]
    fn tick_labels_are_round() {
        let labels: Vec<String> = nice_ticks(0.0, 1.0)
            .iter()
            .map(|&t| format_tick(t, 0.2))
            .collect();
        assert_eq!(
            labels,
            ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"].map(String::from)
        );
        let labels: Vec<String> = nice_ticks(0.0, 9999.0)
            .iter()
            .map(|&t| format_tick(t, 2000.0))
            .collect();
        assert_eq!(
            labels,
            ["0", "2000", "4000", "6000", "8000"].map(String::from)
        );
        assert_eq!(format_tick(-0.0, 1.0), "0");
        assert_eq!(format_value(0.01), "0.01");
        assert_eq!(format_value(300.0), "300");
        assert_eq!(num(-0.001), "0");
        assert_eq!(num(12.5), "12.5");
    }
}

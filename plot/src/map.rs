//! Maps of nodes coloured and lettered by cluster (Fig. 7).

use std::collections::BTreeMap;

use crate::draw::{degrees, num, Svg, MARGIN_TOP};
use crate::{colour, escape, group_letter, MapPoint};

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

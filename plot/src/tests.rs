//! The plots' rules: well-formed documents, the paper's figures, escaping,
//! round ticks and byte-for-byte determinism.

use super::*;
use crate::draw::{format_tick, format_value, nice_ticks, num};

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

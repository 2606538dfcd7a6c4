//! The demo's chart: requests per minute by source over time, in the style
//! of the simulator's Fig. 4 plot (`src/sim/svg.rs`). The y axis is
//! logarithmic as in the paper, but over 1 + y, so an interval in which a
//! source served nothing sits on the "0" line instead of vanishing.

use coral::sim::svg::{colour, escape};

const PLOT_WIDTH: f64 = 640.0;
const PLOT_HEIGHT: f64 = 380.0;
const MARGIN_LEFT: f64 = 80.0;
const MARGIN_RIGHT: f64 = 30.0;
const MARGIN_TOP: f64 = 50.0;
const MARGIN_BOTTOM: f64 = 70.0;
const LEGEND_WIDTH: f64 = 190.0;

/// One line: its label and its (minute, requests per minute) points.
pub struct Line {
    /// Legend text.
    pub label: String,
    /// Points; y may be zero.
    pub points: Vec<(f64, f64)>,
}

fn num(v: f64) -> String {
    let r = (v * 10.0).round() / 10.0;
    if r == r.trunc() {
        format!("{}", r as i64)
    } else {
        format!("{r:.1}")
    }
}

/// The SVG document.
pub fn chart(title: &str, lines: &[Line]) -> String {
    let x_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold(1.0f64, f64::max);
    let y_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(1.0f64, f64::max);
    let decades = (1.0 + y_max).log10().ceil().max(1.0);
    let fy = |v: f64| (1.0 + v.max(0.0)).log10() / decades;
    let px = |x: f64| MARGIN_LEFT + x / x_max * PLOT_WIDTH;
    let py = |y: f64| MARGIN_TOP + (1.0 - fy(y)) * PLOT_HEIGHT;
    let width = MARGIN_LEFT + PLOT_WIDTH + MARGIN_RIGHT + LEGEND_WIDTH;
    let height = MARGIN_TOP + PLOT_HEIGHT + MARGIN_BOTTOM;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<title>{t}</title>\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{cx}\" y=\"28\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">{t}</text>\n",
        w = num(width),
        h = num(height),
        cx = num(width / 2.0),
        t = escape(title)
    );
    // y ticks: 0, then 1, 2, 5, 10, 20, 50 ... up to the top decade.
    s.push_str("<g class=\"y axis\">\n");
    let mut ticks = vec![0.0];
    for e in 0..decades as i32 {
        for m in [1.0, 2.0, 5.0] {
            let v = m * 10f64.powi(e);
            if fy(v) <= 1.0 {
                ticks.push(v);
            }
        }
    }
    let top = 10f64.powf(decades) - 1.0;
    ticks.push(top);
    for v in ticks {
        let y = py(v);
        s.push_str(&format!(
            "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#e4e4e4\"/>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
            num(MARGIN_LEFT),
            num(MARGIN_LEFT + PLOT_WIDTH),
            num(MARGIN_LEFT - 8.0),
            num(y + 4.0),
            num(v),
            y = num(y)
        ));
    }
    s.push_str(&format!(
        "<line x1=\"{l}\" y1=\"{t}\" x2=\"{l}\" y2=\"{b}\" stroke=\"#333\"/>\n\
         <text x=\"20\" y=\"{m}\" text-anchor=\"middle\" transform=\"rotate(-90 20 {m})\">\
         Requests / minute (log scale, 0 drawn)</text>\n</g>\n",
        l = num(MARGIN_LEFT),
        t = num(MARGIN_TOP),
        b = num(MARGIN_TOP + PLOT_HEIGHT),
        m = num(MARGIN_TOP + PLOT_HEIGHT / 2.0)
    ));
    // x ticks every whole minute, or every quarter minute for short runs.
    s.push_str("<g class=\"x axis\">\n");
    let step = if x_max <= 2.0 {
        0.25
    } else if x_max <= 10.0 {
        1.0
    } else {
        5.0
    };
    let bottom = MARGIN_TOP + PLOT_HEIGHT;
    let mut t = 0.0;
    while t <= x_max + 1e-9 {
        let x = px(t);
        s.push_str(&format!(
            "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\" stroke=\"#333\"/>\n\
             <text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
            num(bottom),
            num(bottom + 5.0),
            num(bottom + 18.0),
            if step < 1.0 {
                format!("{t:.2}")
            } else {
                num(t)
            },
            x = num(x)
        ));
        t += step;
    }
    s.push_str(&format!(
        "<line x1=\"{}\" y1=\"{b}\" x2=\"{}\" y2=\"{b}\" stroke=\"#333\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">Time (minutes)</text>\n</g>\n",
        num(MARGIN_LEFT),
        num(MARGIN_LEFT + PLOT_WIDTH),
        num(MARGIN_LEFT + PLOT_WIDTH / 2.0),
        num(bottom + 50.0),
        b = num(bottom)
    ));
    for (i, line) in lines.iter().enumerate() {
        let c = colour(i);
        let pts: Vec<String> = line
            .points
            .iter()
            .map(|&(x, y)| format!("{},{}", num(px(x)), num(py(y))))
            .collect();
        s.push_str(&format!("<g class=\"series {}\">\n", escape(&line.label)));
        if pts.len() > 1 {
            s.push_str(&format!(
                "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"1.8\" stroke-linejoin=\"round\" points=\"{}\"/>\n",
                pts.join(" ")
            ));
        }
        for &(x, y) in &line.points {
            s.push_str(&format!(
                "<circle cx=\"{}\" cy=\"{}\" r=\"2.5\" fill=\"{c}\"><title>{}: {} at {:.2} min</title></circle>\n",
                num(px(x)),
                num(py(y)),
                escape(&line.label),
                num(y),
                x
            ));
        }
        s.push_str("</g>\n");
        let ly = MARGIN_TOP + 10.0 + 20.0 * i as f64;
        let lx = MARGIN_LEFT + PLOT_WIDTH + 20.0;
        s.push_str(&format!(
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{c}\" stroke-width=\"3\"/>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"start\">{}</text>\n",
            num(lx),
            num(ly),
            num(lx + 22.0),
            num(ly),
            num(lx + 28.0),
            num(ly + 4.0),
            escape(&line.label)
        ));
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_stay_on_the_log_axis() {
        let svg = chart(
            "t",
            &[Line {
                label: "origin".into(),
                points: vec![(0.5, 12.0), (1.0, 0.0), (1.5, 0.0)],
            }],
        );
        // Three points drawn, two of them on the zero line at the bottom.
        assert_eq!(svg.matches("<circle").count(), 3);
        let zero_y = num(MARGIN_TOP + PLOT_HEIGHT);
        assert_eq!(svg.matches(&format!("cy=\"{zero_y}\"")).count(), 2);
        assert!(svg.contains(">0</text>"));
    }
}

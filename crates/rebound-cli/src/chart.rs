//! `rebound chart`: SVG and PNG charts from result JSON files.
//!
//! Text is laid out with a TrueType font found on the system (plotters'
//! `ab_glyph` backend, pure Rust; no fontconfig or freetype needed), for
//! both SVG and PNG.

use crate::common::BoxResult;
use clap::Args;
use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Args, Clone, Debug)]
pub struct ChartArgs {
    /// Result JSON files written by ycsb, tpcc, tatp, crash, compare or
    /// recovery-timeline.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Output directory for the charts.
    #[arg(long, default_value = "charts")]
    pub out: PathBuf,
    /// Write SVG only.
    #[arg(long)]
    pub svg_only: bool,
    /// A TrueType font for the text (default: searched under /usr/share/fonts).
    #[arg(long)]
    pub font: Option<PathBuf>,
}

const FONT: &str = "sans-serif";
const SIZE: (u32, u32) = (960, 540);

/// Finds and registers a font; returns its path.
fn register_font(explicit: Option<&Path>) -> BoxResult<PathBuf> {
    let mut candidates: Vec<PathBuf> = explicit.map(Path::to_path_buf).into_iter().collect();
    for p in [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
        "/Library/Fonts/Arial.ttf",
    ] {
        candidates.push(p.into());
    }
    if explicit.is_none() {
        candidates.extend(find_ttf(Path::new("/usr/share/fonts"), 4));
    }
    for path in candidates {
        if let Ok(bytes) = std::fs::read(&path) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font(FONT, FontStyle::Normal, bytes).is_ok() {
                return Ok(path);
            }
        }
    }
    Err("no TrueType font found (install fonts-dejavu-core or pass --font FILE.ttf)".into())
}

fn find_ttf(dir: &Path, depth: u32) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() && depth > 0 {
            out.extend(find_ttf(&p, depth - 1));
        } else if p.extension().is_some_and(|x| x.eq_ignore_ascii_case("ttf")) {
            out.push(p);
        }
    }
    out
}

type DrawResult = Result<(), String>;

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("{e:?}")
}

/// A throughput-over-time line with optional crash markers.
struct Timeline {
    title: String,
    points: Vec<(f64, f64)>,
    kill: Option<f64>,
    recovered: Option<f64>,
    indexes: Option<f64>,
    note: Option<String>,
}

fn draw_timeline<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, tl: &Timeline) -> DrawResult {
    root.fill(&WHITE).map_err(err)?;
    let xmax = tl.points.iter().map(|p| p.0).fold(0.1, f64::max);
    let ymax = tl.points.iter().map(|p| p.1).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(&tl.title, (FONT, 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..xmax * 1.02, 0f64..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("committed txn/s (per 100 ms)")
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .y_label_formatter(&|v| rate_label(*v))
        .draw()
        .map_err(err)?;
    if let (Some(k), Some(r)) = (tl.kill, tl.recovered) {
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(k, 0.0), (r.max(k + xmax * 0.002), ymax)],
                RGBColor(255, 200, 200).filled(),
            )))
            .map_err(err)?
            .label(format!(
                "down: SIGKILL to open returned ({:.0} ms)",
                (r - k) * 1e3
            ))
            .legend(|(x, y)| {
                Rectangle::new(
                    [(x, y - 5), (x + 15, y + 5)],
                    RGBColor(255, 200, 200).filled(),
                )
            });
    }
    chart
        .draw_series(LineSeries::new(
            tl.points.iter().copied(),
            BLUE.stroke_width(2),
        ))
        .map_err(err)?
        .label("throughput")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], BLUE.stroke_width(2)));
    let markers = [
        (tl.kill, "SIGKILL", RED, 0.97),
        (tl.recovered, "open returned", GREEN, 0.91),
        (tl.indexes, "indexes in DRAM", MAGENTA, 0.85),
    ];
    for (at, what, color, height) in markers {
        if let Some(x) = at {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x, 0.0), (x, ymax)],
                    color.stroke_width(1),
                )))
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    what.to_owned(),
                    (x, ymax * height),
                    (FONT, 14).into_font().color(&color),
                )))
                .map_err(err)?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font((FONT, 14))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(err)?;
    if let Some(note) = &tl.note {
        root.draw(&Text::new(
            note.clone(),
            (100, SIZE.1 as i32 - 18),
            (FONT, 13).into_font().color(&BLACK.mix(0.7)),
        ))
        .map_err(err)?;
    }
    root.present().map_err(err)
}

/// Several lines over one time axis (one per contender), with labelled
/// horizontal reference levels.
pub struct Lines {
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    /// (legend label, points).
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    /// (label, level) drawn dashed across the chart.
    pub references: Vec<(String, f64)>,
    pub note: Option<String>,
}

/// Distinct line colours, in series order.
const LINE_COLORS: [RGBColor; 6] = [
    RGBColor(200, 40, 40),
    RGBColor(40, 90, 200),
    RGBColor(30, 150, 60),
    RGBColor(200, 130, 20),
    RGBColor(130, 60, 170),
    RGBColor(90, 90, 90),
];

fn draw_lines<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, l: &Lines) -> DrawResult {
    root.fill(&WHITE).map_err(err)?;
    let points = || l.series.iter().flat_map(|(_, p)| p.iter());
    let xmax = points().map(|p| p.0).fold(0.1, f64::max);
    let ymax = points()
        .map(|p| p.1)
        .chain(l.references.iter().map(|r| r.1))
        .fold(1.0, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(&l.title, (FONT, 20))
        .margin(15)
        .margin_bottom(30)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..xmax * 1.02, 0f64..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(&l.x_desc)
        .y_desc(&l.y_desc)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .y_label_formatter(&|v| rate_label(*v))
        .draw()
        .map_err(err)?;
    for (label, level) in &l.references {
        let dashes = DashedLineSeries::new(
            [(0.0, *level), (xmax * 1.02, *level)],
            6,
            4,
            BLACK.mix(0.5).stroke_width(1),
        );
        chart.draw_series(dashes).map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                label.clone(),
                (xmax * 0.8, *level + ymax * 0.01),
                (FONT, 13).into_font().color(&BLACK.mix(0.7)),
            )))
            .map_err(err)?;
    }
    for (i, (label, pts)) in l.series.iter().enumerate() {
        let color = LINE_COLORS[i % LINE_COLORS.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(err)?
            .label(label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 15, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font((FONT, 14))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(err)?;
    if let Some(note) = &l.note {
        root.draw(&Text::new(
            note.clone(),
            (100, SIZE.1 as i32 - 20),
            (FONT, 13).into_font().color(&BLACK.mix(0.7)),
        ))
        .map_err(err)?;
    }
    root.present().map_err(err)
}

/// Draws `lines` as `base.svg` with a system font; returns the path.
pub fn render_lines(lines: &Lines, base: &Path) -> BoxResult<PathBuf> {
    register_font(None)?;
    let svg = render(&Chart::Lines(lines), base, true)?;
    svg.into_iter()
        .next()
        .ok_or_else(|| "no chart written".into())
}

/// One stacked bar per crash run: recovery time by phase.
struct Phases {
    title: String,
    bars: Vec<(String, Vec<f64>)>,
}

const PHASES: [&str; 4] = ["metadata", "undo_redo", "index_build", "other"];

fn draw_phases<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, ph: &Phases) -> DrawResult {
    root.fill(&WHITE).map_err(err)?;
    let n = ph.bars.len();
    let ymax = ph
        .bars
        .iter()
        .map(|(_, v)| v.iter().sum::<f64>())
        .fold(0.001, f64::max)
        * 1.25;
    let labels: Vec<String> = ph.bars.iter().map(|(l, _)| l.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(&ph.title, (FONT, 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n.max(2))
        .x_label_formatter(&|x| category_label(&labels, *x))
        .y_desc("recovery time (ms)")
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(err)?;
    let colors = [
        RGBColor(120, 120, 120),
        RGBColor(230, 120, 40),
        RGBColor(50, 110, 200),
        RGBColor(180, 180, 180),
    ];
    for (p, name) in PHASES.iter().enumerate() {
        let color = colors[p];
        let rects: Vec<_> = ph
            .bars
            .iter()
            .enumerate()
            .map(|(i, (_, v))| {
                let base: f64 = v[..p].iter().sum();
                let x = i as f64;
                Rectangle::new([(x - 0.3, base), (x + 0.3, base + v[p])], color.filled())
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
    }
    for (i, (_, v)) in ph.bars.iter().enumerate() {
        let total: f64 = v.iter().sum();
        chart
            .draw_series(std::iter::once(Text::new(
                format!("{total:.1} ms"),
                (i as f64 - 0.12, total + ymax * 0.02),
                (FONT, 14).into_font(),
            )))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font((FONT, 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// A throughput axis label: thousands only where they are whole enough
/// to tell ticks apart.
fn rate_label(v: f64) -> String {
    if v.abs() >= 10_000.0 {
        format!("{:.0}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// The label of the bar at integer position `x` of a bar chart, if any.
fn category_label(labels: &[String], x: f64) -> String {
    let i = x.round();
    if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
        labels[i as usize].clone()
    } else {
        String::new()
    }
}

/// Bars of throughput per design (compare results).
fn draw_designs<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, ph: &Phases) -> DrawResult {
    root.fill(&WHITE).map_err(err)?;
    let n = ph.bars.len();
    let ymax = ph.bars.iter().map(|(_, v)| v[0]).fold(1.0, f64::max) * 1.2;
    let labels: Vec<String> = ph.bars.iter().map(|(l, _)| l.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(&ph.title, (FONT, 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n.max(2))
        .x_label_formatter(&|x| category_label(&labels, *x))
        .y_desc("committed txn/s")
        .y_label_formatter(&|v| rate_label(*v))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(ph.bars.iter().enumerate().map(|(i, (_, v))| {
            let x = i as f64;
            Rectangle::new([(x - 0.3, 0.0), (x + 0.3, v[0])], BLUE.mix(0.7).filled())
        }))
        .map_err(err)?;
    for (i, (_, v)) in ph.bars.iter().enumerate() {
        chart
            .draw_series(std::iter::once(Text::new(
                format!("{:.0} ({:.2}x)", v[0], v[1]),
                (i as f64 - 0.2, v[0] + ymax * 0.02),
                (FONT, 14).into_font(),
            )))
            .map_err(err)?;
    }
    root.present().map_err(err)
}

enum Chart<'a> {
    Timeline(Timeline),
    Phases(Phases),
    Designs(Phases),
    Lines(&'a Lines),
}

/// Renders one chart as `base.svg` (and `base.png`); returns the paths.
fn render(chart: &Chart<'_>, base: &Path, svg_only: bool) -> BoxResult<Vec<PathBuf>> {
    let svg = base.with_extension("svg");
    let png = base.with_extension("png");
    let draw = |which: bool| -> DrawResult {
        macro_rules! with_backend {
            ($root:expr) => {
                match chart {
                    Chart::Timeline(t) => draw_timeline($root, t),
                    Chart::Phases(p) => draw_phases($root, p),
                    Chart::Designs(p) => draw_designs($root, p),
                    Chart::Lines(l) => draw_lines($root, l),
                }
            };
        }
        if which {
            with_backend!(SVGBackend::new(&svg, SIZE).into_drawing_area())
        } else {
            with_backend!(BitMapBackend::new(&png, SIZE).into_drawing_area())
        }
    };
    draw(true)?;
    let mut out = vec![svg.clone()];
    if !svg_only {
        draw(false)?;
        out.push(png);
    }
    Ok(out)
}

fn f(v: &Value, path: &[&str]) -> Option<f64> {
    let mut v = v;
    for p in path {
        v = v.get(p)?;
    }
    v.as_f64()
}

/// A recovery phase in milliseconds: the engine's duration
/// (`{secs, nanos}`), or the `<phase>_ms` number of older result files.
fn phase_ms(recovery: &Value, phase: &str) -> f64 {
    let engine = f(recovery, &[phase, "secs"])
        .zip(f(recovery, &[phase, "nanos"]))
        .map(|(secs, nanos)| secs * 1e3 + nanos / 1e6);
    engine
        .or_else(|| f(recovery, &[&format!("{phase}_ms")]))
        .unwrap_or(0.0)
}

fn s(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A compare bar's label: the contender and, where recorded, the class
/// of guarantee its commits give.
fn bar_label(d: &Value) -> String {
    match d["guarantee"].as_str() {
        Some(g) => format!("{} [{g}]", s(d, "design")),
        None => s(d, "design"),
    }
}

fn series_points(series: &Value) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = series
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| Some((f(s, &["t_s"])?, f(s, &["txn_per_s"])?)))
                .collect()
        })
        .unwrap_or_default();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts
}

pub fn run(args: ChartArgs) -> BoxResult<()> {
    let font = register_font(args.font.as_deref())?;
    std::fs::create_dir_all(&args.out)?;
    let mut phases = Vec::new();
    let mut written = Vec::new();
    for file in &args.files {
        let v: Value = serde_json::from_slice(&std::fs::read(file)?)
            .map_err(|e| format!("{}: {e}", file.display()))?;
        let stem = file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("result")
            .to_owned();
        let design = v.get("design").map(|d| s(d, "design")).unwrap_or_default();
        match v.get("benchmark").and_then(Value::as_str) {
            Some("crash") => {
                let workload = s(&v, "workload");
                let tl = Timeline {
                    title: format!(
                        "{workload}, {design}: throughput across a SIGKILL and recovery"
                    ),
                    points: series_points(&v["series"]),
                    kill: f(&v, &["kill_t_s"]),
                    recovered: f(&v, &["recovered_t_s"]),
                    indexes: f(&v, &["indexes_loaded_t_s"]),
                    note: Some(format!(
                        "verification after recovery: {} ({:.1} s, left out of the time axis); samples every 100 ms",
                        if v["verification"].to_string().contains("\"ok\":true") { "passed" } else { "failed" },
                        f(&v, &["verification_s"]).unwrap_or(0.0)
                    )),
                };
                let base = args.out.join(format!("{stem}-throughput"));
                written.extend(render(&Chart::Timeline(tl), &base, args.svg_only)?);
                let r = &v["recovery"];
                let parts = [
                    phase_ms(r, "metadata"),
                    phase_ms(r, "undo_redo"),
                    phase_ms(r, "index_build"),
                ];
                let total = phase_ms(r, "total");
                let other = (total - parts.iter().sum::<f64>()).max(0.0);
                // Other engines report only their open (all of it "other").
                let class = v["design"]["guarantee_class"].as_str().unwrap_or("?");
                let label = match v["engine"].as_str() {
                    Some(engine) => format!("{engine} [{class}]"),
                    None => format!(
                        "{workload} ({} versions)",
                        f(r, &["versions_scanned"]).unwrap_or(0.0)
                    ),
                };
                phases.push((label, vec![parts[0], parts[1], parts[2], other]));
            }
            Some(bench @ ("ycsb" | "tpcc" | "tatp")) => {
                let workload = match bench {
                    "ycsb" => format!(
                        "ycsb-{}",
                        v["config"]["cfg"]["workload"]
                            .as_str()
                            .unwrap_or("?")
                            .to_lowercase()
                    ),
                    other => other.to_owned(),
                };
                let tl = Timeline {
                    title: format!("{workload}, {design}: throughput over time"),
                    points: series_points(&v["result"]["series"]),
                    kill: None,
                    recovered: None,
                    indexes: None,
                    note: None,
                };
                let base = args.out.join(format!("{stem}-throughput"));
                written.extend(render(&Chart::Timeline(tl), &base, args.svg_only)?);
            }
            Some("compare") => {
                let bars = v["summary"]
                    .as_array()
                    .map(|designs| {
                        designs
                            .iter()
                            .map(|d| {
                                (
                                    bar_label(d),
                                    vec![
                                        f(d, &["mean_txn_per_s"]).unwrap_or(0.0),
                                        f(d, &["median_ratio"])
                                            .or_else(|| f(d, &["median_ratio_to_none"]))
                                            .unwrap_or(f64::NAN),
                                    ],
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let ph = Phases {
                    title: format!(
                        "{}: throughput by {}, ratio to {}",
                        s(&v, "workload"),
                        if v["config"]["engines"]
                            .as_array()
                            .is_some_and(|e| !e.is_empty())
                        {
                            "engine"
                        } else {
                            "durability design"
                        },
                        v["baseline"].as_str().unwrap_or("none")
                    ),
                    bars,
                };
                let base = args.out.join(format!("{stem}-designs"));
                written.extend(render(&Chart::Designs(ph), &base, args.svg_only)?);
            }
            Some("recovery-timeline") => {
                let result: crate::timeline::TimelineResult =
                    serde_json::from_value(v).map_err(|e| format!("{}: {e}", file.display()))?;
                let base = args.out.join(format!("{stem}-timeline"));
                let lines = crate::timeline::lines(&result);
                written.extend(render(&Chart::Lines(&lines), &base, args.svg_only)?);
            }
            other => {
                return Err(format!("{}: unknown result kind {other:?}", file.display()).into())
            }
        }
    }
    if !phases.is_empty() {
        let ph = Phases {
            title: "Recovery time by phase".into(),
            bars: phases,
        };
        let base = args.out.join("recovery-phases");
        written.extend(render(&Chart::Phases(ph), &base, args.svg_only)?);
    }
    println!("font: {}", font.display());
    for w in written {
        println!("wrote {}", w.display());
    }
    Ok(())
}

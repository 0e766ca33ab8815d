//! The architecture, checked from the source: a layer only uses the
//! layers below it (the order `lib.rs` states), and the design is named
//! in one place only (`db/options.rs` turns options into a design
//! configuration, `design/mod.rs` opens it), so that a new design is a
//! folder under `design/` and an arm in each of those two places.

use std::path::{Path, PathBuf};

/// Bottom to top, as `lib.rs` lists them.
const LAYERS: &[&str] = &[
    "error",
    "parallel",
    "medium",
    "catalog",
    "heap",
    "index",
    "wal",
    "txn",
    "checkpoint",
    "gc",
    "adaptive",
    "design",
    "db",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a source file belongs to.
fn layer_of(path: &Path) -> String {
    let rel = path.strip_prefix(src()).unwrap();
    let first = rel.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_string()
}

/// The file's lines outside comments and outside `#[cfg(test)]` items
/// (test modules may reach anywhere).
fn code_lines(path: &Path) -> Vec<String> {
    let name = path.file_name().unwrap().to_string_lossy();
    if name == "tests.rs" || name.ends_with("fuzz_tests.rs") || name == "fuzz_support.rs" {
        return Vec::new();
    }
    let text = std::fs::read_to_string(path).unwrap();
    let (mut lines, mut depth, mut skip_below) = (Vec::new(), 0i64, None::<i64>);
    let mut cfg_test = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if skip_below.is_none() && trimmed.starts_with("#[cfg(test)]") {
            cfg_test = true;
            continue;
        }
        let opens = line.matches('{').count() as i64;
        let closes = line.matches('}').count() as i64;
        if cfg_test && skip_below.is_none() && !trimmed.starts_with("#[") {
            cfg_test = false;
            if opens > closes {
                skip_below = Some(depth);
            } else {
                depth += opens - closes;
                continue;
            }
        }
        depth += opens - closes;
        if let Some(level) = skip_below {
            if depth <= level {
                skip_below = None;
            }
            continue;
        }
        if !trimmed.starts_with("//") {
            lines.push(line.to_string());
        }
    }
    lines
}

fn all_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    files
}

#[test]
fn no_layer_uses_a_layer_above_it() {
    let mut up = Vec::new();
    for file in all_files() {
        let here = layer_of(&file);
        let Some(rank) = LAYERS.iter().position(|l| *l == here) else {
            continue;
        };
        for line in code_lines(&file) {
            for (at, _) in line.match_indices("crate::") {
                let rest = &line[at + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                let above = LAYERS.iter().position(|l| *l == name).filter(|&r| r > rank);
                if above.is_some() {
                    up.push(format!("{} uses crate::{name}", file.display()));
                }
            }
        }
    }
    assert!(
        up.is_empty(),
        "uses that run up the layers:\n{}",
        up.join("\n")
    );
}

#[test]
fn the_design_is_picked_in_one_place() {
    let allowed = ["db/options.rs", "design/mod.rs"];
    let mut found = Vec::new();
    for file in all_files() {
        let rel = file
            .strip_prefix(src())
            .unwrap()
            .to_string_lossy()
            .to_string();
        if allowed.contains(&rel.as_str()) {
            continue;
        }
        for line in code_lines(&file) {
            if line.contains("Durability::") || line.contains("DesignConfig::") {
                found.push(format!("{rel}: {}", line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the design is named outside db/options.rs and design/mod.rs:\n{}",
        found.join("\n")
    );
}

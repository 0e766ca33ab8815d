//! Builds the Python bindings (crates/rebound-py) with maturin and runs
//! their Python tests, when `python3` and `maturin` are installed; skipped
//! with a message otherwise, so CI needs no Python toolchain.

use std::path::{Path, PathBuf};
use std::process::Command;

fn available(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|out| out.status.success())
}

fn run(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{command:?} failed:\n{text}");
    text
}

fn the_wheel(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|ext| ext == "whl"))
        .expect("maturin wrote a wheel")
}

#[test]
fn python_bindings_build_and_pass_their_tests() {
    if !available("python3", &["--version"]) || !available("maturin", &["--version"]) {
        println!(
            "skipped: the Python binding tests need python3 and maturin (pip install maturin)"
        );
        return;
    }
    let bindings = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rebound-py");
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let wheels = scratch.path().join("wheels");
    // A target directory of its own: the one of this `cargo test` is locked.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rebound-py-target");
    run(Command::new("maturin")
        .args(["build", "--quiet", "--manifest-path"])
        .arg(bindings.join("Cargo.toml"))
        .arg("--out")
        .arg(&wheels)
        .env("CARGO_TARGET_DIR", &target));
    // A wheel is a zip archive; unpacked, its module imports as it is.
    let site = scratch.path().join("site");
    run(Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(the_wheel(&wheels))
        .arg(&site));
    let output = run(Command::new("python3")
        .arg(bindings.join("tests/test_bindings.py"))
        .env("PYTHONPATH", &site));
    println!("{output}");
    assert!(output.contains(" passed, 0 failed"), "{output}");
}

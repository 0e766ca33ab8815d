//! Builds the Python bindings (crates/rebound-py) with maturin and runs
//! their Python tests.
//!
//! The interpreter is `$REBOUND_PYTHON` (a virtual environment with
//! maturin; `.ci/run` makes one), else `python3` from `PATH` with a
//! `maturin` there too. Without them the test is skipped with a message
//! on stderr, except under `CI=true`, where that is a failure: CI must not
//! pass without running the Python tests.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How to run Python and maturin.
struct Toolchain {
    python: PathBuf,
    /// maturin as a program of its own, or `python -m maturin` if None.
    maturin: Option<PathBuf>,
}

impl Toolchain {
    fn maturin(&self) -> Command {
        match &self.maturin {
            Some(maturin) => Command::new(maturin),
            None => {
                let mut command = Command::new(&self.python);
                command.args(["-m", "maturin"]);
                command
            }
        }
    }
}

fn works(command: &mut Command) -> bool {
    command.output().is_ok_and(|out| out.status.success())
}

/// The toolchain, or why there is none.
fn find_toolchain() -> Result<Toolchain, String> {
    if let Some(python) = std::env::var_os("REBOUND_PYTHON") {
        let toolchain = Toolchain {
            python: PathBuf::from(python),
            maturin: None,
        };
        return match works(toolchain.maturin().arg("--version")) {
            true => Ok(toolchain),
            false => Err(format!(
                "REBOUND_PYTHON={} cannot run `-m maturin --version`",
                toolchain.python.display()
            )),
        };
    }
    let toolchain = Toolchain {
        python: "python3".into(),
        maturin: Some("maturin".into()),
    };
    match works(Command::new("python3").arg("--version"))
        && works(toolchain.maturin().arg("--version"))
    {
        true => Ok(toolchain),
        false => Err(
            "python3 and maturin are not both on PATH, and REBOUND_PYTHON is not set \
             (.ci/run sets it to a virtual environment with maturin)"
                .into(),
        ),
    }
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
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
    let toolchain = match find_toolchain() {
        Ok(toolchain) => toolchain,
        Err(why) if in_ci() => panic!("CI=true, and the Python binding tests cannot run: {why}"),
        Err(why) => {
            // Straight to stderr: the test harness hides printed output
            // of passing tests, and a skip must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED python_bindings_build_and_pass_their_tests: {why}"
            );
            return;
        }
    };
    let bindings = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rebound-py");
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let wheels = scratch.path().join("wheels");
    // A target directory of its own: the one of this `cargo test` is locked.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rebound-py-target");
    run(toolchain
        .maturin()
        .args(["build", "--quiet", "--interpreter"])
        .arg(&toolchain.python)
        .arg("--manifest-path")
        .arg(bindings.join("Cargo.toml"))
        .arg("--out")
        .arg(&wheels)
        .env("CARGO_TARGET_DIR", &target));
    // A wheel is a zip archive; unpacked, its module imports as it is.
    let site = scratch.path().join("site");
    run(Command::new(&toolchain.python)
        .args(["-m", "zipfile", "-e"])
        .arg(the_wheel(&wheels))
        .arg(&site));
    let output = run(Command::new(&toolchain.python)
        .arg(bindings.join("tests/test_bindings.py"))
        .env("PYTHONPATH", &site));
    println!("{output}");
    assert!(output.contains(" passed, 0 failed"), "{output}");
}

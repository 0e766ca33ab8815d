//! `rebound`: demonstrations and measurements of the Rebound engine, built
//! only on its public API.

mod demo;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "rebound", version, about = "Rebound storage engine: demo and tools")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Load rows, run updates in a child process, kill it with SIGKILL,
    /// reopen, verify every acknowledged commit and print the recovery report.
    Demo(demo::DemoArgs),
    /// The child process of `demo` (not for direct use).
    #[command(hide = true)]
    DemoChild(demo::ChildArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Demo(demo::DemoArgs::default())) {
        Command::Demo(args) => demo::run(args),
        Command::DemoChild(args) => demo::child(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

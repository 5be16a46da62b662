//! `cargo run -p xtask -- <task>`: see `--help`.
use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "capd-rs project tasks (reports and plots of measured runs)")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Print the fault matrix as a Markdown table from the rows the fault tests wrote.
    FaultsTable {
        /// Directory of the rows (`tests/faults.rs` writes `$CARGO_TARGET_TMPDIR/faults`).
        dir: PathBuf,
        /// The goal for acting on a new object after a fault, in seconds: rows that miss it,
        /// or lost, duplicated or leaked anything, are named after the table (the tests hold
        /// each fault to its bound and fail on their own).
        #[arg(long, default_value_t = 5.0)]
        act_goal: f64,
    },
    /// Plot a soak's series (JSON from `tests/soak.rs`) into a PNG and say whether it stayed
    /// flat after warm-up.
    SoakPlot {
        json: PathBuf,
        png: PathBuf,
        /// A TrueType font for the labels.
        #[arg(
            long,
            default_value = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
        )]
        font: PathBuf,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse().task) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(task: Task) -> Result<bool, Box<dyn std::error::Error>> {
    match task {
        Task::FaultsTable { dir, act_goal } => {
            let rows =
                xtask::faults::read_rows(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            print!("{}", xtask::faults::table(&rows));
            let missed: Vec<_> = rows
                .iter()
                .filter(|r| !r.meets(act_goal))
                .map(|r| r.fault.as_str())
                .collect();
            if !missed.is_empty() {
                println!(
                    "\nGoals (acted on within {act_goal} s, Ready again, nothing lost, duplicated or leaked) missed by: {}",
                    missed.join(", ")
                );
            }
            Ok(!rows.is_empty())
        }
        Task::SoakPlot { json, png, font } => {
            let text =
                std::fs::read_to_string(&json).map_err(|e| format!("{}: {e}", json.display()))?;
            let report: xtask::soak::Report = serde_json::from_str(&text)?;
            xtask::soak::plot(&report, &png, &font)?;
            println!("wrote {}", png.display());
            let grew = report.growth();
            for g in &grew {
                eprintln!("grew after warm-up: {g}");
            }
            Ok(grew.is_empty())
        }
    }
}

//! The capd-rs manager binary: parse flags, set up logging, run. Everything else is in the library.
use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let flags = capd::manager::Flags::parse().resolve_env_fallbacks();
    capd::telemetry::init_logging(flags.log_format, &flags.log_level);
    match capd::manager::run(flags).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "manager failed");
            ExitCode::FAILURE
        }
    }
}

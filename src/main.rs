//! The capd-rs manager binary: parse flags, set up logging, run. Everything else is in the library.
use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    // Upstream CAPD's spelling rules first (pflag's `--leader_elect`), then clap's parse, which
    // exits with a message naming any flag neither we nor upstream have.
    let flags = capd::manager::Flags::parse_from(capd::manager::normalize(std::env::args_os()))
        .resolve_env_fallbacks();
    capd::telemetry::init_logging(flags.log_format, &flags.log_level());
    match capd::manager::run(flags).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The whole chain: the outermost message alone hides the cause.
            let mut chain = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                chain.push_str(": ");
                chain.push_str(&s.to_string());
                source = s.source();
            }
            tracing::error!(error = %chain, "manager failed");
            ExitCode::FAILURE
        }
    }
}

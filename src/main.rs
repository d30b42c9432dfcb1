//! The `deputy` binary: parse the command line, send logs to stderr, run.

// The future of `cli::run` nests every command's futures (serve → surfaces → service → actor);
// computing its layout goes deeper than the default limit of 128.
#![recursion_limit = "256"]

use std::process::ExitCode;

use clap::Parser;
use deputy::cli::{Cli, run};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // stdout belongs to the MCP transport (serve) or the answer (run): logs go to stderr only.
    let default_filter = cli.command.default_log_filter();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(false).with_env_filter(filter).init();
    run(cli).await
}

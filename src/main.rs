//! The `deputy` binary: parse the command line, send logs to stderr, run.

// The future of `cli::run` nests every command's futures (serve → surfaces → service → actor);
// computing its layout goes deeper than the default limit of 128.
#![recursion_limit = "256"]

use std::process::ExitCode;

use clap::Parser;
use deputy::cli::{Cli, run};
use deputy::telemetry::is_telemetry;
use deputy::telemetry::layer::MetricsLayer;
use deputy::telemetry::otlp::{self, OtlpLayer};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::prelude::*;

/// jemalloc on Linux, with the settings in `deputy::allocator`.
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: deputy::allocator::Jemalloc = deputy::allocator::Jemalloc;

fn main() -> ExitCode {
    // The sandbox launcher (`deputy sandbox-exec`, hidden): confine this process and exec the
    // program, before any thread, runtime or logger exists (see `deputy::sandbox`).
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|arg| arg == deputy::sandbox::LAUNCHER_SUBCOMMAND) {
        let failure = deputy::sandbox::exec(&args[2..]);
        eprintln!("deputy: {failure}");
        return ExitCode::from(deputy::sandbox::LAUNCHER_FAILED);
    }
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(run_cli()),
        Err(error) => {
            eprintln!("deputy: starting the async runtime: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run_cli() -> ExitCode {
    let cli = Cli::parse();
    // stdout belongs to the MCP transport (serve) or the answer (run): logs go to stderr only.
    let default_filter = cli.command.default_log_filter();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(false).with_filter(filter);
    // The metrics read off deputy's telemetry spans, whatever the log's filter keeps.
    let metrics = MetricsLayer.with_filter(filter_fn(is_telemetry));
    // The same spans to an OpenTelemetry collector, once the config asks (`telemetry::otlp`).
    let traces = OtlpLayer.with_filter(filter_fn(is_telemetry));
    tracing_subscriber::registry().with(traces).with(log).with(metrics).init();
    deputy::allocator::start();
    let code = run(cli).await;
    // The last spans leave before the process does (blocking: the batch thread sends them).
    if otlp::enabled() {
        let _ = tokio::task::spawn_blocking(otlp::flush).await;
    }
    code
}

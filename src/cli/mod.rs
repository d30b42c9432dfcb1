//! The command line: `deputy serve`, `run`, `turn`, `sessions …`, `call`, `schemas`, `background …`
//! (and the hidden `background-server`).
//!
//! It sits above [`crate::server`] (which `serve` calls) and beside the surfaces: like every
//! surface it only translates. Flags become service requests ([`commands`]), results become
//! stdout text and exit codes: 0 ok, 1 error with `CODE: message` on stderr, 2 when the turn ran
//! out of budget. The clap types are in [`args`].

mod agents;
pub mod args;
pub mod commands;
pub mod render;

use std::process::ExitCode;

pub use args::{
    AgentsCommand, BackgroundCommand, BackgroundServerArgs, Cli, Command, RunArgs, ServeArgs, SessionsCommand,
};

use crate::error::SessionError;
use crate::ids::MessageId;
use crate::server;
use crate::session::SendRequest;

/// Runs a parsed command line to completion.
pub async fn run(cli: Cli) -> ExitCode {
    let settings = cli.settings();
    let outcome = match cli.command {
        Command::Serve(args) => commands::serve(&settings, args).await,
        Command::Schemas { out } => commands::write_schemas(&out),
        Command::Agents(command) => {
            match crate::config::settings_profiles(&settings, &crate::config::Environment::from_process()) {
                Ok(profiles) => return agents::agents(&profiles, command),
                Err(err) => Err(err),
            }
        }
        Command::Background(command) => match commands::background(&settings, command) {
            Ok(code) => return code,
            Err(err) => Err(err),
        },
        Command::BackgroundServer(args) => match commands::background_server(&settings, args).await {
            Ok(code) => return code,
            Err(err) => Err(err),
        },
        // The commands that run on a service answer with their own exit status.
        Command::Run(args) => match server::live_service(&settings) {
            Ok(service) => return commands::run_prompt(&service, args).await,
            Err(err) => Err(err),
        },
        Command::Turn { session_id, prompt, structured } => {
            match server::stored_service(&settings, "resuming a session from the command line") {
                Ok(service) => return commands::turn(&service, session_id, prompt, structured).await,
                Err(err) => Err(err),
            }
        }
        Command::Send { session_id, message, in_reply_to, peer_group } => {
            match server::stored_service(&settings, "deputy send") {
                Ok(service) => {
                    let request = SendRequest {
                        body: message,
                        in_reply_to: in_reply_to.map(MessageId::from_string),
                        peer_group,
                        ..SendRequest::default()
                    };
                    return commands::send(&service, session_id, request).await;
                }
                Err(err) => Err(err),
            }
        }
        Command::Project { out, session } => match server::stored_service(&settings, "deputy project") {
            Ok(service) => commands::project(&service, &out, session).await,
            Err(err) => Err(err),
        },
        Command::Sessions(command) => match server::stored_service(&settings, "deputy sessions") {
            Ok(service) => return commands::sessions(&service, command).await,
            Err(err) => Err(err),
        },
        Command::Call { operation, arguments } => match server::stored_service(&settings, "deputy call") {
            Ok(service) => return commands::call(&service, &operation, &arguments).await,
            Err(err) => Err(err),
        },
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => report_failure(&err),
    }
}

/// Prints a failure; a [`SessionError`] inside keeps its code and exit status.
fn report_failure(err: &anyhow::Error) -> ExitCode {
    match err.downcast_ref::<SessionError>() {
        Some(error) => exit_with(error),
        None => {
            eprintln!("deputy: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// `CODE: message` on stderr (after the session id, when the error names one), and the exit
/// status of the error table.
fn exit_with(error: &SessionError) -> ExitCode {
    if let Some(id) = error.session_id() {
        eprintln!("session {id}");
    }
    eprintln!("{}: {error}", error.code());
    ExitCode::from(u8::try_from(error.code().exit_code()).unwrap_or(1))
}

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
mod memory;
pub mod owner;
pub mod render;

use std::process::ExitCode;

pub use args::{
    AgentsCommand, BackgroundCommand, BackgroundServerArgs, Cli, Command, DocumentsCommand, MemoryCommand, RunArgs,
    ServeArgs, SessionsCommand,
};

use crate::error::SessionError;
use crate::ids::MessageId;
use crate::ids::SessionId;
use crate::surfaces::operation::inbox::SessionSendParams;
use owner::Owner;

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
        Command::Ui => match commands::ui(&settings) {
            Ok(code) => return code,
            Err(err) => Err(err),
        },
        Command::Background(command) => match commands::background(&settings, command) {
            Ok(code) => return code,
            Err(err) => Err(err),
        },
        Command::BackgroundServer(args) => match commands::background_server(&settings, args).await {
            Ok(code) => return code,
            Err(err) => Err(err),
        },
        // The commands that run on a service answer with their own exit status; they run in
        // this process, or in the background server that owns the store.
        Command::Run(args) => match Owner::open(&settings, "deputy run", false) {
            Ok(owner) => return commands::run_prompt(&owner, args).await,
            Err(err) => Err(err),
        },
        Command::Turn { session_id, prompt, structured } => {
            match Owner::open(&settings, "resuming a session from the command line", true) {
                Ok(owner) => return commands::turn(&owner, session_id, prompt, structured).await,
                Err(err) => Err(err),
            }
        }
        Command::Send { session_id, message, in_reply_to, peer_group } => {
            match Owner::open(&settings, "deputy send", true) {
                Ok(owner) => {
                    let params = SessionSendParams {
                        session_id: SessionId::from_string(session_id),
                        message,
                        in_reply_to: in_reply_to.map(MessageId::from_string),
                        peer_group,
                        hops: None,
                        sender: None,
                    };
                    return commands::send(&owner, params).await;
                }
                Err(err) => Err(err),
            }
        }
        Command::Project { out, session } => match Owner::open(&settings, "deputy project", true) {
            Ok(owner) => commands::project(&owner, &out, session).await,
            Err(err) => Err(err),
        },
        Command::Sessions(command) => match Owner::open(&settings, "deputy sessions", true) {
            Ok(owner) => return commands::sessions(&owner, command).await,
            Err(err) => Err(err),
        },
        Command::Memory(command) => match Owner::open(&settings, "deputy memory", true) {
            Ok(owner) => return memory::memory(&owner, command).await,
            Err(err) => Err(err),
        },
        Command::Documents(command) => match Owner::open(&settings, "deputy documents", false) {
            Ok(owner) => return memory::documents(&owner, command).await,
            Err(err) => Err(err),
        },
        Command::Call { operation, arguments } => match Owner::open(&settings, "deputy call", true) {
            Ok(owner) => return commands::call(&owner, &operation, &arguments).await,
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

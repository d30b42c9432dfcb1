//! The subcommands' bodies. Each only translates: flags become a [`server`] call or
//! operations with their wire params ([`Owner`], here or in the store's background server),
//! results become stdout text and exit codes. Stdout carries nothing but the answer
//! (the MCP transport, for `serve`); everything else goes to stderr.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::args::{BackgroundCommand, BackgroundServerArgs, RunArgs, ServeArgs, SessionsCommand, StructuredArgs};
use super::exit_with;
use super::owner::{Following, Owner};
use super::render;
use crate::agent::AgentEvent;
use crate::background::{self, HostExit, HostOptions, StartOptions};
use crate::config::Settings;
use crate::error::SessionError;
use crate::ids::SessionId;
use crate::model::inbox::{Delivery, SendResult};
use crate::model::{
    ArchiveResult, Budget, CompactResult, ExportResult, RewindResult, SessionHistory, SessionList, SessionView,
    StopReason, ToolOutputResult,
};
use crate::server::{self, Surface};
use crate::session::{MAX_WAIT, RunResult, SessionService, TurnStatus};
use crate::surfaces::http::HttpFlags;
use crate::surfaces::operation::Operation;
use crate::surfaces::operation::history::History;
use crate::surfaces::operation::inbox::{self, Inbox};
use crate::surfaces::operation::journal::Journal;
use crate::surfaces::operation::sessions::{self, Sessions};
use crate::surfaces::operation::turns::Turns;
use crate::surfaces::schemas;

/// `deputy serve`: the flags choose the surface and the drain timeout; [`server::serve`] does
/// the rest. Over stdio with a store (and without `--no-daemon`), this process only relays to
/// the store's background server ([`background::serve_attached`]); a database store
/// has none: every process opens it directly.
pub async fn serve(settings: &Settings, args: ServeArgs) -> anyhow::Result<()> {
    let settings = &Settings {
        serves_http: args.http.is_some(),
        ..with_session_limits(settings, args.idle_unload_secs, args.max_live_sessions)
    };
    let attach = args.http.is_none()
        && !args.rpc
        && !args.no_daemon
        && !settings.ephemeral
        && !settings.opens_database()
        && cfg!(feature = "session-store");
    if attach {
        let options = StartOptions {
            idle_exit: Duration::from_secs(args.idle_exit_secs),
            drain_timeout: Duration::from_secs(args.drain_timeout_secs),
            idle_unload_secs: args.idle_unload_secs,
            max_live_sessions: args.max_live_sessions,
        };
        // Blocking I/O on plain threads (see `background::attach`); nothing else runs here.
        return tokio::task::block_in_place(|| background::serve_attached(settings, &options));
    }
    let surface = match args.http {
        Some(bind) => {
            let flags = HttpFlags {
                bind,
                token: args.token,
                allowed_hosts: args.allowed_hosts,
                allowed_origins: args.allowed_origins,
                max_body_bytes: args.max_body_bytes,
                max_connections: args.max_connections,
                header_read_timeout_secs: args.header_read_timeout_secs,
                max_mcp_sessions: args.max_mcp_sessions,
                max_mcp_sessions_per_subject: args.max_mcp_sessions_per_subject,
                max_requests_per_subject: args.max_requests_per_subject,
                max_follows_per_subject: args.max_follows_per_subject,
                max_follow_secs: args.max_follow_secs,
            };
            let background = !args.no_daemon && !settings.ephemeral && !settings.opens_database();
            if background && cfg!(feature = "session-store") {
                // A store a background server owns: that server listens in this one's place.
                let through = tokio::task::block_in_place(|| background::attach::listen_through(settings, &flags))?;
                if let Some(listening) = through {
                    return wait_listening(listening).await;
                }
                // Else this process owns the store, and serves its socket too.
                let drain = Duration::from_secs(args.drain_timeout_secs);
                return background::http_owner::serve(settings, flags.config(), drain).await;
            }
            Surface::Http(Box::new(flags.config()))
        }
        None if args.rpc => Surface::Rpc,
        None => Surface::Stdio,
    };
    server::serve(settings, surface, Duration::from_secs(args.drain_timeout_secs)).await
}

/// `serve --http` whose background server listens in its place: until SIGINT or SIGTERM (then
/// the server stops listening, and serves its other clients on), or until the server stops.
async fn wait_listening(listening: std::os::unix::net::UnixStream) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    tokio::spawn(server::cancel_on_signal(stop.clone()));
    let watched = listening.try_clone()?;
    let mut ended = tokio::task::spawn_blocking(move || {
        // The server writes nothing more; end of file is the server stopping.
        let _ = std::io::copy(&mut &watched, &mut std::io::sink());
    });
    tokio::select! {
        () = stop.cancelled() => {
            let _ = listening.shutdown(std::net::Shutdown::Both);
            let _ = ended.await;
            Ok(())
        }
        _ = &mut ended => anyhow::bail!("the background server stopped, and with it this HTTP listener"),
    }
}

/// The settings with `serve`'s bounds of the live set, which override the config file's.
fn with_session_limits(
    settings: &Settings,
    idle_unload_secs: Option<u64>,
    max_live_sessions: Option<u64>,
) -> Settings {
    Settings {
        idle_unload_secs: idle_unload_secs.or(settings.idle_unload_secs),
        max_live_sessions: max_live_sessions
            .map(|max| usize::try_from(max).unwrap_or(usize::MAX))
            .or(settings.max_live_sessions),
        ..settings.clone()
    }
}

/// `deputy ui`: the inspector's URL (and, for a server it started, the token to enter).
pub fn ui(settings: &Settings) -> anyhow::Result<ExitCode> {
    let inspector = background::inspector::open(settings)?;
    let mut text = format!("{}\n", inspector.url);
    if let Some(token) = &inspector.token {
        text.push_str(&format!(
            "token: {token}\n(a server now serves {} on loopback; enter the token once in the page; \
             `deputy background stop` stops it)\n",
            inspector.store.display()
        ));
    }
    let _ = std::io::stdout().write_all(text.as_bytes());
    Ok(ExitCode::SUCCESS)
}

/// `deputy background status|stop`.
pub fn background(settings: &Settings, command: BackgroundCommand) -> anyhow::Result<ExitCode> {
    let mut stdout = std::io::stdout();
    match command {
        BackgroundCommand::Status => {
            let found = background::status(settings)?;
            let location = &found.location;
            let mut text = format!(
                "store:  {}\nsocket: {}\nlog:    {}\n",
                location.store.display(),
                location.socket.display(),
                location.log_file.display()
            );
            let code = match &found.status {
                Some(status) => {
                    text.push_str(&format!(
                        "running: pid {}, deputy {}, {} connection(s) besides this one, {} running turn(s)\n",
                        status.pid,
                        status.version,
                        status.connections.saturating_sub(1),
                        status.running_turns
                    ));
                    ExitCode::SUCCESS
                }
                None => {
                    match background::attach::recorded_live_pid(location) {
                        Some(pid) => text.push_str(&format!("running: pid {pid} is alive but does not answer\n")),
                        None => text.push_str("running: no\n"),
                    }
                    ExitCode::FAILURE
                }
            };
            let _ = stdout.write_all(text.as_bytes());
            Ok(code)
        }
        BackgroundCommand::Stop => {
            let (location, was_running) = background::stop(settings)?;
            let text = if was_running {
                format!("stopped the background server of {}\n", location.store.display())
            } else {
                format!("no background server runs for {}\n", location.store.display())
            };
            let _ = stdout.write_all(text.as_bytes());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `deputy background-server` (hidden): what `deputy serve` starts. Exits
/// [`background::STORE_HELD_EXIT`] when another process holds the store.
pub async fn background_server(settings: &Settings, args: BackgroundServerArgs) -> anyhow::Result<ExitCode> {
    if !cfg!(feature = "session-store") {
        anyhow::bail!("this build of deputy has no session store, so it runs no background server");
    }
    let settings = &with_session_limits(settings, args.idle_unload_secs, args.max_live_sessions);
    let options = HostOptions {
        socket: args.socket,
        idle_exit: Duration::from_secs(args.idle_exit_secs),
        drain_timeout: Duration::from_secs(args.drain_timeout_secs),
    };
    match background::host::run(settings, options).await? {
        HostExit::Served => Ok(ExitCode::SUCCESS),
        HostExit::StoreHeld => Ok(ExitCode::from(background::STORE_HELD_EXIT)),
    }
}

/// `deputy run`: one prompt in a new session whose agent the flags describe, streamed.
pub async fn run_prompt(owner: &Owner, flags: RunArgs) -> ExitCode {
    let output_schema = match read_output_schema(&flags.structured) {
        Ok(schema) => schema,
        Err(error) => return exit_with(&error),
    };
    let structured = output_schema.is_some();
    let budget = Budget {
        max_tokens: flags.budget_tokens,
        max_tool_calls: flags.budget_tool_calls,
        max_duration_ms: None,
        max_cost_usd: flags.budget_cost_usd,
    };
    let params = json!({
        "prompt": flags.prompt,
        "agent": flags.agent,
        "system_prompt": flags.system,
        "max_tokens": flags.max_tokens,
        "budget": budget,
        "output_schema": output_schema,
        "structured_output_retries": flags.structured.structured_output_retries,
    });
    stream_turn(structured, |following| owner.call_as(Turns::Create, without_nulls(params), Some(following))).await
}

/// `deputy turn`: one more turn of a stored session, streamed.
pub async fn turn(owner: &Owner, session_id: String, prompt: String, structured: StructuredArgs) -> ExitCode {
    let output_schema = match read_output_schema(&structured) {
        Ok(schema) => schema,
        Err(error) => return exit_with(&error),
    };
    let structured_output = output_schema.is_some();
    // Without the flag, a session created with a schema still validates its answers against
    // it, and the text streams as for any session; the flag prints the validated value alone.
    let params = json!({
        "session_id": session_id,
        "prompt": prompt,
        "output_schema": output_schema,
        "structured_output_retries": structured.structured_output_retries,
    });
    stream_turn(structured_output, |following| owner.call_as(Turns::Turn, without_nulls(params), Some(following)))
        .await
}

/// Arguments without their `null` fields: absent, as a caller leaving a flag out means.
fn without_nulls(mut arguments: Value) -> Value {
    if let Value::Object(fields) = &mut arguments {
        fields.retain(|_, value| !value.is_null());
    }
    arguments
}

/// The schema file of `--output-schema`, parsed; a file that cannot be read or is not JSON is
/// `INVALID_REQUEST` (the service checks that it is a schema).
fn read_output_schema(flags: &StructuredArgs) -> Result<Option<serde_json::Value>, SessionError> {
    let Some(path) = &flags.output_schema else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .map_err(|err| SessionError::invalid(format!("--output-schema {}: {err}", path.display())))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|err| SessionError::invalid(format!("--output-schema {}: not JSON: {err}", path.display())))
}

/// Runs one turn with its text streamed to stdout as it arrives; Ctrl-C interrupts it.
/// Exit 0 done, 1 error or interrupted, 2 budget exhausted; the session id goes to stderr.
///
/// With `structured` (`--output-schema`), stdout gets only the validated JSON value (one line),
/// so it can go straight to `jq`; the streamed text (narration, rejected answers) is dropped.
/// An answer that never validated exits 1 with the errors on stderr.
async fn stream_turn<F, Fut>(structured: bool, start: F) -> ExitCode
where
    F: FnOnce(Following) -> Fut,
    Fut: std::future::Future<Output = Result<RunResult, SessionError>>,
{
    let (events, mut receiver) = crate::agent::event_channel();
    let printer = tokio::spawn(async move {
        let mut stdout = std::io::stdout();
        let mut wrote_text = false;
        while let Some(event) = receiver.recv().await {
            if let AgentEvent::TextDelta { text } = event {
                if structured {
                    continue;
                }
                wrote_text |= !text.is_empty();
                let _ = stdout.write_all(text.as_bytes());
                let _ = stdout.flush();
            }
        }
        if wrote_text {
            let _ = stdout.write_all(b"\n");
        }
    });
    let interrupt = CancellationToken::new();
    tokio::spawn(server::cancel_on_signal(interrupt.clone()));
    let result = start(Following { events, cancel: interrupt }).await;
    let _ = printer.await;
    match result {
        Ok(result) => {
            let mut stdout = std::io::stdout();
            if structured && let Some(value) = &result.structured_output {
                let _ = stdout.write_all(format!("{value}\n").as_bytes());
                let _ = stdout.flush();
            }
            eprintln!("session {}", result.session_id);
            eprintln!("{}", render::turn_usage(&result.usage));
            if result.stop_reason == Some(StopReason::StructuredOutputInvalid) {
                eprintln!("structured output invalid: the answer never validated against the schema:");
                for error in &result.structured_output_errors {
                    eprintln!("  {error}");
                }
                return ExitCode::FAILURE;
            }
            match result.status {
                TurnStatus::Completed if result.stop_reason == Some(StopReason::BudgetExhausted) => {
                    eprintln!("stopped: budget exhausted");
                    ExitCode::from(2)
                }
                TurnStatus::Completed => ExitCode::SUCCESS,
                TurnStatus::Cancelled => {
                    eprintln!("interrupted");
                    ExitCode::FAILURE
                }
                // A failed turn arrives as an `AGENT_ERROR` (below), never as a result.
                TurnStatus::Failed => ExitCode::FAILURE,
                TurnStatus::PendingToolCalls => {
                    eprintln!("waiting for tool calls: answer them with session_turn over MCP, REST or JSON-RPC");
                    ExitCode::SUCCESS
                }
                // The command line waits for the whole turn; nothing is left running.
                TurnStatus::Running => ExitCode::SUCCESS,
            }
        }
        Err(error) => exit_with(&error),
    }
}

/// `deputy sessions …`.
/// `deputy send`: prints the message id and how it was taken in. A turn the message started
/// (host mode) runs in this process, so the command waits for it, then for any turn that
/// follows from mail, before it exits.
pub async fn send(owner: &Owner, params: inbox::SessionSendParams) -> ExitCode {
    let sent: SendResult = match owner.call_as(Inbox::Send, to_value(&params), None).await {
        Ok(sent) => sent,
        Err(error) => return exit_with(&error),
    };
    let line = format!("{} {}\n", sent.message_id, sent.delivered.as_str());
    // stdout closed early (a pipe) loses only the echo; the message is taken in.
    let _ = std::io::stdout().write_all(line.as_bytes());
    // A background server runs the turn whatever this process does; one started here must
    // finish before the process exits.
    if sent.delivered == Delivery::StartedTurn
        && let Some(service) = owner.here()
    {
        if let Err(error) = service.read(&sent.session_id, Some(MAX_WAIT)).await {
            return exit_with(&error);
        }
        service.drain(SEND_DRAIN).await;
    }
    ExitCode::SUCCESS
}

/// How long `deputy send` lets turns started by mail go on after the first one ended.
const SEND_DRAIN: Duration = Duration::from_secs(60);

pub async fn sessions(owner: &Owner, command: SessionsCommand) -> ExitCode {
    let outcome = match command {
        SessionsCommand::List { all, cursor, offset, limit, parent, root, filters, json } => {
            let params = sessions::SessionListParams {
                cursor,
                offset: Some(offset),
                limit: Some(limit),
                include_archived: Some(all),
                parent_id: parent.map(SessionId::from_string),
                root_id: root.map(SessionId::from_string),
                status: filters.status.map(Into::into),
                owner: filters.owner,
                label: filters.label,
                title: filters.title,
            };
            owner
                .call_as::<SessionList>(Sessions::List, to_value(&params), None)
                .await
                .map(|list| if json { to_json(&list) } else { render::session_list(&list) })
        }
        SessionsCommand::Show { session_id, json } => {
            // Two calls: the view (state, billing) and the conversation are separate reads of
            // the service, and no single call returns both.
            let id = json!({"session_id": session_id});
            let view = owner.call_as::<SessionView>(Turns::Read, id.clone(), None).await;
            let history = owner.call_as::<SessionHistory>(History::Messages, id, None).await;
            match (view, history) {
                (Ok(view), Ok(history)) if json => {
                    Ok(to_json(&json!({"session": view, "messages": history.messages})))
                }
                (Ok(view), Ok(history)) => Ok(render::session(&view, &history.messages)),
                (Err(error), _) | (_, Err(error)) => Err(error),
            }
        }
        SessionsCommand::Archive { session_id } => owner
            .call_as::<ArchiveResult>(Sessions::Archive, json!({"session_id": session_id}), None)
            .await
            .map(|archived| format!("archived {}\n", archived.session_id)),
        SessionsCommand::Compact { session_id } => owner
            .call_as::<CompactResult>(Sessions::Compact, json!({"session_id": session_id}), None)
            .await
            .map(|done| {
                format!(
                    "{} {}: about {} → {} tokens (summarized: {}, tool outputs pruned: {})\n",
                    if done.compacted { "compacted" } else { "nothing to compact in" },
                    done.session_id,
                    done.tokens_before,
                    done.tokens_after,
                    done.summarized,
                    done.pruned_results
                )
            }),
        SessionsCommand::ToolOutput { session_id, tool_use_id } => {
            let params = json!({"session_id": session_id, "tool_use_id": tool_use_id});
            owner.call_as::<ToolOutputResult>(Sessions::ToolOutput, params, None).await.map(|output| output.content)
        }
        SessionsCommand::Fork { session_id, at_turn } => {
            let params = json!({"session_id": session_id, "at_turn": at_turn});
            owner.call_as::<SessionView>(History::Fork, params, None).await.map(|fork| {
                let origin = fork.state.forked_from.as_ref().map_or(0, |origin| origin.turn);
                format!("forked {session_id} at turn {origin} into {}\n", fork.session_id)
            })
        }
        SessionsCommand::Export { session_id } => owner
            .call_as::<ExportResult>(History::Export, json!({"session_id": session_id}), None)
            .await
            .map(|export| export.document),
        SessionsCommand::Import { file } => match read_document(&file) {
            Ok(document) => owner
                .call_as::<SessionView>(History::Import, json!({"document": document}), None)
                .await
                .map(|view| format!("imported {} as {}\n", file.display(), view.session_id)),
            Err(error) => Err(error),
        },
        SessionsCommand::Rewind { session_id, to_turn } => {
            let params = json!({"session_id": session_id, "to_turn": to_turn});
            owner.call_as::<RewindResult>(History::Rewind, params, None).await.map(|done| {
                format!(
                    "rewound {} to turn {}: {} messages dropped, {} kept\n",
                    done.session_id, done.to_turn, done.dropped_messages, done.message_count
                )
            })
        }
    };
    print_outcome(outcome)
}

/// Wire params as the JSON arguments of an operation. They are plain data that always
/// serialize.
fn to_value<T: serde::Serialize>(params: &T) -> Value {
    serde_json::to_value(params).unwrap_or_default()
}

/// The document an import reads: a file, or stdin for `-`; at most
/// [`MAX_EXPORT_BYTES`](crate::model::export::MAX_EXPORT_BYTES).
fn read_document(file: &std::path::Path) -> Result<String, SessionError> {
    use std::io::Read;
    let limit = crate::model::export::MAX_EXPORT_BYTES as u64 + 1;
    let mut document = String::new();
    let read = if file.as_os_str() == "-" {
        std::io::stdin().take(limit).read_to_string(&mut document)
    } else {
        std::fs::File::open(file).and_then(|opened| opened.take(limit).read_to_string(&mut document))
    };
    read.map_err(|err| SessionError::invalid(format!("import: cannot read {}: {err}", file.display())))?;
    Ok(document)
}

/// A command's answer: its text on stdout and exit 0, or its error as every command reports one.
pub(super) fn print_outcome(outcome: Result<String, SessionError>) -> ExitCode {
    match outcome {
        Ok(text) => {
            let mut stdout = std::io::stdout();
            let _ = stdout.write_all(text.as_bytes());
            let _ = stdout.flush();
            ExitCode::SUCCESS
        }
        Err(error) => exit_with(&error),
    }
}

/// `deputy call OPERATION ARGUMENTS`: one operation of the table every surface shares, by its
/// tool or method name, its result as pretty JSON. Turns wait as long as the tools' `wait_ms`
/// says (30 s by default), like any MCP caller.
pub async fn call(owner: &Owner, name: &str, arguments: &str) -> ExitCode {
    let Some(operation) = Operation::from_name(name) else {
        let known: Vec<&str> = Operation::all().map(Operation::tool).collect();
        return exit_with(&SessionError::invalid(format!(
            "unknown operation {name:?}: one of {} (or their JSON-RPC method names)",
            known.join(", ")
        )));
    };
    let arguments = match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(arguments) => arguments,
        Err(error) => return exit_with(&SessionError::invalid(format!("{name}: arguments are not JSON: {error}"))),
    };
    print_outcome(owner.call(operation, arguments, None).await.map(|result| to_json(&result)))
}

pub(super) fn to_json<T: serde::Serialize>(value: &T) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

/// `deputy schemas`: writes `<tool>.input.json` and `<tool>.output.json` for every tool, and
/// `openapi.json`.
/// `deputy project`: projects one stored session, or all of them in id order, from the store's
/// journal (see [`crate::session::projection`]).
pub async fn project(owner: &Owner, out: &Path, session: Option<String>) -> anyhow::Result<()> {
    use crate::session::projection::{Projector, prepare_root, project_session};
    prepare_root(out)?;
    let ids = match session {
        Some(id) => vec![SessionId::from_string(id)],
        None => {
            let mut ids = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let params = json!({"cursor": cursor, "limit": crate::session::MAX_PAGE, "include_archived": true});
                let page: SessionList = owner.call_as(Sessions::List, params, None).await?;
                ids.extend(page.sessions.into_iter().map(|summary| summary.session_id));
                cursor = page.next_cursor;
                if cursor.is_none() {
                    break;
                }
            }
            ids.sort();
            ids
        }
    };
    let projector = Projector::new(out);
    let mut events = 0;
    for id in &ids {
        let fetch = |after| async move {
            let params = json!({"session_id": id, "after_seq": after, "limit": crate::model::MAX_EVENTS_PAGE});
            owner
                .call_as::<crate::model::EventPage>(Journal::Events, params, None)
                .await
                .map(|page| page.events)
                .map_err(|err| err.to_string())
        };
        events += project_session(&projector, id, fetch).await?;
    }
    eprintln!("projected {events} new events of {} sessions into {}", ids.len(), out.display());
    Ok(())
}

pub fn write_schemas(out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for (name, contents) in schemas::schema_files() {
        let path = out.join(&name);
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!("wrote the tool schemas to {}", out.display());
    Ok(())
}

//! `deputy agents list|show`: the named agents of the config file, read straight from their
//! files (no store, no server), as every surface lists them.

use std::io::Write;
use std::process::ExitCode;

use super::args::AgentsCommand;
use super::exit_with;
use crate::profiles::Profiles;

pub fn agents(profiles: &Profiles, command: AgentsCommand) -> ExitCode {
    let mut out = std::io::stdout().lock();
    let written = match command {
        AgentsCommand::List { json: true } => writeln!(out, "{}", pretty(&profiles.list())),
        AgentsCommand::List { json: false } => {
            let list = profiles.list();
            if list.agents.is_empty() {
                eprintln!("no named agents: put profiles (Markdown with YAML frontmatter) in [agents] dirs");
            }
            list.agents.iter().try_for_each(|agent| match &agent.invalid {
                None => {
                    writeln!(out, "{}\t{}\t{}", agent.name, agent.version, agent.description.replace('\n', " "))
                }
                Some(reason) => writeln!(out, "{}\tinvalid\t{}: {reason}", agent.name, agent.path),
            })
        }
        AgentsCommand::Show { name } => match profiles.detail(&name) {
            Ok(detail) => writeln!(out, "{}", pretty(&detail)),
            Err(error) => return exit_with(&error),
        },
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE, // stdout closed: nothing more to say
    }
}

fn pretty(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

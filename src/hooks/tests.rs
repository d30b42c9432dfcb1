use std::time::{Duration, Instant};

use serde_json::json;

use super::*;

fn config(event: HookEventKind) -> HookConfig {
    HookConfig { event, matcher: None, command: None, url: None, timeout_ms: None, on_error: None }
}

/// A command hook running `script` under `sh -c`.
fn sh(event: HookEventKind, matcher: Option<&str>, script: &str) -> HookConfig {
    HookConfig {
        matcher: matcher.map(str::to_owned),
        command: Some(vec!["sh".into(), "-c".into(), script.into()]),
        ..config(event)
    }
}

fn tool_event(tool: &str, arguments: serde_json::Value) -> HookEvent {
    HookEvent {
        tool_name: Some(tool.into()),
        tool_use_id: Some("toolu_1".into()),
        arguments: Some(arguments),
        ..HookEvent::new(HookEventKind::PreToolUse, &SessionId::from_string("s-1"), Some(1))
    }
}

#[test]
fn replies_parse_and_empty_output_allows() {
    let reply = HookReply::parse(br#"{"decision":"deny","reason":"no","extra":1}"#).unwrap();
    assert_eq!((reply.decision, reply.reason.as_deref()), (Decision::Deny, Some("no")));
    let reply = HookReply::parse(br#"{"decision":"modify","updated_arguments":{"a":1}}"#).unwrap();
    assert_eq!(reply.updated_arguments, Some(json!({"a": 1})));
    assert_eq!(HookReply::parse(b" \n").unwrap().decision, Decision::Allow);
    assert!(HookReply::parse(b"yes").is_err());
    assert!(HookReply::parse(br#"{"decision":"maybe"}"#).is_err());
}

#[test]
fn the_config_is_validated_when_loaded() {
    let command = Some(vec!["true".to_owned()]);
    let bad = [
        (
            HookConfig {
                command: command.clone(),
                url: Some("http://x/".into()),
                ..config(HookEventKind::TurnEnd)
            },
            "exactly one",
        ),
        (config(HookEventKind::TurnEnd), "exactly one"),
        (HookConfig { command: Some(vec![]), ..config(HookEventKind::TurnEnd) }, "name a program"),
        (
            HookConfig { matcher: Some("(".into()), command: command.clone(), ..config(HookEventKind::PreToolUse) },
            "regex",
        ),
        (
            HookConfig { matcher: Some("x".into()), command: command.clone(), ..config(HookEventKind::TurnStart) },
            "matcher applies",
        ),
        (
            HookConfig { timeout_ms: Some(0), command: command.clone(), ..config(HookEventKind::TurnEnd) },
            "timeout_ms",
        ),
        (
            HookConfig {
                timeout_ms: Some(MAX_TIMEOUT_MS + 1),
                command: command.clone(),
                ..config(HookEventKind::TurnEnd)
            },
            "timeout_ms",
        ),
        (HookConfig { url: Some("ftp://x/".into()), ..config(HookEventKind::TurnEnd) }, "http or https"),
    ];
    for (entry, expected) in bad {
        let err = Hooks::from_config(std::slice::from_ref(&entry)).unwrap_err().to_string();
        assert!(err.contains(expected), "{entry:?}: {err}");
    }
    assert!(!Hooks::from_config(&[]).unwrap().listens(HookEventKind::TurnEnd));
    let hooks = Hooks::from_config(&[HookConfig { command, ..config(HookEventKind::TurnEnd) }]).unwrap();
    assert!(hooks.listens(HookEventKind::TurnEnd) && !hooks.listens(HookEventKind::TurnStart));
}

#[test]
fn a_matcher_must_match_the_whole_tool_name() {
    let hook = Hook::parse(0, &sh(HookEventKind::PreToolUse, Some("write_file|edit_.*"), "true")).unwrap();
    assert!(hook.applies_to(&tool_event("write_file", json!({}))));
    assert!(hook.applies_to(&tool_event("edit_file", json!({}))));
    assert!(!hook.applies_to(&tool_event("rewrite_file", json!({}))));
    assert!(!hook.applies_to(&tool_event("write_file2", json!({}))));
    let mut post = tool_event("write_file", json!({}));
    post.event = HookEventKind::PostToolUse;
    assert!(!hook.applies_to(&post), "another event");
}

#[tokio::test]
async fn a_command_hook_reads_the_event_and_its_answers_fold_in_order() {
    let deny_env = sh(
        HookEventKind::PreToolUse,
        Some("write_file"),
        r#"grep -q '"path":"[^"]*\.env"' && echo '{"decision":"deny","reason":"no .env files"}' || true"#,
    );
    let rewrite = sh(
        HookEventKind::PreToolUse,
        None,
        r#"cat >/dev/null; echo '{"decision":"modify","updated_arguments":{"path":"b.txt"},"additional_context":"rewritten"}'"#,
    );
    let hooks = Hooks::from_config(&[deny_env, rewrite]).unwrap();
    let cancel = CancellationToken::new();
    let verdict = hooks.run(tool_event("write_file", json!({"path": "app/.env"})), &cancel).await;
    assert_eq!(verdict, Verdict { denied: Some("no .env files".into()), ..Verdict::default() });
    let verdict = hooks.run(tool_event("write_file", json!({"path": "a.txt"})), &cancel).await;
    assert_eq!(verdict.denied, None);
    assert_eq!(verdict.arguments, Some(json!({"path": "b.txt"})));
    assert_eq!(verdict.context, ["rewritten"]);
}

#[tokio::test]
async fn a_hook_past_its_timeout_is_killed_and_follows_on_error() {
    for (on_error, denied) in [(Switch::Allow, false), (Switch::Deny, true)] {
        let hang = HookConfig {
            timeout_ms: Some(200),
            on_error: Some(on_error),
            ..sh(HookEventKind::PreToolUse, None, "sleep 30")
        };
        let hooks = Hooks::from_config(&[hang]).unwrap();
        let started = Instant::now();
        let verdict = hooks.run(tool_event("read_file", json!({})), &CancellationToken::new()).await;
        assert!(started.elapsed() < Duration::from_secs(5), "waited {:?}", started.elapsed());
        assert_eq!(verdict.denied.is_some(), denied, "{verdict:?}");
        if denied {
            assert!(verdict.denied.unwrap().contains("timed out after 200 ms"));
        }
    }
}

#[tokio::test]
async fn a_failing_hook_follows_on_error_and_a_cancelled_one_is_interrupted() {
    let fail =
        HookConfig { on_error: Some(Switch::Deny), ..sh(HookEventKind::PreToolUse, None, "echo oops >&2; exit 3") };
    let verdict =
        Hooks::from_config(&[fail]).unwrap().run(tool_event("x", json!({})), &CancellationToken::new()).await;
    let denied = verdict.denied.unwrap();
    assert!(denied.contains("exit status: 3") && denied.contains("oops"), "{denied}");
    let garbage = sh(HookEventKind::PreToolUse, None, "echo not json");
    let verdict =
        Hooks::from_config(&[garbage]).unwrap().run(tool_event("x", json!({})), &CancellationToken::new()).await;
    assert_eq!(verdict, Verdict::default(), "on_error defaults to allow");

    let cancel = CancellationToken::new();
    cancel.cancel();
    let hang = sh(HookEventKind::PreToolUse, None, "sleep 30");
    let verdict = Hooks::from_config(&[hang]).unwrap().run(tool_event("x", json!({})), &cancel).await;
    assert_eq!(verdict, Verdict { interrupted: true, ..Verdict::default() });
}

#[tokio::test]
async fn command_hooks_get_the_clean_environment() {
    // The allowlist reaches the hook (PATH), a provider key never does (if the test runner has one).
    let print = sh(
        HookEventKind::TurnStart,
        None,
        r#"printf '{"decision":"allow","additional_context":"%s"}' "${ANTHROPIC_API_KEY:-none}:${PATH:+path}""#,
    );
    let hooks = Hooks::from_config(&[print]).unwrap();
    let event = HookEvent::new(HookEventKind::TurnStart, &SessionId::from_string("s"), Some(1));
    let verdict = hooks.run(event, &CancellationToken::new()).await;
    assert_eq!(verdict.context, ["none:path"]);
}

#[test]
fn the_event_payload_leaves_out_what_does_not_apply() {
    let event = HookEvent {
        prompt: Some("hi".into()),
        ..HookEvent::new(HookEventKind::TurnStart, &SessionId::from_string("s"), Some(2))
    };
    assert_eq!(
        serde_json::to_value(&event).unwrap(),
        json!({"event": "turn_start", "session_id": "s", "turn": 2, "prompt": "hi"})
    );
}

#[tokio::test]
async fn a_url_hook_that_cannot_connect_follows_on_error_and_never_shows_its_credentials() {
    let hook = HookConfig {
        url: Some("http://user:pw@127.0.0.1:9/hook?token=s3cret".into()),
        timeout_ms: Some(2000),
        on_error: Some(Switch::Deny),
        ..config(HookEventKind::PreToolUse)
    };
    let hooks = Hooks::from_config(&[hook]).unwrap();
    let verdict = hooks.run(tool_event("x", json!({})), &CancellationToken::new()).await;
    let denied = verdict.denied.unwrap();
    assert!(denied.starts_with("hook 0 failed: POST http://127.0.0.1:9/hook"), "{denied}");
    assert!(!denied.contains("s3cret") && !denied.contains("pw"), "{denied}");
    assert!(!format!("{hooks:?}").contains("s3cret"));
}

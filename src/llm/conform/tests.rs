use serde_json::json;

use super::*;

fn user(blocks: Vec<ContentBlock>) -> Message {
    Message { role: Role::User, content: blocks }
}

fn assistant(blocks: Vec<ContentBlock>) -> Message {
    Message::assistant(blocks)
}

fn call(id: &str, name: &str) -> ContentBlock {
    ContentBlock::ToolUse { id: id.into(), name: name.into(), input: json!({}) }
}

fn result(id: &str) -> ContentBlock {
    ContentBlock::ToolResult { tool_use_id: id.into(), content: format!("out of {id}"), is_error: false }
}

fn says(text: &str) -> ContentBlock {
    ContentBlock::Text { text: text.into() }
}

fn all_declared(_: &str) -> bool {
    true
}

fn keep_none(_: &ContentBlock) -> bool {
    false
}

fn owned(conformed: &Conformed<'_>) -> Vec<(Role, Vec<ContentBlock>)> {
    conformed
        .turns
        .iter()
        .map(|turn| (turn.role, turn.blocks.iter().map(|block| block.as_ref().clone()).collect()))
        .collect()
}

#[test]
fn a_valid_history_is_borrowed_as_it_is() {
    let history = vec![
        user(vec![says("hi")]),
        assistant(vec![says("let me look"), call("a", "read")]),
        user(vec![result("a")]),
        assistant(vec![says("done")]),
    ];
    let conformed = conform(&history, &all_declared, keep_none);
    assert!(conformed.turns.iter().flat_map(|turn| &turn.blocks).all(|block| matches!(block, Cow::Borrowed(_))));
    assert_eq!(owned(&conformed), history.iter().map(|m| (m.role, m.content.clone())).collect::<Vec<_>>());
    assert!(conformed.stubs.is_empty());
}

#[test]
fn whitespace_text_goes_and_a_message_left_empty_merges_its_neighbours() {
    let history = vec![
        user(vec![says("hi")]),
        assistant(vec![says("\n\n")]),
        user(vec![says("again")]),
        assistant(vec![says("  "), call("a", "read")]),
        user(vec![result("a"), says(" ")]),
    ];
    let conformed = owned(&conform(&history, &all_declared, keep_none));
    assert_eq!(
        conformed,
        vec![
            (Role::User, vec![says("hi"), says("again")]),
            (Role::Assistant, vec![call("a", "read")]),
            (Role::User, vec![result("a")]),
        ]
    );
}

#[test]
fn every_call_is_answered_first_in_the_next_user_message() {
    let history = vec![
        user(vec![says("go")]),
        assistant(vec![call("a", "read"), call("b", "read"), call("c", "read")]),
        // Mail arrived before the results; "a" never got one; "z" answers nothing.
        user(vec![says("mail"), result("c"), result("z"), result("b")]),
    ];
    let conformed = owned(&conform(&history, &all_declared, keep_none));
    let not_run = ContentBlock::ToolResult { tool_use_id: "a".into(), content: NOT_RUN.into(), is_error: true };
    assert_eq!(
        conformed[2],
        (
            Role::User,
            vec![not_run, result("b"), result("c"), says("mail"), says("[result of tool call z]\nout of z")]
        )
    );
}

#[test]
fn calls_at_the_end_of_the_history_get_a_message_of_results() {
    let history = vec![user(vec![says("go")]), assistant(vec![call("a", "read")])];
    let conformed = owned(&conform(&history, &all_declared, keep_none));
    assert_eq!(conformed.len(), 3);
    assert!(
        matches!(&conformed[2].1[..], [ContentBlock::ToolResult { tool_use_id, is_error: true, .. }] if tool_use_id == "a")
    );
}

#[test]
fn results_without_their_call_become_text_and_a_history_starts_with_the_user() {
    let history = vec![assistant(vec![says("summary so far")]), user(vec![result("gone")])];
    let conformed = owned(&conform(&history, &all_declared, keep_none));
    assert_eq!(conformed[0], (Role::User, vec![says(CONTINUED)]));
    assert_eq!(conformed[2], (Role::User, vec![says("[result of tool call gone]\nout of gone")]));
}

#[test]
fn tools_the_history_calls_but_the_request_lacks_are_declared_as_stubs() {
    let history = vec![
        user(vec![says("go")]),
        assistant(vec![call("a", "deputy_final_answer"), call("b", "read"), call("c", "deputy_final_answer")]),
        user(vec![result("a"), result("b"), result("c")]),
    ];
    let conformed = conform(&history, &|name| name == "read", keep_none);
    let names: Vec<&str> = conformed.stubs.iter().map(|stub| stub.name.as_str()).collect();
    assert_eq!(names, ["deputy_final_answer"]);
    assert_eq!(conformed.stubs[0].input_schema, json!({"type": "object"}));
}

#[test]
fn reasoning_goes_only_to_the_wire_that_keeps_it() {
    let thinking = ContentBlock::Thinking { thinking: "hmm".into(), signature: Some("sig".into()) };
    let reasoning = ContentBlock::Reasoning { text: "hmm".into() };
    let history =
        vec![user(vec![says("go")]), assistant(vec![thinking.clone(), reasoning.clone(), says("answer")])];
    let anthropic =
        owned(&conform(&history, &all_declared, |block| matches!(block, ContentBlock::Thinking { .. })));
    assert_eq!(anthropic[1].1, vec![thinking, says("answer")]);
    let openai = owned(&conform(&history, &all_declared, |block| matches!(block, ContentBlock::Reasoning { .. })));
    assert_eq!(openai[1].1, vec![reasoning, says("answer")]);
}

//! Structured output: a turn whose final answer must be JSON valid against a caller's schema.
//!
//! An [`OutputContract`] is a schema compiled once (when the request arrives, so a bad schema
//! is refused as `INVALID_REQUEST` before anything runs) plus the number of retries. The loop
//! ([`super::turn`]) takes a candidate answer from either channel the wires use: a call of the
//! [`FINAL_ANSWER_TOOL`] (Anthropic) or the text of a response without tool calls (OpenAI's
//! `response_format`, or instruct-and-parse). Every candidate is validated here; a failure goes
//! back to the model as that tool call's error result, or as a user message, and the model
//! answers again, up to `retries` times.

use std::sync::Arc;

use serde_json::Value;

use super::report::{TurnEnd, TurnTotals};
use super::{Agent, AgentEvent, EventSink};
use crate::error::SessionError;
use crate::llm::structured::final_answer_value;
use crate::llm::{ContentBlock, FINAL_ANSWER_TOOL, Message, OutputFormat, Role};
use crate::model::{StepCall, StopReason, StructuredOutput};

/// Validation errors reported to the model and the caller, at most this many.
const MAX_ERRORS: usize = 20;

/// A compiled output schema and its retries. Cheap to clone.
#[derive(Clone)]
pub struct OutputContract {
    spec: Arc<StructuredOutput>,
    format: OutputFormat,
    validator: Arc<jsonschema::Validator>,
}

impl std::fmt::Debug for OutputContract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputContract").field("retries", &self.spec.retries).finish_non_exhaustive()
    }
}

impl PartialEq for OutputContract {
    fn eq(&self, other: &Self) -> bool {
        self.spec == other.spec
    }
}

impl OutputContract {
    /// Compiles `schema` (JSON Schema 2020-12 unless its `$schema` names another draft). A
    /// schema that is not one, or that refers to anything outside itself, is `INVALID_REQUEST`
    /// with the validator's message; `retries` above [`StructuredOutput::MAX_RETRIES`] too.
    pub fn compile(schema: Value, retries: Option<u32>) -> Result<Self, SessionError> {
        let retries = retries.unwrap_or(StructuredOutput::DEFAULT_RETRIES);
        if retries > StructuredOutput::MAX_RETRIES {
            return Err(SessionError::invalid(format!(
                "structured_output_retries is at most {}, not {retries}",
                StructuredOutput::MAX_RETRIES
            )));
        }
        Self::from_spec(StructuredOutput { schema, retries })
    }

    /// Compiles a spec (a new one, or a stored session's).
    pub fn from_spec(spec: StructuredOutput) -> Result<Self, SessionError> {
        if !spec.schema.is_object() {
            return Err(SessionError::invalid("output_schema must be a JSON Schema object"));
        }
        let validator = jsonschema::validator_for(&spec.schema)
            .map_err(|err| SessionError::invalid(format!("output_schema is not a valid JSON Schema: {err}")))?;
        let schema = Arc::new(spec.schema.clone());
        Ok(Self { spec: Arc::new(spec), format: OutputFormat::new(schema), validator: Arc::new(validator) })
    }

    /// What the session keeps.
    pub fn spec(&self) -> &StructuredOutput {
        &self.spec
    }

    pub fn retries(&self) -> u32 {
        self.spec.retries
    }

    /// What the model request carries.
    pub fn format(&self) -> &OutputFormat {
        &self.format
    }

    /// The answer a call of the final-answer tool carries.
    pub fn from_tool_input(&self, input: Value) -> Value {
        final_answer_value(&self.format, input)
    }

    /// Parses a text answer: the JSON value it is, or inside a Markdown code fence, which
    /// instructed models add despite being told not to.
    pub fn parse_text(&self, text: &str) -> Result<Value, Vec<String>> {
        let trimmed = text.trim();
        let unfenced = trimmed
            .strip_prefix("```")
            .and_then(|rest| rest.strip_suffix("```"))
            .map(|body| body.trim_start_matches(|c: char| c.is_ascii_alphanumeric()).trim());
        serde_json::from_str(trimmed)
            .or_else(|err| unfenced.map_or(Err(err), serde_json::from_str))
            .map_err(|err| vec![format!("the answer is not JSON: {err}")])
    }

    /// `Ok` when `value` is valid against the schema, else the validation errors (each with
    /// the JSON pointer of the offending part), at most [`MAX_ERRORS`].
    pub fn check(&self, value: &Value) -> Result<(), Vec<String>> {
        let mut errors: Vec<String> = self
            .validator
            .iter_errors(value)
            .take(MAX_ERRORS + 1)
            .map(|error| {
                let path = error.instance_path().to_string();
                let at = if path.is_empty() { "(root)".to_owned() } else { path };
                format!("{at}: {error}")
            })
            .collect();
        if errors.is_empty() {
            return Ok(());
        }
        if errors.len() > MAX_ERRORS {
            errors.truncate(MAX_ERRORS);
            errors.push("… more errors not shown".to_owned());
        }
        Err(errors)
    }
}

/// What a response means for a turn with an output schema.
pub(super) enum Verdict {
    /// No final answer in it: run its tool calls as a normal step.
    RunTools(Vec<StepCall>),
    /// The turn is over: a valid answer, or the last retry failed.
    End(TurnEnd),
    /// The answer did not validate and the errors went back to the model: ask it again.
    Retry,
}

impl Agent {
    /// Judges a response of a structured turn, whose assistant message is already in the
    /// history. A call of the final-answer tool is the answer (other calls beside it are not
    /// run); a response without tool calls answers in `text`. Each answer gets a result in the
    /// history, so it stays valid: a final-answer call is answered `accepted`, or with the
    /// validation errors as an error result; a text answer that fails gets them as a user
    /// message when it is retried.
    pub(super) fn judge_answer(
        &mut self,
        contract: &OutputContract,
        calls: Vec<StepCall>,
        text: &str,
        totals: &mut TurnTotals,
        rejected: &mut u32,
        events: &EventSink,
    ) -> Verdict {
        let final_call = calls.iter().position(|call| call.name == FINAL_ANSWER_TOOL);
        let answer = match final_call {
            Some(index) => Ok(contract.from_tool_input(calls[index].arguments.clone())),
            None if calls.is_empty() => contract.parse_text(text),
            None => return Verdict::RunTools(calls),
        };
        // `text` is the answer as JSON text: a tool call's input, or (below) the parsed text
        // once it validated; a text answer that did not stays as the model wrote it.
        if let (Some(_), Ok(value)) = (final_call, &answer) {
            totals.text = value.to_string();
        }
        let checked = answer.and_then(|value| contract.check(&value).map(|()| value));
        match checked {
            Ok(value) => {
                match final_call {
                    Some(index) => self.answer_final_call(&calls, index, "accepted".to_owned(), false),
                    None => totals.text = value.to_string(),
                }
                totals.structured_output = Some(value);
                totals.structured_output_errors.clear();
                Verdict::End(TurnEnd::Completed { stop_reason: StopReason::EndTurn })
            }
            Err(errors) => {
                *rejected += 1;
                tracing::debug!(attempt = *rejected, errors = errors.len(), "structured output rejected");
                events.emit(AgentEvent::StructuredOutputRejected { attempt: *rejected, errors: errors.clone() });
                let feedback = feedback(&errors, final_call.is_some());
                totals.structured_output_errors = errors;
                match final_call {
                    Some(index) => self.answer_final_call(&calls, index, feedback, true),
                    None if *rejected <= contract.retries() => {
                        self.history_mut().push(Message::user_text(feedback))
                    }
                    None => {}
                }
                if *rejected > contract.retries() {
                    return Verdict::End(TurnEnd::Completed { stop_reason: StopReason::StructuredOutputInvalid });
                }
                Verdict::Retry
            }
        }
    }

    /// Answers every call of a response holding a final-answer call: that one with `content`,
    /// the others as not run, in call order.
    fn answer_final_call(&mut self, calls: &[StepCall], final_index: usize, content: String, is_error: bool) {
        let mut content = Some(content);
        let results = calls
            .iter()
            .enumerate()
            .map(|(index, call)| ContentBlock::ToolResult {
                tool_use_id: call.tool_use_id.clone(),
                content: if index == final_index {
                    content.take().unwrap_or_default()
                } else {
                    format!("not run: {FINAL_ANSWER_TOOL} was called in the same response; call it alone")
                },
                is_error: is_error || index != final_index,
            })
            .collect();
        self.history_mut().push(Message { role: Role::User, content: results });
    }
}

/// What the model reads after an answer that did not validate.
pub(super) fn feedback(errors: &[String], via_tool: bool) -> String {
    let mut text = String::from("The answer is not valid against the output schema:\n");
    for error in errors {
        text.push_str("- ");
        text.push_str(error);
        text.push('\n');
    }
    text.push_str(if via_tool {
        "Call the final-answer tool again with a corrected answer."
    } else {
        "Answer again with only the corrected JSON value."
    });
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn a_bad_schema_or_too_many_retries_is_an_invalid_request() {
        for (schema, retries) in [
            (json!({"type": "no-such-type"}), None),
            (json!("not an object"), None),
            (json!({"$ref": "https://example.com/remote.json"}), None),
            (json!({"type": "object"}), Some(11)),
        ] {
            let error = OutputContract::compile(schema.clone(), retries).unwrap_err();
            assert_eq!(error.code(), ErrorCode::InvalidRequest, "{schema}: {error}");
        }
        assert_eq!(OutputContract::compile(json!({"type": "object"}), None).unwrap().retries(), 2);
    }

    #[test]
    fn errors_name_where_the_value_is_wrong() {
        let contract = OutputContract::compile(
            json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"},
                   "tags": {"type": "array", "items": {"type": "string"}}}}),
            None,
        )
        .unwrap();
        assert_eq!(contract.check(&json!({"n": 1, "tags": ["a"]})), Ok(()));
        let errors = contract.check(&json!({"n": "one", "tags": ["a", 2]})).unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors.iter().any(|e| e.starts_with("/n: ")), "{errors:?}");
        assert!(errors.iter().any(|e| e.starts_with("/tags/1: ")), "{errors:?}");
        let errors = contract.check(&json!({})).unwrap_err();
        assert!(errors[0].starts_with("(root): ") && errors[0].contains("\"n\""), "{errors:?}");
    }

    #[test]
    fn text_answers_parse_with_or_without_a_code_fence() {
        let contract = OutputContract::compile(json!({"type": "object"}), None).unwrap();
        assert_eq!(contract.parse_text(" {\"a\": 1}\n"), Ok(json!({"a": 1})));
        assert_eq!(contract.parse_text("```json\n{\"a\": 1}\n```"), Ok(json!({"a": 1})));
        assert!(contract.parse_text("sure! {\"a\": 1}").unwrap_err()[0].starts_with("the answer is not JSON"));
    }
}

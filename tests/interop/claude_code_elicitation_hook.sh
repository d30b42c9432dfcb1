#!/bin/sh
# Claude Code's `Elicitation` hook for test_claude_code.py: records the hook's input (one JSON
# line in $3) and answers the form: action $1 (accept, decline, cancel), `decision` $2.
# Usage (from .claude/settings.json): claude_code_elicitation_hook.sh ACTION DECISION LOG
cat >> "$3"
echo >> "$3"
if [ "$1" = "accept" ]; then
  printf '{"hookSpecificOutput":{"hookEventName":"Elicitation","action":"accept","content":{"decision":"%s"}}}\n' "$2"
else
  printf '{"hookSpecificOutput":{"hookEventName":"Elicitation","action":"%s"}}\n' "$1"
fi

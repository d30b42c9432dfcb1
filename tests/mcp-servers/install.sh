#!/usr/bin/env bash
# Installs the third-party MCP servers deputy's tests run against (pinned in package.json) into
# tests/mcp-servers/node_modules. Idempotent and safe to run concurrently (flock): `cargo test`
# calls it on first use, .ci/run calls it up front. Needs node >= 20 and npm.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec 9>"$here/.install.lock"
flock 9
if [ -x "$here/node_modules/.bin/mcp-server-everything" ] && [ -x "$here/node_modules/.bin/mcp-server-filesystem" ] \
   && [ "$here/node_modules/.package-lock.json" -nt "$here/package.json" ]; then
  exit 0
fi
if [ -f "$here/package-lock.json" ]; then
  npm ci --silent --no-audit --no-fund --prefix "$here" >&2
else
  npm install --silent --no-audit --no-fund --prefix "$here" >&2
fi

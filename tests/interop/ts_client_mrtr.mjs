// Held approvals asked through MRTR, driven by the official TypeScript SDK v2 client (npm
// `@modelcontextprotocol/client`, the 2026-07-28 line; the v1 `@modelcontextprotocol/sdk`
// speaks 2025-11-25 at most and has no `input_required`). The client pins 2026-07-28,
// declares form elicitation and not the tasks extension, as Claude Code does, and answers
// `elicitation/create` through its handler, which the SDK's multi-round-trip driver calls for
// each `inputRequests` entry before retrying the `tools/call`. Over stdio and HTTP: allow
// writes the file, deny refuses it to the model, decline and cancel answer
// `pending_tool_calls`.
//
// Usage: DEPUTY_BIN=… TS_CLIENT_DIR=<directory with node_modules/@modelcontextprotocol/client> node ts_client_mrtr.mjs

import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

import { Report, assert, deadline, deputyEnv, serveArgs, startHttpDeputy, startMockLlm, DEPUTY } from "./lib.mjs";

const dist = join(process.env.TS_CLIENT_DIR ?? "", "node_modules/@modelcontextprotocol/client/dist");
const load = (file) => import(pathToFileURL(join(dist, file)).href);
const { Client, StreamableHTTPClientTransport } = await load("index.mjs");
const { StdioClientTransport } = await load("stdio.mjs");
deadline(180);

const report = new Report("ts-client-mrtr");
const mock = await startMockLlm();
const env = deputyEnv(mock);

/** A 2026-07-28 client with form elicitation; its user answers every form with `answer`. */
function client(answer, asked) {
  const made = new Client(
    { name: "deputy-interop-mrtr", version: "0" },
    { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode: { pin: "2026-07-28" } } },
  );
  made.setRequestHandler("elicitation/create", async (request) => {
    asked.push(request.params.message);
    if (answer === "allow" || answer === "deny") return { action: "accept", content: { decision: answer } };
    return { action: answer };
  });
  return made;
}

async function approve(transportName, connect, workspace) {
  for (const answer of ["allow", "deny", "decline", "cancel"]) {
    await report.check(`${transportName}: ${answer}`, async () => {
      const asked = [];
      const path = `${answer}-${transportName}.txt`;
      const session = await connect(client(answer, asked));
      try {
        assert(session.getNegotiatedProtocolVersion() === "2026-07-28", session.getNegotiatedProtocolVersion());
        const result = await session.callTool({
          name: "session_create", arguments: { prompt: `write ${path}`, approval: "always" },
        });
        assert(!result.isError, JSON.stringify(result));
        const created = result.structuredContent;
        assert(asked.length === 1 && asked[0].includes("write_file") && asked[0].includes(path), JSON.stringify(asked));
        const written = existsSync(join(workspace, path));
        if (answer === "allow") {
          assert(created.status === "completed" && created.text === "Written.", JSON.stringify(created));
          assert(written && readFileSync(join(workspace, path), "utf8") === "approved", "the file is written");
        } else if (answer === "deny") {
          assert(created.status === "completed" && created.text === "Refused.", JSON.stringify(created));
          assert(!written, "a denied call writes nothing");
        } else {
          assert(created.status === "pending_tool_calls", JSON.stringify(created));
          assert(created.pending?.[0]?.kind === "approval", JSON.stringify(created));
          assert(!written, "a pending call writes nothing");
        }
      } finally {
        await session.close();
      }
    });
  }
}

await approve("stdio", async (made) => {
  await made.connect(new StdioClientTransport({ command: DEPUTY, args: serveArgs(), env, stderr: "inherit" }));
  return made;
}, env.DEPUTY_WORKSPACE);

// The operator lets token-less loopback callers write (deputy denies it by default: G6), as
// a local operator would, so an allowed write over HTTP is written.
mkdirSync(join(env.XDG_CONFIG_HOME, "deputy"), { recursive: true });
writeFileSync(join(env.XDG_CONFIG_HOME, "deputy", "config.toml"), '[policy]\nanonymous_writes = "allow"\n');
const deputy = await startHttpDeputy(env);
try {
  await approve("http", async (made) => {
    await made.connect(new StreamableHTTPClientTransport(new URL(deputy.url)));
    return made;
  }, env.DEPUTY_WORKSPACE);
} finally {
  const code = await deputy.stop();
  await report.check("http: deputy exits cleanly", async () => assert(code === 0, `deputy exited ${code}`));
}

mock.close();
report.finish();

// deputy driven by the official TypeScript SDK client (npm `@modelcontextprotocol/sdk`, v1),
// over stdio and streamable HTTP: every tool succeeds, and SESSION_NOT_FOUND, SESSION_BUSY and
// INVALID_REQUEST come back as error results the caller can read, and sessions are resources it
// can list, read (state, transcript, tool output) and subscribe to. Since 1.24 the client checks
// `structuredContent` against the tool's `outputSchema` on every result, errors included, and
// compiles the schemas with Ajv, which warns about every format it does not know.
//
// Usage: DEPUTY_BIN=… TS_SDK_DIR=<directory with node_modules/@modelcontextprotocol/sdk> node ts_sdk_client.mjs

import { join } from "node:path";
import { pathToFileURL } from "node:url";

import { Report, assert, deadline, deputyEnv, serveArgs, startHttpDeputy, startMockLlm, DEPUTY } from "./lib.mjs";

const sdk = join(process.env.TS_SDK_DIR ?? "", "node_modules/@modelcontextprotocol/sdk/dist/esm/client");
const load = (file) => import(pathToFileURL(join(sdk, file)).href);
const { Client } = await load("index.js");
const { StdioClientTransport } = await load("stdio.js");
const { StreamableHTTPClientTransport } = await load("streamableHttp.js");
const { ResourceUpdatedNotificationSchema } = await load("../types.js");

// Everything the SDK prints (Ajv's "unknown format" warnings among it).
const printed = [];
for (const level of ["warn", "error", "log"]) {
  const original = console[level].bind(console);
  console[level] = (...args) => {
    const line = args.map(String).join(" ");
    if (!line.startsWith("PASS ") && !line.startsWith("FAIL ")) printed.push(line);
    original(...args);
  };
}
deadline(180);

const report = new Report("ts-sdk");
const mock = await startMockLlm();
const env = deputyEnv(mock);

/** An error result: isError, `CODE: message`, no structuredContent, the body in `_meta["deputy/error"]`. */
function expectError(result, code) {
  assert(result.isError === true, `expected an error result, got ${JSON.stringify(result)}`);
  assert(result.structuredContent === undefined, `an error result has no structuredContent: ${JSON.stringify(result)}`);
  const text = result.content?.[0]?.text ?? "";
  assert(text.startsWith(`${code}: `), `text ${JSON.stringify(text)} must start with ${code}`);
  const body = result._meta?.["deputy/error"];
  assert(body?.code === code, `_meta["deputy/error"] ${JSON.stringify(body)} must carry ${code}`);
  assert(text === `${body.code}: ${body.message}`, "the text is the body's code and message");
}

async function ok(client, name, args) {
  const result = await client.callTool({ name, arguments: args });
  assert(!result.isError, `${name} failed: ${JSON.stringify(result)}`);
  assert(result.structuredContent, `${name} has structured content`);
  return result.structuredContent;
}

async function drive(transportName, client) {
  const at = (label) => `${transportName}: ${label}`;
  let id;
  let bigSession;
  let bigToolUseId;
  await report.check(at("tools/list shows 12 tools with output schemas"), async () => {
    const { tools } = await client.listTools();
    assert(tools.length === 12, `${tools.length} tools`);
    assert(tools.every((tool) => tool.outputSchema?.type === "object"), "every tool has an outputSchema");
  });
  await report.check(at("session_create"), async () => {
    const created = await ok(client, "session_create", { prompt: "hello", labels: { via: "ts-sdk" } });
    assert(created.status === "completed" && created.text === "You said: hello", JSON.stringify(created));
    id = created.session_id;
  });
  await report.check(at("session_turn"), async () => {
    const turn = await ok(client, "session_turn", { session_id: id, prompt: "again" });
    assert(turn.turn === 2 && turn.text === "You said: again", JSON.stringify(turn));
  });
  await report.check(at("session_read"), async () => {
    const read = await ok(client, "session_read", { session_id: id });
    assert(read.state.turns === 2, JSON.stringify(read.state));
  });
  await report.check(at("session_list"), async () => {
    const listed = await ok(client, "session_list", {});
    assert(listed.sessions.some((session) => session.session_id === id), "the session is listed");
  });
  await report.check(at("session_compact"), async () => {
    const compacted = await ok(client, "session_compact", { session_id: id });
    assert(compacted.session_id === id, JSON.stringify(compacted));
  });
  await report.check(at("session_send, delivered with the next turn; session_events pages its journal"), async () => {
    const created = await ok(client, "session_create", { prompt: "expect mail" });
    const sent = await ok(client, "session_send", { session_id: created.session_id, message: "a note from the TS client" });
    assert(sent.delivered === "queued" && sent.message_id.startsWith("m-"), JSON.stringify(sent));
    const read = await ok(client, "session_read", { session_id: created.session_id });
    assert(read.state.inbox.waiting === 1, JSON.stringify(read.state.inbox));
    const turn = await ok(client, "session_turn", { session_id: created.session_id, prompt: "read your mail" });
    assert(turn.text.includes("a note from the TS client") && turn.text.endsWith("read your mail"), turn.text);
    const first = await ok(client, "session_events", { session_id: created.session_id, limit: 3 });
    assert(first.events.length === 3 && first.events[0].seq === 0, JSON.stringify(first));
    const rest = await ok(client, "session_events", { session_id: created.session_id, after_seq: first.next_seq });
    assert(rest.events[0].seq === first.next_seq + 1, JSON.stringify(rest.events[0]));
    const kinds = [...first.events, ...rest.events].map((stored) => stored.event.type);
    assert(kinds.includes("inbox_delivered") && kinds.includes("turn_completed"), kinds.join(","));
  });
  await report.check(at("session_tool_output"), async () => {
    const before = mock.toolUseIds.length;
    const created = await ok(client, "session_create", { prompt: "read big.txt", context: { tool_output_cap_bytes: 1024 } });
    assert(created.text === "I read it.", JSON.stringify(created));
    const toolUseId = mock.toolUseIds[before];
    const output = await ok(client, "session_tool_output", { session_id: created.session_id, tool_use_id: toolUseId });
    assert(output.content.includes("0123456789abcdef") && output.bytes > 30000, `${output.bytes} bytes`);
    [bigSession, bigToolUseId] = [created.session_id, toolUseId];
  });
  await report.check(at("sessions as resources: list, read each kind, templates"), async () => {
    const { resources } = await client.listResources();
    const uris = resources.map((resource) => resource.uri);
    for (const uri of [`deputy://sessions/${id}`, `deputy://sessions/${id}/transcript`]) {
      assert(uris.includes(uri), `${uri} listed among ${uris}`);
    }
    const { resourceTemplates } = await client.listResourceTemplates();
    assert(resourceTemplates.length === 5, JSON.stringify(resourceTemplates)); // sessions: 4, agents: 1
    const state = JSON.parse((await client.readResource({ uri: `deputy://sessions/${id}` })).contents[0].text);
    assert(state.session_id === id && state.state.turns === 2, JSON.stringify(state.state));
    const transcript = (await client.readResource({ uri: `deputy://sessions/${id}/transcript` })).contents[0];
    assert(transcript.mimeType === "text/markdown" && transcript.text.includes("## User\n\nagain"), transcript.text);
    const output = await client.readResource({ uri: `deputy://sessions/${bigSession}/tool-outputs/${bigToolUseId}` });
    assert(output.contents[0].text.includes("0123456789abcdef") && output.contents[0].text.length > 30000, "whole output");
  });
  await report.check(at("resources/subscribe, then resources/updated after a turn"), async () => {
    const uri = `deputy://sessions/${id}`;
    const updated = new Promise((resolve) => {
      client.setNotificationHandler(ResourceUpdatedNotificationSchema, (notification) => resolve(notification.params.uri));
    });
    await client.subscribeResource({ uri });
    await ok(client, "session_turn", { session_id: id, prompt: "once more" });
    const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error("no resources/updated in 10 s")), 10_000));
    assert((await Promise.race([updated, timeout])) === uri, "the subscribed URI was updated");
  });
  await report.check(at("SESSION_BUSY while a turn runs, then session_interrupt"), async () => {
    const running = await ok(client, "session_turn", { session_id: id, prompt: "slow", wait_ms: 300 });
    assert(running.status === "running", JSON.stringify(running));
    expectError(await client.callTool({ name: "session_turn", arguments: { session_id: id, prompt: "x" } }), "SESSION_BUSY");
    const interrupted = await ok(client, "session_interrupt", { session_id: id });
    assert(interrupted.interrupted === true, JSON.stringify(interrupted));
  });
  await report.check(at("SESSION_NOT_FOUND"), async () => {
    const unknown = "00000000-0000-0000-0000-000000000000";
    expectError(await client.callTool({ name: "session_read", arguments: { session_id: unknown } }), "SESSION_NOT_FOUND");
  });
  await report.check(at("INVALID_REQUEST"), async () => {
    expectError(await client.callTool({ name: "session_turn", arguments: { session_id: 42, prompt: "x" } }), "INVALID_REQUEST");
  });
  await report.check(at("session_archive"), async () => {
    const archived = await ok(client, "session_archive", { session_id: id });
    assert(archived.archived === true, JSON.stringify(archived));
  });
}

await report.check("stdio", async () => {
  const transport = new StdioClientTransport({ command: DEPUTY, args: serveArgs(), env, stderr: "inherit" });
  const client = new Client({ name: "deputy-interop", version: "0" });
  await client.connect(transport);
  try {
    await drive("stdio", client);
  } finally {
    await client.close();
  }
});

await report.check("http", async () => {
  const deputy = await startHttpDeputy(env);
  const client = new Client({ name: "deputy-interop", version: "0" });
  try {
    await client.connect(new StreamableHTTPClientTransport(new URL(deputy.url)));
    await drive("http", client);
    await client.close();
  } finally {
    const code = await deputy.stop();
    assert(code === 0, `deputy exited ${code}`);
  }
});

await report.check("no schema warnings from the client (Ajv's unknown formats)", async () => {
  const warnings = printed.filter((line) => /unknown format|schema/i.test(line));
  assert(warnings.length === 0, `${warnings.length} lines, e.g. ${warnings[0]}`);
});

mock.close();
report.finish();

// Shared by the Node interop scripts: a small Anthropic Messages mock (written independently of
// deputy's Rust mock), deputy's environment, and starting `deputy serve --http`.
//
// The mock answers every POST .../v1/messages with one streamed reply in the Messages wire
// format. The prompt decides which:
//   "slow"          text after 3 s, so a turn is still running when the caller looks;
//   "read big.txt"  a `read_file` call on big.txt, then (after the tool result) text;
//   "write PATH"    a `write_file` call of "approved" to PATH, then "Written." or, when the
//                   call was refused (an error result), "Refused.";
//   anything else   the text "You said: <prompt>".

import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const DEPUTY = process.env.DEPUTY_BIN;
if (!DEPUTY) {
  console.error("DEPUTY_BIN must name the deputy binary");
  process.exit(2);
}

const sse = (event, data) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;

/** Starts the mock; resolves to `{url, toolUseIds, close}` (`toolUseIds`: every read_file call made). */
export function startMockLlm() {
  const toolUseIds = [];
  const server = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk) => (body += chunk));
    request.on("end", () => {
      const message = JSON.parse(body || "{}");
      const last = message.messages?.at(-1)?.content ?? [];
      const blocks = typeof last === "string" ? [{ type: "text", text: last }] : last;
      const toolResult = blocks.some((block) => block.type === "tool_result");
      const refused = blocks.some((block) => block.type === "tool_result" && block.is_error === true);
      const prompt = blocks.filter((block) => block.type === "text").map((block) => block.text).join("");
      const write = /^write (\S+)$/.exec(prompt);
      const usage = { input_tokens: 12, output_tokens: 1, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 };
      const events = [
        sse("message_start", {
          type: "message_start",
          message: { id: "msg_mock", type: "message", role: "assistant", content: [], model: message.model,
                     stop_reason: null, stop_sequence: null, usage },
        }),
      ];
      let stop = "end_turn";
      if (!toolResult && prompt === "read big.txt") {
        const id = `toolu_mock_${toolUseIds.length + 1}`;
        toolUseIds.push(id);
        events.push(
          sse("content_block_start", { type: "content_block_start", index: 0,
                                       content_block: { type: "tool_use", id, name: "read_file", input: {} } }),
          sse("content_block_delta", { type: "content_block_delta", index: 0,
                                       delta: { type: "input_json_delta", partial_json: '{"path": "big.txt"}' } }),
          sse("content_block_stop", { type: "content_block_stop", index: 0 }),
        );
        stop = "tool_use";
      } else if (!toolResult && write) {
        const input = JSON.stringify({ path: write[1], content: "approved" });
        events.push(
          sse("content_block_start", { type: "content_block_start", index: 0,
                                       content_block: { type: "tool_use", id: "toolu_write", name: "write_file", input: {} } }),
          sse("content_block_delta", { type: "content_block_delta", index: 0,
                                       delta: { type: "input_json_delta", partial_json: input } }),
          sse("content_block_stop", { type: "content_block_stop", index: 0 }),
        );
        stop = "tool_use";
      } else {
        const answered = refused ? "Refused." : blocks.some((block) => block.tool_use_id === "toolu_write") ? "Written." : "I read it.";
        const text = toolResult ? answered : `You said: ${prompt}`;
        events.push(
          sse("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
          sse("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text } }),
          sse("content_block_stop", { type: "content_block_stop", index: 0 }),
        );
      }
      events.push(
        sse("message_delta", { type: "message_delta", delta: { stop_reason: stop, stop_sequence: null },
                               usage: { output_tokens: 6 } }),
        sse("message_stop", { type: "message_stop" }),
      );
      const send = () => {
        response.writeHead(200, { "content-type": "text/event-stream", connection: "close" });
        response.end(events.join(""));
      };
      if (!toolResult && prompt === "slow") setTimeout(send, 3000);
      else send();
    });
  });
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      const url = `http://127.0.0.1:${server.address().port}`;
      resolve({ url, toolUseIds, close: () => { server.closeAllConnections(); server.close(); } });
    });
  });
}

/** A workspace with big.txt (40 KB, over a 1 KiB ingest cap) and deputy's environment for `mock`. */
export function deputyEnv(mock) {
  const home = mkdtempSync(join(tmpdir(), "deputy-interop-"));
  writeFileSync(join(home, "big.txt"), "0123456789abcdef\n".repeat(2400));
  const env = { ...process.env };
  delete env.DEPUTY_CONFIG;
  delete env.DEPUTY_STORE;
  return {
    ...env,
    ANTHROPIC_API_KEY: "test-key",
    ANTHROPIC_BASE_URL: mock.url,
    DEPUTY_MODEL: "anthropic:claude-mock",
    XDG_CONFIG_HOME: home,
    DEPUTY_WORKSPACE: home,
    RUST_LOG: "warn",
  };
}

/**
 * `serve` and its flags for an MCP client that starts deputy itself: in memory, and in this
 * process (`--no-daemon`) once deputy has a background server to hand the client to.
 */
export function serveArgs() {
  const help = spawnSync(DEPUTY, ["serve", "--help"], { encoding: "utf8" }).stdout ?? "";
  return ["serve", "--ephemeral", ...(help.includes("--no-daemon") ? ["--no-daemon"] : [])];
}

/** `deputy serve --ephemeral --http 127.0.0.1:PORT`, ready when /healthz answers. */
export async function startHttpDeputy(env) {
  const port = await new Promise((resolve) => {
    const probe = createServer();
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
  const child = spawn(DEPUTY, ["serve", "--ephemeral", "--http", `127.0.0.1:${port}`], {
    env, stdio: ["ignore", "ignore", "inherit"],
  });
  const base = `http://127.0.0.1:${port}`;
  for (let attempt = 0; attempt < 200; attempt++) {
    try {
      if ((await fetch(`${base}/healthz`)).ok) break;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
  return { url: `${base}/mcp`, stop: () => { child.kill("SIGTERM"); return exited; } };
}

/** Counts and prints one line per case; `finish` exits non-zero if any failed. */
export class Report {
  constructor(name) {
    this.name = name;
    this.passed = 0;
    this.failed = 0;
  }

  async check(label, body) {
    try {
      await body();
      this.passed++;
      console.log(`PASS ${label}`);
    } catch (error) {
      this.failed++;
      console.log(`FAIL ${label}: ${error?.stack ?? error}`);
    }
  }

  finish() {
    console.log(`${this.name}: ${this.passed} passed, ${this.failed} failed`);
    process.exit(this.failed === 0 ? 0 : 1);
  }
}

/** Fails the whole run, rather than let it hang, once it has taken over `seconds`. */
export function deadline(seconds) {
  setTimeout(() => {
    console.log(`FAIL: the whole run took over ${seconds} s`);
    process.exit(1);
  }, seconds * 1000).unref();
}

export function assert(condition, message) {
  if (!condition) throw new Error(message);
}

// deputy under the MCP Inspector's command line (npm `@modelcontextprotocol/inspector`) over
// stdio: `tools/list --strict` finds no schema portability error, a successful call prints its
// result, and an error call is a readable error result (the Inspector validates structured
// content against the tool's outputSchema, errors included). Each stdio command is one
// Inspector process that starts its own deputy.
//
// A turn longer than deputy's task grace (2 s; the mock's "slow" prompt takes 3 s), over stdio
// and HTTP, on both protocol eras the Inspector speaks (`--protocol-era legacy`: 2025-11-25,
// `modern`: pinned 2026-07-28). The Inspector advertises the tasks extension on both; deputy
// offers tasks only on 2026-07-28, so the 2025-11-25 call waits (`wait_ms`) and the 2026-07-28
// one gets a task the Inspector follows to the tool's result. Either way the result carries
// the structured content the outputSchema promises.
//
// Usage: DEPUTY_BIN=… INSPECTOR_DIR=<directory with node_modules/.bin/inspector> node inspector_cli.mjs

import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { Report, assert, deadline, deputyEnv, serveArgs, startHttpDeputy, startMockLlm, DEPUTY } from "./lib.mjs";

const inspector = join(process.env.INSPECTOR_DIR ?? "", "node_modules/.bin/inspector");
const TOOL_ERROR_EXIT = 5; // the Inspector's exit code for a result with isError: true

deadline(240);

const report = new Report("inspector");
const mock = await startMockLlm();
const env = deputyEnv(mock);
const forwarded = ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "DEPUTY_MODEL", "XDG_CONFIG_HOME", "DEPUTY_WORKSPACE", "RUST_LOG"];
// The Inspector keeps a catalog under HOME; give it a scratch one.
const inspectorHome = mkdtempSync(join(tmpdir(), "inspector-home-"));

/** One Inspector CLI command against a fresh stdio deputy: `{code, stdout, stderr}`. */
function run(options) {
  return inspect(["--cli", ...forwarded.flatMap((name) => ["-e", `${name}=${env[name]}`]), "--format", "json", ...options,
                  "--", DEPUTY, ...serveArgs()]);
}

/** One Inspector CLI command against the deputy serving MCP at `url`. */
function runHttp(url, options) {
  return inspect(["--cli", "--format", "json", "--transport", "http", "--server-url", url, ...options]);
}

function inspect(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(inspector, args, {
      env: { ...process.env, HOME: inspectorHome, MCP_CATALOG_PATH: join(inspectorHome, "catalog.json") },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk) => (stdout += chunk));
    child.stderr.on("data", (chunk) => (stderr += chunk));
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.on("error", reject);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

function envelope(output) {
  try {
    return JSON.parse(output.stdout.trim().split("\n").at(-1));
  } catch {
    throw new Error(`exit ${output.code}, no JSON on stdout: ${output.stdout}\n${output.stderr}`);
  }
}

await report.check("stdio: tools/list --strict finds no portability error", async () => {
  const output = await run(["--method", "tools/list", "--strict"]);
  assert(output.code === 0, `exit ${output.code}: ${output.stderr}`);
  const tools = envelope(output).result.tools;
  assert(tools.length === 12, `${tools.length} tools`);
  const errors = (envelope(output).schemaFindings ?? []).flatMap((tool) => tool.findings).filter((f) => f.severity === "error");
  assert(errors.length === 0, JSON.stringify(errors));
  assert(!/unknown format/.test(output.stderr), `Ajv warnings: ${output.stderr.slice(0, 300)}`);
});

await report.check("stdio: a successful tools/call", async () => {
  const output = await run(["--method", "tools/call", "--tool-name", "session_create", "--tool-arg", "prompt=hello"]);
  assert(output.code === 0, `exit ${output.code}: ${output.stdout}${output.stderr}`);
  const result = envelope(output).result;
  assert(result.structuredContent?.text === "You said: hello", JSON.stringify(result));
});

await report.check("stdio: an error tools/call is a readable SESSION_NOT_FOUND result", async () => {
  const output = await run(["--method", "tools/call", "--tool-name", "session_read",
                            "--tool-arg", "session_id=00000000-0000-0000-0000-000000000000"]);
  assert(output.code === TOOL_ERROR_EXIT, `exit ${output.code} (want ${TOOL_ERROR_EXIT}): ${output.stdout}${output.stderr}`);
  const result = envelope(output).result;
  assert(result?.isError === true, JSON.stringify(envelope(output)));
  assert(result.structuredContent === undefined, "no structuredContent");
  assert(result.content[0].text.startsWith("SESSION_NOT_FOUND: "), result.content[0].text);
  assert(result._meta?.["deputy/error"]?.code === "SESSION_NOT_FOUND", JSON.stringify(result._meta));
});

/** `session_create` of a turn longer than the task grace, on `era`, through `call`. */
async function longTurn(call, era) {
  const started = Date.now();
  const output = await call(["--protocol-era", era, "--method", "tools/call", "--tool-name", "session_create",
                             "--tool-arg", "prompt=slow"]);
  const took = Date.now() - started;
  assert(output.code === 0, `exit ${output.code}: ${output.stdout}${output.stderr}`);
  const result = envelope(output).result;
  assert(result?.structuredContent?.text === "You said: slow", JSON.stringify(envelope(output)));
  assert(result.structuredContent.status === "completed", JSON.stringify(result.structuredContent));
  assert(took >= 2500, `the turn took only ${took} ms, not longer than the task grace`);
}

for (const era of ["legacy", "modern"]) {
  await report.check(`stdio, ${era} era: a turn longer than the task grace`, () => longTurn(run, era));
}

const http = await startHttpDeputy(env);
try {
  for (const era of ["legacy", "modern"]) {
    await report.check(`HTTP, ${era} era: a turn longer than the task grace`,
                       () => longTurn((options) => runHttp(http.url, options), era));
  }
} finally {
  await http.stop();
}

mock.close();
report.finish();

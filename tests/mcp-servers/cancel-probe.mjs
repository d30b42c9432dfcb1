// A minimal MCP server (official TypeScript SDK) whose only tool waits until the client
// cancels it, logging "started" and "cancelled" to $PROBE_LOG: the tests' evidence that a
// `notifications/cancelled` from deputy reached the server.
import { appendFileSync } from "node:fs";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const log = (line) => {
  if (process.env.PROBE_LOG) appendFileSync(process.env.PROBE_LOG, line + "\n");
};
const server = new Server({ name: "cancel-probe", version: "1.0.0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: [{ name: "wait", description: "Waits up to 60 s or until cancelled", inputSchema: { type: "object", properties: {} } }],
}));
server.setRequestHandler(CallToolRequestSchema, async (_request, extra) => {
  log("started");
  await new Promise((resolve) => {
    const timer = setTimeout(resolve, 60_000);
    extra.signal.addEventListener("abort", () => {
      clearTimeout(timer);
      log("cancelled");
      resolve();
    });
  });
  return { content: [{ type: "text", text: "waited" }] };
});
await server.connect(new StdioServerTransport());

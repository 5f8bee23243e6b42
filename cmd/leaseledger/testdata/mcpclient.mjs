// The official TypeScript MCP client (@modelcontextprotocol/sdk, pinned in
// package.json) against a running `leaseledger serve --config`: the steps of
// TestGatewayEndToEnd's go-sdk client, one JSON object of results on stdout.
//
//   node mcpclient.mjs <endpoint url> <stdio server> <http server>
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, stdioServer, httpServer] = process.argv.slice(2);
const out = {};
const client = new Client({ name: "leaseledger-e2e-ts", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);
out.session = transport.sessionId;

const tools = await client.listTools();
out.tools = tools.tools.map((t) => t.name);

const text = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("");
out.echo = text(await client.callTool({ name: `${stdioServer}__echo`, arguments: { message: "from ts" } }));
out.echoHttp = text(await client.callTool({ name: `${httpServer}__echo`, arguments: { message: "from ts over http" } }));

// Every page: the gateway pages through the servers in order, so the
// later servers' resources are on later pages.
const resources = [];
let cursor;
do {
  const res = await client.listResources(cursor === undefined ? undefined : { cursor });
  resources.push(...res.resources);
  cursor = res.nextCursor;
} while (cursor);
out.resources = resources.map((r) => r.uri);
const first = resources.find((r) => r.uri.startsWith(`leaseledger://${stdioServer}/`));
if (first) {
  const read = await client.readResource({ uri: first.uri });
  out.read = { uri: read.contents[0]?.uri, bytes: (read.contents[0]?.text ?? read.contents[0]?.blob ?? "").length };
}
const templates = await client.listResourceTemplates();
out.templates = templates.resourceTemplates.map((t) => t.uriTemplate);

// A long call, cancelled once its first progress notification arrived:
// the SDK sends notifications/cancelled and rejects the call.
const ac = new AbortController();
let progress = 0;
const started = Date.now();
try {
  await client.callTool(
    { name: `${stdioServer}__trigger-long-running-operation`, arguments: { duration: 30, steps: 30 } },
    undefined,
    { signal: ac.signal, timeout: 60000, onprogress: () => { progress++; ac.abort("test cancels"); } },
  );
  out.cancel = { cancelled: false };
} catch (e) {
  out.cancel = { cancelled: ac.signal.aborted, progress, ms: Date.now() - started };
}

// Close the session: DELETE ends it on the gateway (and its leases).
await transport.terminateSession();
await client.close();
console.log(JSON.stringify(out));

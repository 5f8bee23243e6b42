// The official TypeScript MCP client (@modelcontextprotocol/sdk, pinned in
// package.json) through a running `leaseledger serve --config` whose
// mcp.json holds server-everything and the go-sdk test server, both with
// "prefix": "": the steps of TestEverythingClients' go-sdk client, one JSON
// object of results on stdout for the Go test to assert. A step that fails
// records its error under its name and the script goes on; waits for
// notifications are bounded by HANG_MS (a hang bound, not a timing).
//
//   node everything_client.mjs <endpoint url> <everything server> <test server> \
//        <sampled text> <elicited name> <root uri>
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
  ToolListChangedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const HANG_MS = 60000;
const [url, allServer, ownServer, sampled, elicited, rootURI] = process.argv.slice(2);
const out = {};

// What the client saw, and the waits on it: every handler wakes the waiters.
const seen = { logs: [], updated: [], toolsChanged: 0, samples: [], elicits: 0, roots: 0 };
let waiters = [];
const wake = () => {
  const w = waiters;
  waiters = [];
  for (const f of w) f();
};
const until = (what, cond) =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`not within ${HANG_MS} ms: ${what}`)), HANG_MS);
    const check = () => {
      if (cond()) {
        clearTimeout(timer);
        resolve();
      } else {
        waiters.push(check);
      }
    };
    check();
  });

const client = new Client(
  { name: "leaseledger-e2e-ts", version: "1.0.0" },
  { capabilities: { sampling: {}, elicitation: { form: {} }, roots: { listChanged: true } } },
);
client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
  seen.samples.push(req.params.messages?.[0]?.content?.text ?? "");
  wake();
  return { role: "assistant", model: "e2e-model", content: { type: "text", text: sampled } };
});
let elicitAction = "accept";
client.setRequestHandler(ElicitRequestSchema, async () => {
  seen.elicits++;
  wake();
  return elicitAction === "accept" ? { action: "accept", content: { name: elicited } } : { action: "decline" };
});
client.setRequestHandler(ListRootsRequestSchema, async () => {
  seen.roots++;
  wake();
  return { roots: [{ uri: rootURI, name: "e2e" }] };
});
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
  const p = n.params;
  seen.logs.push({ level: p.level, logger: p.logger ?? "", data: typeof p.data === "string" ? p.data : JSON.stringify(p.data) });
  wake();
});
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
  seen.updated.push(n.params.uri);
  wake();
});
client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
  seen.toolsChanged++;
  wake();
});

const text = (r) => (r.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("");
const call = async (name, args = {}) => text(await client.callTool({ name, arguments: args }));
// errorCode runs fn and returns the JSON-RPC code it failed with (null: it did not fail).
const errorCode = async (fn) => {
  try {
    await fn();
    return null;
  } catch (e) {
    return e?.code ?? String(e?.message ?? e);
  }
};
const step = async (name, fn) => {
  try {
    out[name] = await fn();
  } catch (e) {
    out[name] = { error: String(e?.message ?? e), code: e?.code };
  }
};
const ownLog = (level) => seen.logs.some((l) => l.logger === ownServer && l.level === level);

const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);
out.session = transport.sessionId;

// The level first: the servers are started by the listing below, each is
// sent it right after its initialize.
await step("setLevelInfo", async () => (await client.setLoggingLevel("info"), "ok"));
await step("tools", async () => (await client.listTools()).tools.map((t) => t.name));
await step("echoCode", () => errorCode(() => client.callTool({ name: "echo", arguments: { message: "x", text: "x" } })));
await step("sum", () => call("get-sum", { a: 2, b: 3 }));
await step("ownProgress", () => call("progress", { n: 0 }));

// Logging: the test server logs only once a level is set (go-sdk); at
// info, its debug message is held back and its info message arrives
// (before the call's result: on the call's stream). server-everything's
// roots sync logs at info under its own logger.
await step("logAtInfo", async () => {
  await call("log", { level: "debug" });
  await call("log", { level: "info" });
  await until("the test server's info log", () => ownLog("info"));
  return { info: true, debug: ownLog("debug") };
});
await step("rootsLog", async () => {
  await until("server-everything's roots sync log", () =>
    seen.logs.some((l) => l.logger === `${allServer}/everything-server` && l.data.includes("Roots updated")));
  return seen.logs.find((l) => l.logger === `${allServer}/everything-server` && l.data.includes("Roots updated"));
});

// Prompts: every page, every prompt got (slow is held until cancelled).
const promptArgs = { city: "Paris", state: "Texas", department: "Engineering", name: "Alice", resourceType: "Text", resourceId: "1" };
await step("prompts", async () => {
  const all = [];
  let cursor;
  do {
    const res = await client.listPrompts(cursor === undefined ? undefined : { cursor });
    all.push(...res.prompts);
    cursor = res.nextCursor;
  } while (cursor);
  const got = {};
  for (const p of all) {
    if (p.name === "slow") continue;
    const args = {};
    for (const a of p.arguments ?? []) {
      if (!(a.name in promptArgs)) throw new Error(`no value for argument ${a.name} of prompt ${p.name}`);
      args[a.name] = promptArgs[a.name];
    }
    try {
      const r = await client.getPrompt({ name: p.name, arguments: args });
      got[p.name] = r.messages.map((m) => (m.content.type === "text" ? m.content.text : m.content.type)).join(" | ");
    } catch (e) {
      got[p.name] = { error: String(e?.message ?? e), code: e?.code };
    }
  }
  return { listed: all.map((p) => p.name), got };
});

// Completions: a prompt argument and a template variable of
// server-everything, a prompt argument of the test server.
const values = (r) => r.completion.values;
await step("completePrompt", async () =>
  values(await client.complete({ ref: { type: "ref/prompt", name: "completable-prompt" }, argument: { name: "department", value: "Eng" } })));
await step("completeTemplate", async () =>
  values(await client.complete({ ref: { type: "ref/resource", uri: "demo://resource/dynamic/text/{resourceId}" }, argument: { name: "resourceId", value: "7" } })));
await step("completeOwn", async () =>
  values(await client.complete({ ref: { type: "ref/prompt", name: "greet" }, argument: { name: "name", value: "al" } })));

// A subscription: server-everything acknowledges it with a log message
// and, once its updates are toggled on, sends notifications/resources/updated.
await step("subscription", async () => {
  const resources = [];
  let cursor;
  do {
    const res = await client.listResources(cursor === undefined ? undefined : { cursor });
    resources.push(...res.resources);
    cursor = res.nextCursor;
  } while (cursor);
  const uri = resources.map((r) => r.uri).find((u) => u.startsWith("demo://resource/static/"));
  if (!uri) throw new Error(`no static resource of server-everything among ${resources.map((r) => r.uri)}`);
  await client.subscribeResource({ uri });
  const toggled = await call("toggle-subscriber-updates");
  let waited = "ok";
  try {
    await until("notifications/resources/updated", () => seen.updated.includes(uri));
  } catch (e) {
    waited = String(e?.message ?? e);
  }
  await call("toggle-subscriber-updates"); // off again
  await client.unsubscribeResource({ uri });
  return { uri, toggled, waited, updated: seen.updated,
    ack: seen.logs.find((l) => l.logger === allServer && l.data.includes("Received Subscribe Resource request")) ?? null };
});

await step("sampling", async () => ({ text: await call("trigger-sampling-request", { prompt: "e2e prompt", maxTokens: 5 }), requests: seen.samples }));
await step("elicitAccept", async () => ((elicitAction = "accept"), await call("trigger-elicitation-request")));
await step("elicitDecline", async () => ((elicitAction = "decline"), await call("trigger-elicitation-request")));
out.elicits = seen.elicits;
await step("roots", () => call("get-roots-list"));
out.rootsRequests = seen.roots;

// A list change: the test server's change replaces mutable's schema; the
// gateway tells the client, refuses a call against the listing it showed
// (-32012) and serves it again once the client listed anew.
await step("listChange", async () => {
  const before = await call("mutable", { a: "x" });
  const changesBefore = seen.toolsChanged;
  const changed = await call("change");
  await until("notifications/tools/list_changed", () => seen.toolsChanged > changesBefore);
  const refusedCode = await errorCode(() => client.callTool({ name: "mutable", arguments: { b: 1 } }));
  const listed = (await client.listTools()).tools.map((t) => t.name);
  const after = await call("mutable", { b: 1 });
  return { before, changed, refusedCode, listedMutable: listed.includes("mutable"), after };
});

// The level changed on live servers: at warning, info is held back.
await step("setLevelWarning", async () => (await client.setLoggingLevel("warning"), "ok"));
await step("logAtWarning", async () => {
  const infos = () => seen.logs.filter((l) => l.logger === ownServer && l.level === "info").length;
  const before = infos();
  await call("log", { level: "info" });
  await call("log", { level: "warning" });
  await until("the test server's warning log", () => ownLog("warning"));
  return { warning: true, info: infos() > before };
});
out.logs = seen.logs.map((l) => ({ level: l.level, logger: l.logger, data: l.data.slice(0, 120) }));

// Close the session: DELETE ends it on the gateway (and its leases).
await transport.terminateSession();
await client.close();
console.log(JSON.stringify(out));

// The leaseledger dashboard: follows the ledger's events over the bus's
// NATS WebSocket with read-only rights and asks the projection API for
// state. Every list it keeps is bounded (see the constants below).
//
// Host spaces: when config.json names hosts (serve --host-id, or the
// collector's fleet bus), the page follows one host's space at a time,
// chosen in the #host selector and kept in the URL hash (#host=<id>);
// every subject goes through hostSubject. Switching host drops the
// subscriptions and every view and follows the new host from scratch; a
// generation counter makes late replies and messages of the old host
// harmless. With more than one host, the #fleet strip shows each host's
// mirroring from the fleet-level leaseledger.api.fleet.status (hidden when
// nothing answers it).
//
// Opened at any time, the landing view (Live events) shows what is
// running and what just happened: "Running now" lists the live leases
// (session, server, state, calls) from the projection API, and the event
// list starts with the last INITIAL_BACKLOG events replayed from the
// ledger, then follows live from there without gap or duplicate (the
// guarantee of busclient.Client.Tail, see "events" below).
import { wsconnect, headers as natsHeaders, AuthorizationError } from "@nats-io/nats-core";
import uPlot from "uplot";

// Bounds.
const MAX_EVENTS = 5000; // events kept for the live list (older ones are dropped; replay has them)
const MAX_ROWS = 200; // rows the live list renders (the newest matching ones)
const MAX_PENDING = 20000; // live events held while catching up; beyond, dropped and replayed
const INITIAL_BACKLOG = 1000; // events replayed on open (the newest; fewer when the ledger has fewer), then live
const LEASES_PAGE = 1000; // lease rows asked for (control.MaxLeasesPage; the count says when there are more)
const MAX_RUNNING = 100; // live leases the landing view's "Running now" table renders (all of them: the Leases view)
const MAX_RECENT = 30; // recent activations whose verdict is followed
const MAX_DENIED_SESSIONS = 200; // sessions whose policy denials the page counts (the least recently denied dropped, counted)
const CHART_POINTS = 300; // seconds of history in the charts
const MAX_SHOWN = 2000; // (seq, time shown) pairs kept for measurement
const REFRESH_MS = 150; // lease table refresh after a lease-related event, at most this often
const AUDIT_MS = 1000; // audit summary refresh, at most this often (its own max age)
const RETRY_MS = 1000; // pause between connection attempts
const MAX_HOSTS = 1024; // host spaces offered at most (dashboard.MaxHosts)
const FLEET_MS = 2000; // fleet status refresh
const FLEET_TIMEOUT_MS = 1500; // a fleet status request unanswered by then hides the strip

// Subjects, in the bare space (hostSubject puts them in a host's space).
const ROOT = "leaseledger.";
const HOSTS_ROOT = "leaseledger.hosts.";
const EVENTS = "leaseledger.events.*.*.*";
const CHECKPOINTS = "leaseledger.checkpoints";
const FLEET_STATUS = "leaseledger.api.fleet.status"; // fleet-level: always the bare space
// A host id becomes one subject token: events.ValidID's rule.
const HOST_RE = /^[A-Za-z0-9_-]{1,128}$/;
const STALE = "stale"; // APIError code: the reply came for a host no longer followed

const $ = (id) => document.getElementById(id);
const enc = new TextEncoder();
const dec = new TextDecoder();

// State visible to tests (window.__dashboard): connection state, the next
// seq to apply, and when the last MAX_SHOWN seqs were shown: [seq, shown
// (ms since the epoch), sealed (ms since the epoch)].
const D = {
  state: "connecting",
  next: 0,
  head: { seq: 0, hash: "" },
  shown: [],
  applied: 0,
  replayed: 0, // events applied from replay (catch-up) rather than live
  // backlog: the events replayed on open, seqs from..to (to: the head
  // read when the page started following; -1 before), shown once every
  // one of them is applied.
  backlog: { from: 0, to: -1, shown: false },
  connections: 0,
  host: "", // the host space followed ("" the bare space)
  switches: 0, // host switches done
  subs: 0, // the page's own subscriptions (events, checkpoints)
  // natsSubs: every subscription of the connection (the page's and the
  // request inbox), -1 when not connected.
  natsSubs: () => (nc && nc.protocol && nc.protocol.subscriptions ? nc.protocol.subscriptions.size() : -1),
};
window.__dashboard = D;

let cfg = null;
let creds = null; // {user, password}, in memory only
let nc = null;
let catching = false;
const pending = new Map();
const ring = [];
let paused = false;
let anchor = 0; // while paused: the newest seq the list shows (its position)
let dirtyList = false;
let framePending = false;
let renderedUpTo = 0;
let followedFrom = 0;
let onlineRun = 0; // incremented at every online(): an older one's head retries stop
let hosts = []; // the valid host ids of config.json, in order
let host = ""; // the host followed ("" the bare space)
let gen = 0; // generation: incremented at every host switch
let subs = []; // the page's subscriptions for the host followed

// ---- subjects --------------------------------------------------------------

// hostSubject puts subject in host h's space, the rule of
// busclient.HostSubject: unchanged for the bare space (h "") or a subject
// outside leaseledger.*, else leaseledger.hosts.<h>. + the rest. Every
// subject the page uses for a host goes through it.
function hostSubject(h, s) {
  if (!h || !s.startsWith(ROOT)) return s;
  return HOSTS_ROOT + h + "." + s.slice(ROOT.length);
}

// userSubject is the request subject of an API subject for the user the
// page connected as (busclient.UserSubject).
function userSubject(s) {
  return creds && creds.user ? s + "." + creds.user : s;
}

// subj is the request subject of an API subject of the host followed.
const subj = (s) => userSubject(hostSubject(host, s));

// validHosts keeps the host ids that can be subject tokens, without
// duplicates, at most MAX_HOSTS; it reports how many it left out.
function validHosts(list) {
  const out = [];
  let bad = 0;
  for (const h of Array.isArray(list) ? list : []) {
    if (typeof h === "string" && HOST_RE.test(h) && !out.includes(h) && out.length < MAX_HOSTS) out.push(h);
    else bad++;
  }
  return { hosts: out, bad };
}

// hashHost is the host the URL's hash names (#host=<id>), "" when none.
function hashHost() {
  const m = /^#host=(.*)$/.exec(location.hash);
  if (!m) return "";
  try {
    return decodeURIComponent(m[1]);
  } catch {
    return "";
  }
}

// ---- connection ----------------------------------------------------------

function setState(state, message) {
  D.state = state;
  const st = $("status");
  st.dataset.state = state;
  st.textContent = { connecting: "connecting…", live: "live", unreachable: "bus unreachable", refused: "credentials refused", login: "credentials needed", nows: "no WebSocket", nohost: "no valid host" }[state] || state;
  const b = $("banner");
  if (message) {
    b.textContent = message;
    b.hidden = false;
  } else {
    b.hidden = true;
  }
}

async function start() {
  try {
    const r = await fetch("config.json", { cache: "no-store" });
    cfg = await r.json();
  } catch {
    setState("unreachable", "The dashboard's server is unreachable. Reload the page when serve is back.");
    return;
  }
  if (!cfg.ws_url) {
    setState("nows", "serve has no NATS WebSocket: start it with --ws-port PORT to use the dashboard.");
    return;
  }
  if (!setupHosts()) return;
  if (cfg.credentials_required && !creds) {
    askCredentials();
    return;
  }
  connectLoop();
}

function askCredentials(refused) {
  setState(refused ? "refused" : "login", refused ? "The bus refused these credentials. Check the user and password." : "");
  const f = $("login");
  f.hidden = false;
  f.onsubmit = (e) => {
    e.preventDefault();
    const fd = new FormData(f);
    creds = { user: String(fd.get("user") || ""), password: String(fd.get("password") || "") };
    f.reset();
    f.hidden = true;
    connectLoop();
  };
}

function isAuthError(err) {
  for (let e = err; e; e = e.cause) {
    if (e instanceof AuthorizationError || /authoriz|authentic/i.test(String(e.message || ""))) return true;
  }
  return false;
}

async function connectLoop() {
  setState("connecting");
  for (;;) {
    try {
      const opts = {
        servers: cfg.ws_url,
        maxReconnectAttempts: -1,
        reconnectTimeWait: RETRY_MS,
        pingInterval: 5000,
        maxPingOut: 2,
        name: "leaseledger-dashboard",
      };
      if (creds && creds.user) {
        opts.user = creds.user;
        opts.pass = creds.password;
        opts.inboxPrefix = "_INBOX_" + creds.user;
      }
      nc = await wsconnect(opts);
      break;
    } catch (err) {
      if (isAuthError(err)) {
        creds = null;
        askCredentials(true);
        return;
      }
      setState("unreachable", "The bus is unreachable (" + cfg.ws_url + "). Retrying every second…");
      await sleep(RETRY_MS);
    }
  }
  setState("live");
  D.connections++;
  watchStatus(nc);
  nc.closed().then((err) => {
    nc = null;
    subs = []; // gone with the connection
    D.subs = 0;
    if (err && isAuthError(err)) {
      creds = null;
      askCredentials(true);
    } else {
      connectLoop();
    }
  });
  await follow();
}

// follow subscribes to the host's events and checkpoints (dropping any
// earlier subscription of the page) and catches up. Messages and replies
// that arrive for an older generation are ignored.
async function follow() {
  for (const s of subs) {
    try {
      s.unsubscribe();
    } catch {
      // the connection closed: the subscription went with it
    }
  }
  subs = [];
  D.subs = 0;
  if (!nc) return; // connectLoop follows once connected
  const g = gen;
  subs.push(nc.subscribe(hostSubject(host, EVENTS), { callback: (err, m) => { if (g !== gen) return; if (err) note("events: " + err.message); else onLive(m); } }));
  subs.push(nc.subscribe(hostSubject(host, CHECKPOINTS), { callback: (err, m) => { if (g === gen && !err) showCheckpoint(dec.decode(m.data)); } }));
  D.subs = subs.length;
  await online();
}

// setupHosts reads the hosts of config.json, fills the selector and picks
// the host the URL names (else the first); false when config.json names
// hosts but none is valid (the page must not fall back to the bare space).
function setupHosts() {
  const v = validHosts(cfg.hosts);
  hosts = v.hosts;
  if (v.bad) $("host-note").textContent = v.bad + " invalid host id(s) ignored";
  if (hosts.length === 0) {
    if (v.bad) {
      setState("nohost", "The dashboard's configuration names no valid host id.");
      return false;
    }
    return true;
  }
  const sel = $("host");
  for (const h of hosts) {
    const o = document.createElement("option");
    o.value = h;
    o.textContent = h;
    sel.appendChild(o);
  }
  $("host-label").hidden = false;
  sel.onchange = () => { location.hash = "host=" + encodeURIComponent(sel.value); };
  window.addEventListener("hashchange", () => selectHost(hashHost()));
  selectHost(hashHost());
  if (hosts.length > 1) {
    refreshFleet();
    setInterval(refreshFleet, FLEET_MS);
  }
  return true;
}

// selectHost follows host h (the first host when h is not one of them):
// the views start from scratch and the subscriptions are made anew.
function selectHost(h) {
  if (!hosts.includes(h)) h = hosts[0];
  const want = "#host=" + encodeURIComponent(h);
  if (location.hash !== want) history.replaceState(null, "", want);
  $("host").value = h;
  if (h === host) return;
  const first = host === "";
  host = h;
  D.host = h;
  document.title = "leaseledger · " + h;
  if (!first) {
    gen++;
    D.switches++;
    resetViews();
  }
  renderFleet();
  if (!first && nc) follow();
}

// resetViews forgets everything the page knew of the host it followed.
function resetViews() {
  catching = false; // an older catch-up ends at its next reply
  pending.clear();
  ring.length = 0;
  D.next = 0;
  D.head = { seq: 0, hash: "" };
  D.shown = [];
  D.applied = 0;
  D.replayed = 0;
  D.backlog = { from: 0, to: -1, shown: false };
  followedFrom = 0;
  renderedUpTo = 0;
  paused = false;
  anchor = 0;
  $("pause").textContent = "Pause";
  note("");
  for (const t of [leasesTimer, auditTimer, verdictTimer]) clearTimeout(t);
  leasesTimer = auditTimer = verdictTimer = null;
  auditRetries = 0;
  recent.clear();
  denied.clear();
  deniedDropped = 0;
  dirtyDenied = true;
  liveLeases = 0;
  leasesSeq = 0;
  perSecond.clear();
  for (const k in series) series[k].length = 0;
  cleanupBuckets.fill(0);
  for (const id of ["events-body", "running-body", "leases-body", "recent-body", "unconfirmed-body", "verdicts", "policy", "denied-body", "evidence"]) $(id).replaceChildren();
  for (const id of ["leases-note", "running-note", "backlog-note"]) $(id).textContent = "";
  $("checkpoint").textContent = "none yet";
  dirtyList = true;
  scheduleFrame();
}

// ---- fleet strip -----------------------------------------------------------

let fleet = null; // the last fleet status ({hosts: {id: HostStatus}}), null when none answered

// refreshFleet asks the fleet bus for every host's mirroring; the strip is
// hidden while nothing answers (a host's own bus does not serve it).
async function refreshFleet() {
  if (!nc) {
    fleet = null; // not connected: nothing current to show
    renderFleet();
    return;
  }
  try {
    const st = await request(FLEET_STATUS, {}, FLEET_TIMEOUT_MS, true);
    fleet = st && typeof st.hosts === "object" && st.hosts ? st : null;
  } catch {
    fleet = null;
  }
  renderFleet();
}

function renderFleet() {
  const strip = $("fleet");
  if (!fleet || hosts.length < 2) {
    strip.hidden = true;
    return;
  }
  const frag = document.createDocumentFragment();
  for (const h of hosts) {
    const s = fleet.hosts[h] || {};
    const b = document.createElement("button");
    b.type = "button";
    b.dataset.host = h;
    b.dataset.state = String(s.state || "unknown");
    b.className = "fleet-host" + (h === host ? " selected" : "");
    b.textContent = h + " · " + (s.state || "unknown").replace("_", " ") + " · head " + (s.head ?? "–") + " · lag " + (s.lag ?? "–");
    b.onclick = () => { location.hash = "host=" + encodeURIComponent(h); };
    frag.appendChild(b);
  }
  strip.replaceChildren(frag);
  strip.hidden = false;
}

async function watchStatus(conn) {
  for await (const s of conn.status()) {
    if (s.type === "disconnect" || s.type === "reconnecting") {
      if (D.state !== "unreachable") setState("unreachable", "The bus is unreachable (" + cfg.ws_url + "). Reconnecting…");
    } else if (s.type === "reconnect") {
      setState("live");
      D.connections++;
      online();
    }
  }
}

// online runs after every (re)connection: it catches up from the next seq
// and refreshes the state views. On open (nothing followed yet) it reads
// the head and follows from INITIAL_BACKLOG events before it: the page's
// subscription is made before the head is asked (same connection, so the
// bus has it first), hence every event after the head arrives live and
// every one up to it comes from replay; apply takes each seq once, in
// order. An unanswered head is asked again every RETRY_MS (live events
// are held meanwhile) until it answers, the host changes or the
// connection is re-made.
async function online() {
  const g = gen;
  const run = ++onlineRun;
  for (;;) {
    try {
      const h = await request("leaseledger.api.head", null); // its body must be empty
      if (D.next === 0) {
        D.next = Math.max(1, h.seq - INITIAL_BACKLOG + 1);
        followedFrom = D.next;
        D.backlog = { from: D.next, to: h.seq, shown: h.seq < D.next };
      }
      setHead(h.seq, h.hash);
      if ($("events-note").textContent.startsWith("head: ")) note("");
      break;
    } catch (err) {
      if (err.code === STALE || g !== gen || run !== onlineRun) return;
      note("head: " + err.message + " (asking again)");
      await sleep(RETRY_MS);
      if (!nc || g !== gen || run !== onlineRun) return;
    }
  }
  if (g !== gen) return;
  dirtyList = true;
  scheduleFrame();
  catchUp();
  leasesSeq = 0; // the first answer after a (re)connection is shown, whatever its seq
  refreshLeases();
  if (visible("activations")) refreshAudit();
  requestCheckpoint();
  for (const a of recent.keys()) markDirty(a);
}

class APIError extends Error {
  constructor(msg, code) {
    super(msg);
    this.code = code;
  }
}

// request asks an API subject of the host followed (bare: the bare
// space, for fleet-level services); a reply that arrives after a host
// switch is refused with code STALE.
async function request(subject, body, timeout = 10000, bare = false) {
  if (!nc) throw new APIError("not connected", "");
  const g = gen;
  const m = await nc.request(bare ? userSubject(subject) : subj(subject), body === null ? new Uint8Array(0) : enc.encode(JSON.stringify(body)), { timeout });
  if (!bare && g !== gen) throw new APIError("the host changed", STALE);
  const e = m.headers && m.headers.get("Ledger-Error");
  if (e) throw new APIError(e, m.headers.get("Ledger-Error-Code"));
  return JSON.parse(dec.decode(m.data));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function note(msg) {
  $("events-note").textContent = msg;
}

// ---- events: catch-up then live, no gap, no duplicate --------------------

function onLive(m) {
  const seq = Number(m.headers && m.headers.get("Ledger-Seq"));
  if (!seq) return;
  if (D.next === 0 || catching) {
    hold(seq, m.data);
    return;
  }
  if (seq < D.next) return; // already applied
  if (seq === D.next) {
    apply(JSON.parse(dec.decode(m.data)));
    drain();
    return;
  }
  hold(seq, m.data); // a gap: replay fills it
  catchUp();
}

function hold(seq, data) {
  if (seq < D.next) return;
  if (pending.size >= MAX_PENDING) pending.clear(); // replay has them
  pending.set(seq, data);
}

function drain() {
  for (;;) {
    const data = pending.get(D.next);
    if (data === undefined) break;
    pending.delete(D.next);
    apply(JSON.parse(dec.decode(data)));
  }
  for (const s of pending.keys()) if (s < D.next) pending.delete(s);
}

// catchUp replays from D.next until the pending live events join up.
async function catchUp() {
  if (catching || !nc || D.next === 0) return;
  catching = true;
  const g = gen;
  try {
    for (;;) {
      let from = D.next;
      let end = false;
      while (!end) {
        let m;
        try {
          m = await nc.request(subj("leaseledger.api.replay"), enc.encode(JSON.stringify({ from })), { timeout: 10000 });
        } catch (err) {
          if (!nc || g !== gen) return;
          await sleep(RETRY_MS);
          continue;
        }
        if (g !== gen) return; // the host changed: this replay is of the old one
        const code = m.headers && m.headers.get("Ledger-Error-Code");
        if (m.headers && m.headers.get("Ledger-Error")) {
          if (code === "rate-limited") {
            await sleep(200);
            if (g !== gen) return;
            continue;
          }
          note("replay refused: " + m.headers.get("Ledger-Error"));
          return;
        }
        for (const line of dec.decode(m.data).split("\n")) {
          if (!line) continue;
          const ev = JSON.parse(line);
          if (ev.seq === D.next) {
            D.replayed++;
            apply(ev);
          }
        }
        end = m.headers.get("Ledger-End") === "true";
        const n = Number(m.headers.get("Ledger-Next"));
        if (!end) {
          if (!n || n <= from) break;
          from = n;
        }
      }
      drain();
      let gap = false;
      for (const s of pending.keys()) if (s > D.next) gap = true;
      if (!gap) break;
    }
  } finally {
    if (g === gen) catching = false;
  }
  if (g === gen) drain();
}

// apply takes event seq D.next into every view.
function apply(ev) {
  D.next = ev.seq + 1;
  D.applied++;
  if (!D.backlog.shown && ev.seq >= D.backlog.to) D.backlog.shown = true;
  setHead(ev.seq, ev.hash);
  ring.push(ev);
  if (ring.length > MAX_EVENTS) ring.splice(0, ring.length - MAX_EVENTS);
  countRate(ev);
  const fam = ev.kind.split(".")[0];
  if (fam === "lease" || fam === "session" || fam === "call" || fam === "guardian") scheduleLeases();
  if (ev.activation && ev.activation !== "_") {
    trackRecent(ev);
    if (visible("activations")) scheduleAudit();
  }
  if (ev.kind === "connection.closed" && ev.data) cleanup(ev.data.elapsed_ns);
  countDenied(ev);
  if (ev.kind === "policy.loaded" && visible("activations")) scheduleAudit(); // the policy in force changed
  dirtyList = true;
  scheduleFrame();
}

function setHead(seq, hash) {
  if (seq < D.head.seq) return;
  D.head = { seq, hash };
}

// ---- rendering -----------------------------------------------------------

function scheduleFrame() {
  if (framePending) return;
  framePending = true;
  requestAnimationFrame(frame);
}

function frame() {
  framePending = false;
  $("head-seq").textContent = String(D.head.seq);
  $("head-hash").textContent = D.head.hash || "–";
  $("followed").textContent = followedFrom ? String(followedFrom) : "–";
  $("backlog-note").textContent = backlogText();
  if (dirtyDenied && visible("activations")) renderDenied();
  if (dirtyList && paused) {
    // Paused: the list keeps its position (filters still apply to it);
    // the page goes on following underneath.
    dirtyList = false;
    renderEvents();
    note("paused at seq " + anchor + ": " + (D.next - 1 - anchor) + " newer event(s) since" + (ring.length && ring[0].seq > anchor ? " (older than the kept window: use Catch up)" : ""));
  }
  if (dirtyList && !paused) {
    dirtyList = false;
    renderEvents();
    // Record when each newly shown seq reached the screen, with its
    // sealing time (measurement: commit to shown).
    const now = performance.timeOrigin + performance.now();
    let i = ring.length;
    while (i > 0 && ring[i - 1].seq > renderedUpTo && ring.length - i < MAX_SHOWN) i--;
    for (; i < ring.length; i++) D.shown.push([ring[i].seq, now, Date.parse(ring[i].time)]);
    if (D.shown.length > MAX_SHOWN) D.shown.splice(0, D.shown.length - MAX_SHOWN);
    renderedUpTo = D.next - 1;
  }
}

// backlogText says what the event list holds: the events replayed on
// open (or from the seq asked for with Catch up), then live.
function backlogText() {
  const b = D.backlog;
  if (b.to < 0) return "";
  if (b.to < b.from) return "none before seq " + b.from + "; live";
  return (b.shown ? "" : "loading ") + "seq " + b.from + "–" + b.to + " from the ledger, then live";
}

function filters() {
  const v = (id) => $(id).value.trim();
  return { family: v("f-family"), kind: v("f-kind"), activation: v("f-activation"), session: v("f-session") };
}

function matches(ev, f) {
  if (f.family && ev.kind.split(".")[0] !== f.family) return false;
  if (f.kind && ev.kind !== f.kind) return false;
  if (f.activation && ev.activation !== f.activation) return false;
  if (f.session && ev.session !== f.session) return false;
  return true;
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text == null ? "" : String(text);
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function renderEvents() {
  const f = filters();
  const body = $("events-body");
  const frag = document.createDocumentFragment();
  let n = 0;
  for (let i = ring.length - 1; i >= 0 && n < MAX_ROWS; i--) {
    const ev = ring[i];
    if (paused && ev.seq > anchor) continue;
    if (!matches(ev, f)) continue;
    n++;
    const tr = document.createElement("tr");
    tr.dataset.seq = ev.seq;
    cell(tr, ev.seq);
    cell(tr, ev.time ? ev.time.slice(11, 23) : "");
    cell(tr, ev.kind);
    cell(tr, ev.activation);
    cell(tr, ev.session);
    cell(tr, ev.server);
    cell(tr, JSON.stringify(ev.data));
    frag.appendChild(tr);
  }
  body.replaceChildren(frag);
}

// ---- leases --------------------------------------------------------------

let leasesTimer = null;
let liveLeases = 0;

function scheduleLeases() {
  if (leasesTimer) return;
  leasesTimer = setTimeout(() => {
    leasesTimer = null;
    refreshLeases();
  }, REFRESH_MS);
}

let leasesSeq = 0; // the projection seq of the lease answer shown (an older one arriving later is dropped)

// refreshLeases asks the projection for the live leases (the landing
// view's "Running now", and the Leases view unless it shows ended leases
// too, which it then asks for as well).
async function refreshLeases() {
  let live;
  let all = null;
  try {
    live = await request("leaseledger.api.projection.leases", { live: true, limit: LEASES_PAGE });
    if ($("leases-all").checked) all = await request("leaseledger.api.projection.leases", { limit: LEASES_PAGE });
  } catch (err) {
    if (err.code !== STALE) {
      $("leases-note").textContent = "lease table unavailable: " + err.message;
      $("running-note").textContent = "unavailable: " + err.message;
    }
    return;
  }
  if (live.seq < leasesSeq) return; // overtaken by a newer answer
  leasesSeq = live.seq;
  liveLeases = live.total;
  renderRunning(live);
  const rep = all || live;
  const rows = rep.leases || [];
  $("leases-note").textContent = rep.total + " lease(s) at seq " + rep.seq + (rep.next ? ", first " + rows.length + " shown" : "");
  const frag = document.createDocumentFragment();
  for (const l of rows) frag.appendChild(leaseRow(l, true));
  $("leases-body").replaceChildren(frag);
}

// renderRunning fills the landing view's "Running now": the first
// MAX_RUNNING live leases.
function renderRunning(rep) {
  const rows = (rep.leases || []).slice(0, MAX_RUNNING);
  const sessions = new Set(rows.map((l) => l.key_session));
  $("running-note").textContent = rep.total === 0
    ? "nothing (at seq " + rep.seq + ")"
    : rep.total + " live lease(s)" + (rows.length === rep.total ? " of " + sessions.size + " session(s)" : ", the first " + rows.length + " shown (all: Leases)") + " at seq " + rep.seq;
  const frag = document.createDocumentFragment();
  for (const l of rows) frag.appendChild(leaseRow(l, false));
  $("running-body").replaceChildren(frag);
}

// leaseRow is one lease's row (the Leases view's has the fingerprint);
// a click shows its activation's evidence.
function leaseRow(l, full) {
  const tr = document.createElement("tr");
  tr.dataset.session = l.session || l.key_session;
  tr.dataset.server = l.server;
  tr.dataset.activation = l.activation_id;
  tr.dataset.state = l.state;
  tr.dataset.logLevel = l.log_level || "";
  cell(tr, l.shared ? "shared" : l.session);
  cell(tr, l.log_level || "", "muted"); // the session's MCP logging level (session.log_level), sent to its own leases
  cell(tr, l.server);
  cell(tr, l.state);
  if (full) cell(tr, (l.fingerprint || "").slice(0, 19));
  cell(tr, fmtTime(l.ready_at || l.started_at));
  if (!full) cell(tr, fmtTime(l.last_use));
  cell(tr, (l.calls_finished || 0) + "/" + (l.calls_admitted || 0) + (l.calls_in_flight ? " (" + l.calls_in_flight + " running)" : ""));
  cell(tr, l.activation_id, "clickable");
  tr.className = "clickable";
  tr.onclick = () => { showView("activations"); showEvidence(l.activation_id); };
  return tr;
}

function fmtTime(t) {
  if (!t) return "";
  return typeof t === "string" ? t.replace("T", " ").slice(0, 23) : JSON.stringify(t);
}

// ---- activations ---------------------------------------------------------

const recent = new Map(); // activation -> {session, server, verdict, reasons, activity, dirty}
let auditTimer = null;
let auditAt = 0;
let auditRetries = 0; // refreshes asked for a summary older than the page's head
let verdictTimer = null;

function trackRecent(ev) {
  let r = recent.get(ev.activation);
  if (!r) {
    r = { session: "", server: "", verdict: "", reasons: [], activity: null };
    recent.set(ev.activation, r);
    while (recent.size > MAX_RECENT) recent.delete(recent.keys().next().value);
  } else {
    recent.delete(ev.activation); // newest last
    recent.set(ev.activation, r);
  }
  if (ev.session) r.session = ev.session;
  if (ev.server) r.server = ev.server;
  markDirty(ev.activation);
}

function markDirty(a) {
  const r = recent.get(a);
  if (r) r.dirty = true;
  if (!verdictTimer) verdictTimer = setTimeout(refreshVerdicts, REFRESH_MS * 2);
}

// visible reports whether a view is shown: the activation views ask for
// audits, whose cost grows with an activation's events, only while shown.
const visible = (name) => !$("view-" + name).hidden;

async function refreshVerdicts() {
  verdictTimer = null;
  if (!visible("activations")) return; // showView asks again
  for (const [a, r] of recent) {
    if (!r.dirty) continue;
    r.dirty = false;
    try {
      const rep = await request("leaseledger.api.projection.activation", { activation: a, timeline: 1 });
      r.verdict = rep.report.verdict;
      r.reasons = rep.report.reasons || [];
      r.activity = activityOf(rep.report);
    } catch (err) {
      if (err.code === "busy" || err.code === "rate-limited") r.dirty = true;
    }
  }
  renderRecent();
  for (const r of recent.values()) if (r.dirty && !verdictTimer) verdictTimer = setTimeout(refreshVerdicts, 1000);
}

// nonZero is "k n, …" of an object's non-zero counts (underscores as spaces).
function nonZero(o) {
  return Object.entries(o || {}).filter(([, n]) => n).map(([k, n]) => k.replace("_", " ") + " " + n).join(", ");
}

// activityOf summarises what an activation report counts of the MCP
// traffic beside calls: relays by outcome, subscriptions (open
// of started), list changes by list, request handles by method.
function activityOf(r) {
  const relays = r.relays ? Object.values(r.relays).reduce((a, b) => a + b, 0) : 0;
  const subs = r.subscriptions || {};
  const lists = r.list_changes ? Object.values(r.list_changes).reduce((a, b) => a + b, 0) : 0;
  const parts = [];
  if (relays) parts.push("relays " + relays + " (" + nonZero(r.relays) + ")");
  if (subs.started || subs.open) parts.push("subscriptions " + (subs.open || 0) + " open of " + (subs.started || 0));
  if (lists) parts.push("list changes " + lists + " (" + nonZero(r.list_changes) + ")");
  const methods = Object.entries(r.request_methods || {});
  if (methods.length) parts.push("requests " + methods.map(([m, c]) => m + " " + c.registered).join(", "));
  // The access policy's decisions naming it (a denied action was not performed).
  const access = r.access;
  if (access) parts.push("access " + access.allowed + " allowed, " + access.denied + " denied");
  return { relays, open: subs.open || 0, listChanges: lists, denied: access ? access.denied : 0, text: parts.join("; ") };
}

function verdictCell(tr, v) {
  cell(tr, v || "…", "v-" + (v || "none"));
}

function renderRecent() {
  const frag = document.createDocumentFragment();
  for (const [a, r] of [...recent].reverse()) {
    const tr = document.createElement("tr");
    tr.dataset.activation = a;
    tr.dataset.verdict = r.verdict;
    tr.className = "clickable";
    tr.onclick = () => showEvidence(a);
    cell(tr, a);
    cell(tr, r.session);
    cell(tr, r.server);
    verdictCell(tr, r.verdict);
    const act = r.activity || activityOf({});
    tr.dataset.relays = act.relays;
    tr.dataset.subscriptionsOpen = act.open;
    tr.dataset.listChanges = act.listChanges;
    tr.dataset.accessDenied = act.denied;
    if (act.denied) tr.classList.add("denied");
    cell(tr, act.text, "wrap");
    cell(tr, r.reasons.join("; "), "wrap");
    frag.appendChild(tr);
  }
  $("recent-body").replaceChildren(frag);
}

function scheduleAudit() {
  if (auditTimer) return;
  auditTimer = setTimeout(() => {
    auditTimer = null;
    refreshAudit();
  }, Math.max(REFRESH_MS, AUDIT_MS - (Date.now() - auditAt)));
}

async function refreshAudit() {
  auditAt = Date.now();
  let s;
  try {
    s = await request("leaseledger.api.projection.audit", { limit: 100 });
  } catch (err) {
    if (err.code === "busy" || err.code === "rate-limited") scheduleAudit();
    return;
  }
  // The summary may be up to a second old: ask again until it has every
  // event this page has seen.
  if (s.events < D.head.seq && auditRetries++ < 3) scheduleAudit();
  else auditRetries = 0;
  const v = $("verdicts");
  v.replaceChildren();
  const add = (label, n, cls) => {
    const span = document.createElement("span");
    span.textContent = label + ": " + n;
    if (cls) span.className = cls;
    v.appendChild(span);
  };
  add("activations", s.activations);
  // unverified: direct children, whose cleanup the host saw but no helper
  // confirmed; counted apart, never a failure.
  for (const k of ["confirmed", "unverified", "unconfirmed", "never_started"]) add(k.replace("_", " "), s.verdicts[k] ?? 0, "v-" + k);
  add("not closed", s.not_closed);
  showPolicy(s.policy);
  const frag = document.createDocumentFragment();
  for (const u of s.unconfirmed) {
    const tr = document.createElement("tr");
    tr.dataset.activation = u.activation_id;
    tr.className = "clickable";
    tr.onclick = () => showEvidence(u.activation_id);
    cell(tr, u.activation_id);
    cell(tr, u.closed ? "yes" : "no");
    cell(tr, (u.reasons || []).join("; ") + (u.reasons_omitted ? " (+" + u.reasons_omitted + ")" : ""), "wrap");
    frag.appendChild(tr);
  }
  if (s.unconfirmed_omitted) {
    const tr = document.createElement("tr");
    cell(tr, "… " + s.unconfirmed_omitted + " more", "muted");
    frag.appendChild(tr);
  }
  $("unconfirmed-body").replaceChildren(frag);
}

function section(title) {
  const s = document.createElement("section");
  const h = document.createElement("h2");
  h.textContent = title;
  s.appendChild(h);
  $("evidence").appendChild(s);
  return s;
}

// table renders rows of objects, one column per key (nested values as JSON).
function table(parent, rows, omitted) {
  if (!rows || rows.length === 0) {
    const p = document.createElement("p");
    p.className = "muted";
    p.textContent = omitted ? "none shown (" + omitted + " left out)" : "none";
    parent.appendChild(p);
    return;
  }
  const keys = [];
  for (const r of rows) for (const k of Object.keys(r)) if (!keys.includes(k)) keys.push(k);
  const t = document.createElement("table");
  t.className = "list";
  const hr = document.createElement("tr");
  for (const k of keys) {
    const th = document.createElement("th");
    th.textContent = k;
    hr.appendChild(th);
  }
  const thead = document.createElement("thead");
  thead.appendChild(hr);
  t.appendChild(thead);
  const tb = document.createElement("tbody");
  for (const r of rows) {
    const tr = document.createElement("tr");
    for (const k of keys) {
      const v = r[k];
      cell(tr, v == null ? "" : typeof v === "object" ? JSON.stringify(v) : v);
    }
    tb.appendChild(tr);
  }
  t.appendChild(tb);
  parent.appendChild(t);
  if (omitted) {
    const p = document.createElement("p");
    p.className = "muted";
    p.textContent = omitted + " more left out";
    parent.appendChild(p);
  }
}

async function showEvidence(a) {
  const ev = $("evidence");
  ev.replaceChildren();
  let rep;
  try {
    rep = await request("leaseledger.api.projection.activation", { activation: a, timeline: 200 });
  } catch (err) {
    if (err.code !== STALE) section("Activation " + a).appendChild(document.createTextNode("unavailable: " + err.message));
    return;
  }
  const r = rep.report;
  const head = section("Activation " + a);
  head.dataset.activation = a;
  head.dataset.verdict = r.verdict;
  const dl = document.createElement("dl");
  dl.className = "facts";
  const fact = (k, v, cls) => {
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = v == null ? "" : typeof v === "object" ? JSON.stringify(v) : String(v);
    if (cls) dd.className = cls;
    dl.append(dt, dd);
  };
  fact("verdict", r.verdict, "v-" + r.verdict);
  fact("reasons", (r.reasons || []).join("; ") + (r.reasons_omitted ? " (+" + r.reasons_omitted + ")" : ""));
  fact("session", r.session);
  fact("server", r.server);
  fact("events", r.events + " (seq " + r.first_seq + "–" + r.last_seq + ")");
  fact("counts", r.counts);
  fact("frozen", r.frozen);
  head.appendChild(dl);
  table(section("Resources (not confirmed)"), r.resources);
  table(section("Recent confirmed receipts"), r.recent);
  table(section("Aggregates"), r.aggregates);
  const conn = r.connection || {};
  const cs = section("Connection and close");
  const p = document.createElement("p");
  p.textContent = conn.opened ? "transport " + conn.transport + ", cleanup " + conn.cleanup + ", phase " + conn.phase : "no connection recorded";
  cs.appendChild(p);
  table(cs, conn.barriers);
  const close = conn.report;
  if (close) {
    const q = document.createElement("p");
    q.textContent = "close report: " + close.result + " in " + ((close.elapsed_ns || 0) / 1e6).toFixed(1) + " ms" + ((close.reasons || []).length ? " — " + close.reasons.join("; ") : "");
    cs.appendChild(q);
    table(cs, close.obligations);
  }
  showActivity(r);
  showAccess(r, rep);
  table(section("Calls without an outcome"), rep.calls_outcome_unknown, rep.calls_outcome_unknown_omitted);
  table(section("Timeline"), rep.timeline, rep.timeline_omitted);
}

// showActivity adds the evidence's section on the MCP traffic beside calls:
// relays by outcome, subscriptions (started, ended by reason,
// open: a subscription ends with its session or lease, so one open is no
// cleanup failure), list changes by list, request handles by method.
function showActivity(r) {
  const s = section("Relays, subscriptions, list changes, requests");
  s.dataset.section = "activity";
  const subs = r.subscriptions;
  const dl = document.createElement("dl");
  dl.className = "facts";
  const fact = (k, v) => {
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.dataset.fact = k.replace(" ", "_");
    dd.textContent = v || "none";
    dl.append(dt, dd);
  };
  fact("relays", nonZero(r.relays));
  fact("subscriptions", subs ? "started " + (subs.started || 0) + ", ended " + ((subs.unsubscribed || 0) + (subs.session_ended || 0) + (subs.lease_ended || 0)) +
    (subs.unsubscribed || subs.session_ended || subs.lease_ended ? " (" + nonZero({ unsubscribed: subs.unsubscribed, session_ended: subs.session_ended, lease_ended: subs.lease_ended }) + ")" : "") +
    ", open " + (subs.open || 0) + (subs.unmatched ? ", unmatched " + subs.unmatched : "") : "");
  fact("list changes", nonZero(r.list_changes));
  s.appendChild(dl);
  const rows = Object.entries(r.request_methods || {}).sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([method, c]) => ({ method, registered: c.registered || 0, ok: c.ok || 0, error: c.error || 0, timeout: c.timeout || 0, cancelled: c.cancelled || 0 }));
  table(s, rows);
}

// ---- access policy -----------------------------------------------------------

// shortDigest is a digest's first 12 hex digits, as `leaseledger audit`
// prints them.
const shortDigest = (d) => (d ? d.slice(0, 12) : "");

// showPolicy shows the access policy in force (the summary's policy: the
// last policy.loaded, its loads) and every decision's totals.
function showPolicy(p) {
  const el = $("policy");
  p = p || { loads: 0 };
  const f = p.in_force;
  el.dataset.mode = f ? f.mode : "";
  el.dataset.digest = f && f.digest ? f.digest : "";
  const loads = p.loads + " load(s)" + (p.loads_omitted ? ", the last " + (p.recent || []).length + " kept" : "");
  let text = "policy: none recorded";
  if (f && f.mode === "enforced") text = "policy: enforced " + shortDigest(f.digest) + " (" + f.policies + " policies, loaded at seq " + f.seq + "; " + loads + ")";
  else if (f) text = "policy: " + f.mode + " (default), loaded at seq " + f.seq + "; " + loads;
  const d = p.decisions;
  const span = document.createElement("span");
  span.textContent = text;
  const totals = document.createElement("span");
  totals.textContent = d ? "decisions: " + d.allowed + " allowed, " + d.denied + " denied" + (d.policies_omitted ? " (" + d.policies_omitted + " deciding policies left out of the records)" : "") : "no decisions recorded";
  if (d && d.denied) totals.className = "v-unconfirmed";
  el.replaceChildren(span, totals);
}

// The page counts, per session, the decisions of the access policy that
// denied it among the events it follows (access.decided not allowed,
// call.refused reason policy): the projection keeps a session's counts
// only while it is open and the API has no session report, so this view
// is of the events followed (see the note), not the whole log.
const denied = new Map(); // session -> {denied, actions: {action: n}, last: {seq, action, policies}}
let deniedDropped = 0;
let dirtyDenied = false;

function countDenied(ev) {
  const data = ev.data;
  if (!data || !ev.session) return;
  let action;
  if (ev.kind === "access.decided" && data.allowed === false) action = data.action;
  else if (ev.kind === "call.refused" && data.reason === "policy") action = "call_tool";
  else return;
  let x = denied.get(ev.session);
  if (x) denied.delete(ev.session); // the most recently denied last
  else x = { denied: 0, actions: {}, last: null };
  denied.set(ev.session, x);
  while (denied.size > MAX_DENIED_SESSIONS) {
    denied.delete(denied.keys().next().value);
    deniedDropped++;
  }
  x.denied++;
  x.actions[action] = (x.actions[action] || 0) + 1;
  x.last = { seq: ev.seq, action, policies: data.policies || [], tool: data.tool };
  dirtyDenied = true;
}

function renderDenied() {
  dirtyDenied = false;
  const frag = document.createDocumentFragment();
  for (const [session, x] of [...denied].reverse()) {
    const tr = document.createElement("tr");
    tr.dataset.session = session;
    tr.dataset.denied = x.denied;
    cell(tr, session);
    cell(tr, x.denied, "v-unconfirmed");
    cell(tr, nonZero(x.actions), "wrap");
    const l = x.last;
    cell(tr, "seq " + l.seq + " " + l.action + (l.tool ? " " + l.tool : "") + ": " + (l.policies.length ? l.policies.join(" ") : "no permit applied"), "wrap");
    frag.appendChild(tr);
  }
  $("denied-body").replaceChildren(frag);
  $("denied-note").textContent = followedFrom ? "in the events followed from seq " + followedFrom + (deniedDropped ? "; " + deniedDropped + " less recently denied session(s) dropped" : "") : "";
}

// showAccess adds the evidence's section on the access policy's decisions
// naming the activation: by action and outcome, by deciding policy ("(no
// permit)": denials no permit applied to; "(other)": ids past the
// projector's bound), and what it denied with the deciding policies.
function showAccess(r, rep) {
  const s = section("Access decisions");
  s.dataset.section = "access";
  const c = r.access;
  const p = document.createElement("p");
  p.dataset.fact = "access";
  p.textContent = c ? c.allowed + " allowed, " + c.denied + " denied" + (c.policies_omitted ? "; " + c.policies_omitted + " deciding policies left out of the records" : "") : "none recorded";
  s.appendChild(p);
  if (!c) return;
  const outcomes = (o) => ({ allowed: o.allowed || 0, denied: o.denied || 0 });
  table(s, Object.entries(c.actions || {}).map(([action, o]) => Object.assign({ action }, outcomes(o))));
  table(s, Object.entries(c.policies || {}).sort(([a], [b]) => (a < b ? -1 : 1)).map(([policy, o]) => Object.assign({ policy }, outcomes(o))));
  table(s, (rep.access_denied || []).map((x) => ({
    seq: x.seq, action: x.action, session: x.session || "", call: x.call_id ? x.call_id + " " + x.tool : "",
    target: shortDigest(x.target_sha256), policies: x.policies.length ? x.policies.join(" ") + (x.policies_omitted ? " (+" + x.policies_omitted + ")" : "") : "no permit applied",
    "policy set": shortDigest(x.policy_digest),
  })), rep.access_denied_omitted);
}

// ---- ledger: rate and checkpoints ------------------------------------------

const perSecond = new Map(); // unix second -> events applied live
function countRate(ev) {
  const s = Math.floor(Date.now() / 1000);
  perSecond.set(s, (perSecond.get(s) || 0) + 1);
}

function showCheckpoint(text) {
  $("checkpoint").textContent = text;
}

async function requestCheckpoint() {
  try {
    const rep = await request("leaseledger.api.proof.checkpoint", {});
    if (rep.checkpoint) showCheckpoint(rep.checkpoint);
  } catch (err) {
    if (err.code === "unavailable") $("checkpoint").textContent = "serve signs no checkpoints (no --checkpoint-key)";
  }
}

// ---- charts ----------------------------------------------------------------

const series = { t: [], rate: [], leases: [] };
const cleanupBuckets = new Array(16).fill(0); // bucket i: [2^(i-1), 2^i) ms

function cleanup(ns) {
  if (typeof ns !== "number" || ns < 0) return;
  const ms = ns / 1e6;
  let i = ms < 1 ? 0 : Math.min(cleanupBuckets.length - 1, Math.floor(Math.log2(ms)) + 1);
  cleanupBuckets[i]++;
}

let charts = null;
function makeCharts() {
  const w = Math.max(400, Math.min(1000, window.innerWidth - 60));
  const opt = (label, extra) => Object.assign({ width: w, height: 180, series: [{}, { label, stroke: "#0969da", width: 1.5 }], legend: { show: false } }, extra || {});
  const xs = cleanupBuckets.map((_, i) => i);
  charts = {
    rate: new uPlot(opt("events/s"), [[], []], $("chart-rate")),
    leases: new uPlot(opt("live leases"), [[], []], $("chart-leases")),
    cleanup: new uPlot(opt("closes", {
      scales: { x: { time: false } },
      axes: [{ values: (_, ticks) => ticks.map((i) => (i === 0 ? "<1" : "<" + 2 ** i)) }, {}],
      series: [{}, { label: "closes", stroke: "#1a7f37", fill: "rgba(26,127,55,0.3)", paths: uPlot.paths.bars({ size: [0.8] }) }],
    }), [xs, cleanupBuckets.slice()], $("chart-cleanup")),
  };
}

function tick() {
  const s = Math.floor(Date.now() / 1000) - 1; // the last whole second
  series.t.push(s);
  series.rate.push(perSecond.get(s) || 0);
  series.leases.push(liveLeases);
  for (const k of perSecond.keys()) if (k < s - 10) perSecond.delete(k);
  if (series.t.length > CHART_POINTS) for (const k in series) series[k].splice(0, series[k].length - CHART_POINTS);
  let sum = 0;
  for (let i = Math.max(0, series.rate.length - 10); i < series.rate.length; i++) sum += series.rate[i];
  $("rate").textContent = (sum / Math.min(10, Math.max(1, series.rate.length))).toFixed(1);
  if (!$("view-charts").hidden) drawCharts();
}

function drawCharts() {
  if (!charts) makeCharts();
  charts.rate.setData([series.t, series.rate]);
  charts.leases.setData([series.t, series.leases]);
  charts.cleanup.setData([cleanupBuckets.map((_, i) => i), cleanupBuckets.slice()]);
}

// ---- views -----------------------------------------------------------------

function showView(name) {
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.view === name);
  for (const s of document.querySelectorAll("main > section")) s.hidden = s.id !== "view-" + name;
  if (name === "charts") drawCharts();
  if (name === "leases") refreshLeases();
  if (name === "activations") { refreshAudit(); renderRecent(); refreshVerdicts(); renderDenied(); }
}

function init() {
  for (const b of document.querySelectorAll("#tabs button")) b.onclick = () => showView(b.dataset.view);
  for (const id of ["f-family", "f-kind", "f-activation", "f-session"]) $(id).oninput = () => { dirtyList = true; scheduleFrame(); };
  $("pause").onclick = () => {
    paused = !paused;
    anchor = renderedUpTo;
    $("pause").textContent = paused ? "Resume" : "Pause";
    note(paused ? "paused at seq " + anchor + " (still following)" : "");
    dirtyList = true;
    scheduleFrame();
  };
  $("catchup").onclick = () => {
    const from = Number($("from-seq").value);
    if (!Number.isInteger(from) || from < 1) { note("from seq: a whole number ≥ 1"); return; }
    ring.length = 0;
    pending.clear();
    D.next = from;
    followedFrom = from;
    D.backlog = { from, to: D.head.seq, shown: D.head.seq < from };
    renderedUpTo = from - 1;
    dirtyList = true;
    scheduleFrame();
    catchUp();
  };
  $("leases-all").onchange = refreshLeases;
  setInterval(tick, 1000);
  start();
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
else init();

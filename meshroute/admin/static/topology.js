// The topology page (docs/topology.md): polls the admin JSON API and redraws
// the mesh without reloading.  What this router knows comes from its own
// resources (/api/v1/topology, /router, /links, /routes, /queues, /topics,
// /sessions): the topic interest of every router among it; what only
// another router knows (its queues, its HA role, its links' counters) is
// asked through the mesh at /api/v1/routers/NAME/VIEW, and shown as
// "no data" where that fails.
"use strict";

// Seconds between two polls: ?interval=SECONDS in the page's address.
const INTERVAL_MS = 1000 * (Number(new URLSearchParams(location.search).get("interval")) || 2);
const TOKEN_KEY = "meshroute-admin-token";
const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 640, HEIGHT = 560;
// Topic patterns written under a router; the rest are counted (its tooltip
// lists them all).
const SHOWN_PATTERNS = 2;
// Fields that hold epoch seconds, shown as local times.
const TIMES = new Set(["since", "last_heard", "changed_at", "closed_at", "last_closed_at",
                       "last_change"]);

const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  router: null,          // this router's name
  selected: null,        // the router whose tables are shown
  view: "links",         // the table shown
  counters: new Map(),   // "router|peer" → {at, sent, received}: for rates
  rates: new Map(),      // "router|peer" → {sent, received} messages/s
  timer: null,           // the next poll
  polling: null,         // the poll under way
  again: false,          // poll again as soon as this one ends
};

class NeedsToken extends Error {}

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.detail ? body.detail : `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error;
  }
}

async function api(path) {
  const headers = state.token ? {Authorization: "Bearer " + state.token} : {};
  const response = await fetch(path, {headers, cache: "no-store"});
  if (response.status === 401) throw new NeedsToken();
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

// One view of router NAME: asked here for this router, through the mesh
// for another.  Resolves to {value} or {error}.
async function view(name, what) {
  const path = name === state.router ? `api/v1/${what}`
    : `api/v1/routers/${encodeURIComponent(name)}/${what}`;
  try {
    return {value: await api(path)};
  } catch (e) {
    if (e instanceof NeedsToken) throw e;
    return {error: e.code ? `${e.code}: ${e.message}` : e.message};
  }
}

function clock(seconds) {
  return seconds == null ? "–" : new Date(seconds * 1000).toLocaleTimeString();
}

function ago(seconds) {
  if (seconds == null) return "";
  const s = Math.max(0, Date.now() / 1000 - seconds);
  if (s < 90) return `${Math.round(s)} s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}

function element(tag, attributes = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (text !== null) node.textContent = text;
  return node;
}

// -- rates and windows ------------------------------------------------------

// Remember the counters of router's links; a rate needs two readings.
function count(router, links, at) {
  for (const link of links) {
    if (typeof link.sent !== "number" || typeof link.received !== "number") continue;
    const key = `${router}|${link.peer}`;
    const before = state.counters.get(key);
    state.counters.set(key, {at, sent: link.sent, received: link.received});
    if (before && at > before.at && link.sent >= before.sent && link.received >= before.received) {
      const seconds = at - before.at;
      state.rates.set(key, {sent: (link.sent - before.sent) / seconds,
                            received: (link.received - before.received) / seconds});
    }
  }
}

// Messages per second from a to b over their link, as either end counts.
function rate(a, b) {
  const atA = state.rates.get(`${a}|${b}`);
  if (atA) return atA.sent;
  const atB = state.rates.get(`${b}|${a}`);
  return atB ? atB.received : null;
}

function cssColour(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function mix(from, to, fraction) {
  const channels = hex => [1, 3, 5].map(i => parseInt(hex.slice(i, i + 2), 16));
  const [a, b] = [channels(from), channels(to)];
  return "#" + a.map((value, i) => Math.round(value + (b[i] - value) * fraction)
    .toString(16).padStart(2, "0")).join("");
}

// -- drawing ----------------------------------------------------------------

function layout(nodes) {
  // Routers on a circle, by name: the same mesh is always drawn the same.
  const places = new Map();
  const radius = Math.min(WIDTH, HEIGHT) / 2 - 80;
  nodes.forEach((node, i) => {
    const angle = -Math.PI / 2 + 2 * Math.PI * i / nodes.length;
    places.set(node.name, nodes.length === 1 ? {x: WIDTH / 2, y: HEIGHT / 2}
      : {x: WIDTH / 2 + radius * Math.cos(angle), y: HEIGHT / 2 + radius * Math.sin(angle)});
  });
  return places;
}

function drawEdge(svg, edge, places, fills) {
  const [a, b] = [places.get(edge.a), places.get(edge.b)];
  const group = element("g", {"class": "edge", "data-a": edge.a, "data-b": edge.b,
                              "data-stage": edge.stage});
  const fill = fills.get(`${edge.a}|${edge.b}`);
  let colour = cssColour(`--stage-${edge.stage}`) || cssColour("--stage-connect");
  if (edge.stage === "delivery" && fill != null) {
    colour = mix(colour, cssColour("--window-full"), Math.min(1, fill));
    group.setAttribute("data-window", fill.toFixed(3));
  }
  group.append(element("line", {x1: a.x, y1: a.y, x2: b.x, y2: b.y, stroke: colour}));
  const forward = rate(edge.a, edge.b), backward = rate(edge.b, edge.a);
  let label = edge.stage;
  if (edge.stage === "closed" && edge.last_close) label += `: ${edge.last_close.reason}`;
  if (edge.stage === "closed" && edge.link) label += ` · reconnecting (${edge.link.stage})`;
  if (edge.stage === "delivery") {
    label = forward === null && backward === null ? "rate: no data"
      : `${edge.a}→ ${(forward ?? 0).toFixed(0)}/s · ${edge.b}→ ${(backward ?? 0).toFixed(0)}/s`;
    if (fill != null) label += ` · window ${(100 * fill).toFixed(0)}%`;
  }
  // The label runs along its line, upright, just above it.
  let angle = Math.atan2(b.y - a.y, b.x - a.x) * 180 / Math.PI;
  if (angle > 90 || angle < -90) angle += 180;
  const [mx, my] = [(a.x + b.x) / 2, (a.y + b.y) / 2];
  group.append(element("title", {}, `${edge.a} – ${edge.b}: ${edge.stage}`),
               element("text", {x: mx, y: my - 7, "class": "rate",
                                transform: `rotate(${angle.toFixed(1)} ${mx} ${my})`}, label));
  svg.append(group);
}

// The topic interest of each router as the router serving the page holds
// it (its /api/v1/topics: its own and every other's): name → patterns.
function interestOf(topics) {
  const interest = new Map();
  if (!topics.value) return interest;
  interest.set(topics.value.router, topics.value.advertised.patterns);
  for (const held of topics.value.interest) interest.set(held.router, held.patterns);
  return interest;
}

function patternsLabel(patterns) {
  const more = patterns.length - SHOWN_PATTERNS;
  return "topics: " + patterns.slice(0, SHOWN_PATTERNS).join(", ")
    + (more > 0 ? ` +${more}` : "");
}

function drawNode(svg, node, place, facts, interest) {
  const group = element("g", {"class": "node" + (node.name === state.selected ? " selected" : ""),
                              "data-router": node.name, "data-reachable": node.reachable,
                              "data-self": node.name === state.router,
                              transform: `translate(${place.x},${place.y})`});
  const known = facts.get(node.name) || {};
  const patterns = interest.get(node.name) || [];
  group.append(element("title", {}, node.name + (known.errors && known.errors.length
    ? `: ${known.errors.join("; ")}` : "")
    + (patterns.length ? `\ntopic interest: ${patterns.join(", ")}` : "")));
  group.append(element("circle", {r: 44}));
  group.append(element("text", {"class": "name", y: -4}, node.name));
  const depth = known.depth;
  group.append(element("text", {"class": "badge" + (depth == null ? " no-data" : ""), y: 12},
                       depth == null ? "no data" : `queued ${depth}`));
  let role = node.reachable ? (known.role || "") : "unreachable";
  if (node.reachable && node.name !== state.router && node.hops) {
    role += ` ${node.hops} hop${node.hops > 1 ? "s" : ""}`;
  }
  group.append(element("text", {"class": "role", y: 60}, role.trim()));
  if (patterns.length) {
    group.append(element("text", {"class": "interest", y: 75}, patternsLabel(patterns)));
  }
  group.addEventListener("click", () => { state.selected = node.name; refresh(); });
  svg.append(group);
}

function draw(topology, facts, fills, interest) {
  const svg = document.getElementById("graph");
  const places = layout(topology.nodes);
  svg.replaceChildren();
  for (const edge of topology.edges) drawEdge(svg, edge, places, fills);
  for (const node of topology.nodes) {
    drawNode(svg, node, places.get(node.name), facts, interest);
  }
}

function header(topology) {
  const reachable = topology.nodes.filter(node => node.reachable).length;
  const up = topology.edges.filter(edge => edge.stage === "delivery").length;
  document.getElementById("router-name").textContent = `at ${topology.router}`;
  document.getElementById("routers-count").textContent =
    `routers: ${topology.nodes.length} (${reachable} reachable)`;
  document.getElementById("links-count").textContent =
    `links up: ${up}/${topology.edges.length}`;
  document.getElementById("last-change").textContent =
    `last topology change: ${clock(topology.changed_at)} ${ago(topology.changed_at)}`;
}

function status(text, failing) {
  const line = document.getElementById("updated");
  line.textContent = text;
  line.classList.toggle("failing", failing);
}

// -- tables ------------------------------------------------------------------

function rows(what, value) {
  if (what === "routes") {
    return Object.entries(value).map(([router, route]) => ({router, ...route}));
  }
  if (what === "topics") return value.subscriptions;
  return Array.isArray(value) ? value : [value];
}

function cell(key, value) {
  if (value == null) return "–";
  if (TIMES.has(key) && typeof value === "number") return clock(value);
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function table(what, answer) {
  const note = document.getElementById("details-note");
  const head = document.querySelector("#details-table thead");
  const body = document.querySelector("#details-table tbody");
  document.getElementById("details-router").textContent = state.selected;
  if (answer.error) {
    note.textContent = answer.error;
    head.replaceChildren();
    body.replaceChildren();
    return;
  }
  const list = rows(what, answer.value);
  note.textContent = list.length ? "" : `no ${what}`;
  const keys = [...new Set(list.flatMap(row => Object.keys(row)))];
  const headRow = document.createElement("tr");
  for (const key of keys) {
    const th = document.createElement("th");
    th.textContent = key;
    headRow.append(th);
  }
  head.replaceChildren(headRow);
  body.replaceChildren(...list.map(row => {
    const tr = document.createElement("tr");
    for (const key of keys) {
      const td = document.createElement("td");
      td.textContent = cell(key, row[key]);
      if (typeof row[key] === "number" && !TIMES.has(key)) td.className = "number";
      tr.append(td);
    }
    return tr;
  }));
}

// -- polling -----------------------------------------------------------------

// Queue depth and HA role of each reachable router, and its links'
// counters (for rates) and window fill.
async function gather(topology) {
  const facts = new Map();
  const fills = new Map();
  const at = Date.now() / 1000;
  const window = topology.window;
  for (const edge of topology.edges) {
    if (edge.link && typeof edge.link.in_flight === "number") {
      fills.set(`${edge.a}|${edge.b}`, edge.link.in_flight / window);
    }
  }
  await Promise.all(topology.nodes.filter(node => node.reachable).map(async node => {
    const [queues, router, links] = await Promise.all(
      ["queues", "router", "links"].map(what => view(node.name, what)));
    const known = {errors: [queues, router, links].filter(answer => answer.error)
                             .map(answer => answer.error)};
    if (queues.value) known.depth = queues.value.reduce((sum, queue) => sum + queue.depth, 0);
    if (router.value && router.value.ha) {
      known.role = `${router.value.ha.role} · ${router.value.ha.state}`;
    }
    if (links.value) {
      count(node.name, links.value, at);
      for (const link of links.value) {
        if (typeof link.in_flight !== "number" || link.stage !== "delivery") continue;
        const key = node.name < link.peer ? `${node.name}|${link.peer}` : `${link.peer}|${node.name}`;
        fills.set(key, Math.max(fills.get(key) || 0, link.in_flight / window));
      }
    }
    facts.set(node.name, known);
  }));
  return {facts, fills};
}

// One poll: the topology, what each router knows of itself, and the
// table shown.  Resolves to whether to go on polling (not while the page
// waits for the token).
async function poll() {
  try {
    const topology = await api("api/v1/topology");
    state.router = topology.router;
    if (!topology.nodes.some(node => node.name === state.selected)) {
      state.selected = topology.router;
    }
    const [{facts, fills}, topics] = await Promise.all(
      [gather(topology), view(topology.router, "topics")]);
    const details = await view(state.selected, state.view);
    header(topology);
    draw(topology, facts, fills, interestOf(topics));
    table(state.view, details);
    document.body.dataset.updated = String(Date.now());
    status(`updated ${new Date().toLocaleTimeString()}`, false);
  } catch (e) {
    if (e instanceof NeedsToken) {
      askForToken();
      return false;
    }
    status(e instanceof ApiError ? `the admin API answers ${e.code || e.status}: ${e.message}`
      : `the admin API does not answer: ${e.message}`, true);
  }
  return true;
}

// Poll now (after the poll under way, if any), then every INTERVAL_MS.
function refresh() {
  if (state.polling) {
    state.again = true;
    return;
  }
  clearTimeout(state.timer);
  state.polling = poll().then(going => {
    state.polling = null;
    if (state.again) {
      state.again = false;
      refresh();
    } else if (going) {
      state.timer = setTimeout(refresh, INTERVAL_MS);
    }
  });
}

function askForToken() {
  const form = document.getElementById("token-form");
  document.getElementById("token-refused").hidden = !state.token;
  status("waiting for the admin token", true);
  form.hidden = false;
  document.getElementById("token").focus();
}

document.getElementById("token-form").addEventListener("submit", event => {
  event.preventDefault();
  state.token = document.getElementById("token").value.trim();
  sessionStorage.setItem(TOKEN_KEY, state.token);
  document.getElementById("token-form").hidden = true;
  refresh();
});

for (const button of document.querySelectorAll("#tabs button")) {
  button.addEventListener("click", () => {
    state.view = button.dataset.view;
    for (const other of document.querySelectorAll("#tabs button")) {
      other.classList.toggle("selected", other === button);
    }
    refresh();
  });
}

refresh();

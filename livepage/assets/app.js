// The live page: renders /api/state, kept current by the event stream at
// /api/events, or by polling /api/state when the stream is unavailable.
// Every value from the server is written as text (textContent, SVG text
// nodes), never as markup.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
let latest = null;
let receivedAt = 0;

function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

function setText(id, v) {
  const e = $(id);
  if (e.textContent !== v) e.textContent = v;
}

function num(v, digits) {
  if (typeof v !== "number" || !isFinite(v)) return "–";
  return v.toLocaleString("en-US", { maximumFractionDigits: digits || 0 });
}

function short(v) {
  if (!isFinite(v)) return "";
  const a = Math.abs(v);
  if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
  if (a >= 1e3) return (v / 1e3).toFixed(a >= 1e4 ? 0 : 1) + "k";
  if (a >= 10 || v === 0) return v.toFixed(0);
  return v.toFixed(a >= 1 ? 1 : 2);
}

// bytes formats a size in binary units, one decimal, as aerie's other
// outputs do.
function bytes(n) {
  n = n || 0;
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return (i === 0 ? String(n) : n.toFixed(1)) + " " + units[i];
}

function dur(sec) {
  if (typeof sec !== "number" || sec < 0 || !isFinite(sec)) return "unknown";
  sec = Math.round(sec);
  const h = Math.floor(sec / 3600), m = Math.floor((sec % 3600) / 60), s = sec % 60;
  if (h > 0) return h + "h " + String(m).padStart(2, "0") + "m";
  if (m > 0) return m + "m " + String(s).padStart(2, "0") + "s";
  return s + "s";
}

// clock is a time of day for a chart's axis, with seconds when the chart
// spans less than ten minutes.
function clock(ms, span) {
  const d = new Date(ms), two = (n) => String(n).padStart(2, "0");
  const hm = two(d.getHours()) + ":" + two(d.getMinutes());
  return span < 600000 ? hm + ":" + two(d.getSeconds()) : hm;
}

// durAxis labels a duration axis: seconds with a decimal below a minute.
function durAxis(sec) {
  return sec < 60 ? short(sec) + "s" : dur(sec);
}

// niceMax rounds a chart's top up to 1, 2 or 5 times a power of ten.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// frame clears svg, sizes it to its box and draws the y grid; it returns
// the plot area and a y scale.
function frame(svg, top, fmt) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const w = Math.max(svg.clientWidth, 200), h = Math.max(svg.clientHeight, 120);
  svg.setAttribute("viewBox", "0 0 " + w + " " + h);
  const labels = [0, 1, 2].map((i) => [(top * i) / 2, fmt((top * i) / 2)]);
  const widest = Math.max(...labels.map((l) => l[1].length));
  const area = { x0: Math.max(28, widest * 6.5 + 8), x1: w - 8, y0: 8, y1: h - 20 };
  const y = (v) => area.y1 - (v / top) * (area.y1 - area.y0);
  for (const [v, label] of labels) {
    svg.appendChild(svgEl("line", { class: "grid", x1: area.x0, x2: area.x1, y1: y(v), y2: y(v) }));
    svg.appendChild(svgEl("text", { x: area.x0 - 4, y: y(v) + 4, "text-anchor": "end" }, label));
  }
  return { area, y, w, h };
}

function empty(svg, msg) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const w = Math.max(svg.clientWidth, 200), h = Math.max(svg.clientHeight, 120);
  svg.setAttribute("viewBox", "0 0 " + w + " " + h);
  svg.appendChild(svgEl("text", { x: w / 2, y: h / 2, "text-anchor": "middle" }, msg));
}

// timeChart draws series over time: value(p) gives a point's value
// (negative: unknown, a gap in the line); band(p), if given, [lo, hi].
function timeChart(svg, points, value, band, fmt) {
  const known = points.filter((p) => value(p) >= 0);
  if (known.length < 2) return empty(svg, "waiting for data");
  let top = 0;
  for (const p of points) {
    top = Math.max(top, value(p));
    if (band) { const b = band(p); if (b) top = Math.max(top, b[1]); }
  }
  const f = frame(svg, niceMax(top), fmt);
  const t0 = points[0].t, t1 = points[points.length - 1].t;
  const x = (t) => f.area.x0 + ((t - t0) / Math.max(t1 - t0, 1)) * (f.area.x1 - f.area.x0);
  if (band) {
    let upper = [], lower = [];
    const flush = () => {
      if (upper.length > 1) {
        const pts = upper.concat(lower.reverse()).map((q) => q[0].toFixed(1) + "," + q[1].toFixed(1));
        svg.appendChild(svgEl("polygon", { class: "band", points: pts.join(" ") }));
      }
      upper = []; lower = [];
    };
    for (const p of points) {
      const b = band(p);
      if (!b) { flush(); continue; }
      upper.push([x(p.t), f.y(b[1])]);
      lower.push([x(p.t), f.y(b[0])]);
    }
    flush();
  }
  let d = "", pen = false;
  for (const p of points) {
    const v = value(p);
    if (v < 0) { pen = false; continue; }
    d += (pen ? "L" : "M") + x(p.t).toFixed(1) + "," + f.y(v).toFixed(1);
    pen = true;
  }
  svg.appendChild(svgEl("path", { class: "line", d: d }));
  svg.appendChild(svgEl("text", { x: f.area.x0, y: f.h - 4 }, clock(t0, t1 - t0)));
  svg.appendChild(svgEl("text", { x: f.area.x1, y: f.h - 4, "text-anchor": "end" }, clock(t1, t1 - t0)));
}

function lengthChart(svg, lengths) {
  const bins = lengths.buckets || [];
  if (bins.length === 0) return empty(svg, "no answers yet");
  let top = 0;
  for (const b of bins) top = Math.max(top, b.count);
  const f = frame(svg, niceMax(top), short);
  const bw = (f.area.x1 - f.area.x0) / bins.length;
  bins.forEach((b, i) => {
    const y = f.y(b.count);
    const r = svgEl("rect", {
      class: "bin", x: (f.area.x0 + i * bw + 0.5).toFixed(1), y: y.toFixed(1),
      width: Math.max(bw - 1, 0.5).toFixed(1), height: Math.max(f.area.y1 - y, 0).toFixed(1),
    });
    r.appendChild(svgEl("title", {}, b.lo + "–" + (b.hi - 1) + " tokens: " + b.count));
    svg.appendChild(r);
  });
  const first = bins[0], last = bins[bins.length - 1];
  svg.appendChild(svgEl("text", { x: f.area.x0, y: f.h - 4 }, short(first.lo) + " tok"));
  svg.appendChild(svgEl("text", { x: f.area.x1, y: f.h - 4, "text-anchor": "end" }, short(last.hi - 1) + " tok"));
}

function row(cells, cls) {
  const tr = document.createElement("tr");
  if (cls) tr.className = cls;
  for (const c of cells) {
    const td = document.createElement("td");
    td.textContent = c[0];
    if (c[1]) td.className = c[1];
    if (c[0].length > 60) { // a long reason: the start, all of it on hover
      td.title = c[0];
      td.textContent = c[0].slice(0, 59) + "…";
    }
    if (c[2]) {
      const sub = document.createElement("div");
      sub.className = "sub";
      sub.textContent = c[2];
      td.appendChild(sub);
    }
    tr.appendChild(td);
  }
  return tr;
}

function renderWorkers(ws) {
  const body = $("workers");
  const rows = ws.map((w) => {
    let state = "working", cls = "";
    if (w.paused && w.paused_reason === "stopping") { state = "stopping"; cls = "stale"; }
    else if (w.paused) { state = "paused: " + (w.paused_reason || "?"); cls = "paused"; }
    else if (w.stale) { state = "silent " + dur(w.silent_sec); cls = "stale"; }
    const where = [w.host, w.backend && "→ " + w.backend].filter(Boolean).join(" ");
    return row([
      [w.name, "name", where], [state, "state"],
      [num(w.in_flight) + " / " + num(w.window), "num"], [num(w.tokens_per_sec), "num"],
    ], cls);
  });
  body.replaceChildren(...rows);
  $("workers-none").hidden = ws.length > 0;
}

function renderReasons(byReason) {
  const entries = Object.entries(byReason || {}).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  $("reasons").replaceChildren(...entries.map(([r, n]) => row([[r, "name"], [num(n), "num"]])));
  $("reasons-none").hidden = entries.length > 0;
}

function render(s) {
  latest = s;
  receivedAt = Date.now();
  setText("run", s.run);
  document.title = "aerie · " + s.run;
  const t = s.last;
  if (t) {
    setText("completed", num(t.completed));
    setText("total", num(t.total));
    const pct = t.total > 0 ? (100 * t.completed) / t.total : 0;
    setText("percent", t.total > 0 ? "(" + pct.toFixed(pct >= 99.95 || pct === 0 ? 0 : 1) + "%)" : "");
    $("bar-done").style.width = pct + "%";
    $("bar-failed").style.width = (t.total > 0 ? (100 * t.failed) / t.total : 0) + "%";
    $("bar").setAttribute("aria-valuenow", pct.toFixed(1));
    setText("failed", num(t.failed));
    setText("truncated", num(t.truncated));
    setText("inflight", num(t.in_flight));
    setText("nworkers", num(t.workers));
    setText("rps", num(t.requests_per_sec, 2));
    setText("tps", num(t.tokens_per_sec));
    setText("mean", num(t.mean_completion_tokens));
    // A hidden-states run reads its samples' tokens and writes files:
    // its token figures are input tokens, and no answer has a length.
    const hs = t.task === "hidden-states";
    setText("tps-label", hs ? "input tokens/s" : "tokens/s");
    setText("mean-label", hs ? "mean sample tokens" : "mean tokens");
    setText("h-tps", hs ? "Input tokens/s" : "Tokens/s");
    $("hs-stat").hidden = !hs;
    setText("hs-bytes", hs ? bytes(t.hidden_states_bytes) + " / " + bytes(t.hidden_states_bytes_total) : "");
    $("len-card").hidden = hs;
    $("truncated-stat").hidden = hs;
    setText("elapsed", dur(t.elapsed_sec));
    let eta = dur(t.eta_sec);
    if (hasBand(t) && t.phase !== "done") {
      eta += " (" + dur(t.eta_low_sec) + "–" + dur(t.eta_high_sec) + ")";
    }
    setText("eta", t.phase === "done" ? "done" : eta);
    const note = t.phase === "done" ? "" : stragglerNote(t.stragglers);
    $("eta-note").hidden = !note;
    setText("eta-note", note);
    const ph = $("phase");
    setText("phase", t.phase);
    ph.className = "badge " + t.phase.replace(/[^a-z-]/g, "");
    const we = $("write-error");
    we.hidden = !t.write_error;
    setText("write-error", t.write_error ? "Output is not being written: " + t.write_error : "");
    const uw = $("unwritten");
    uw.hidden = !t.unwritten;
    setText("unwritten", t.unwritten ? num(t.unwritten) + " lines will never come: nothing is queued, in flight or waiting to be written. They went to another --data-dir, or the files were deleted, or prompts were lost; the aggregator's log says how to get them back." : "");
    const sl = $("slots");
    sl.hidden = !t.waiting_for_slots;
    setText("slots", t.waiting_for_slots ? "Waiting for slots: this run's workers serve other runs (its priority " + (t.priority || 0) + "; aerie runs ls shows every run's)." : "");
    renderReasons(t.failed_by_reason);
  } else {
    setText("phase", "waiting");
  }
  drawCharts();
  renderWorkers(s.workers || []);
  const l = s.lengths;
  setText("len-summary", l.count > 0 ? "(" + num(l.count) + " answers, mean " + num(l.mean) + ", longest " + num(l.max) + ")" : "");
  tick();
}

// stragglerNote says what the ETA waits on when the run's longest answers
// set its end (the event's stragglers), as aerie status does.
function stragglerNote(s) {
  if (!s) return "";
  if (!s.in_flight) return "The ETA is set by the longest answers still to come.";
  let note = "Waiting on " + num(s.in_flight) + (s.in_flight === 1 ? " answer" : " answers");
  if (s.longest_tokens > 0) {
    note += (s.in_flight === 1 ? " at " : ", the longest at ") + num(s.longest_tokens) + " tokens";
    if (s.longest_sec > 0) note += ", running " + dur(s.longest_sec);
  }
  return note + ".";
}

// hasBand says whether an event or a point carries the ETA's band: an
// aggregator without one sends zeros or negatives.
function hasBand(p) {
  return p.eta_sec >= 0 && p.eta_low_sec >= 0 && p.eta_high_sec > 0 && p.eta_high_sec >= p.eta_low_sec;
}

function drawCharts() {
  if (!latest) return;
  const h = latest.history || [];
  timeChart($("chart-rps"), h, (p) => p.requests_per_sec, null, short);
  timeChart($("chart-tps"), h, (p) => p.tokens_per_sec, null, short);
  timeChart($("chart-eta"), h, (p) => p.eta_sec,
    (p) => (hasBand(p) ? [p.eta_low_sec, p.eta_high_sec] : null), durAxis);
  lengthChart($("chart-len"), latest.lengths);
}

function tick() {
  if (!latest) return;
  const ago = Math.round((Date.now() - receivedAt) / 1000);
  setText("updated", ago < 2 ? "just now" : ago + "s ago");
}

// Connection: the event stream when the browser has one; polling when it
// has none, when the stream is refused, and while it reconnects.
let mode = "";
function setMode(m) {
  mode = m;
  const c = $("conn");
  setText("conn", m);
  c.className = "conn " + m;
}

async function poll() {
  try {
    const r = await fetch("api/state", { cache: "no-store" });
    if (!r.ok) throw new Error(r.status);
    render(await r.json());
    if (mode !== "live") setMode("polling");
  } catch (e) {
    if (mode !== "live") setMode("offline");
  }
}

function connect() {
  if (!window.EventSource) { setMode("polling"); poll(); return; }
  const es = new EventSource("api/events");
  es.addEventListener("state", (e) => {
    setMode("live");
    render(JSON.parse(e.data));
  });
  es.onerror = () => {
    if (mode === "live") setMode("reconnecting");
  };
}

setInterval(() => {
  tick();
  if (mode !== "live") poll();
}, 3000);
let resizeTimer = 0;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(drawCharts, 150);
});
connect();
poll();

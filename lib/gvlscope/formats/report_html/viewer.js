// gvlscope's HTML report viewer: no dependencies, no network. Reads REPORT (written by
// lib/gvlscope/formats/report_html.rb) and draws one lane per thread on a canvas.
"use strict";
// Errors are recorded on <body> as well as in the console, so a headless browser's DOM dump
// shows them (test/report_html_test.rb).
window.addEventListener("error", (event) => {
  document.body.dataset.errors = (document.body.dataset.errors || "") + event.message + "\n";
});

// A colour per state code; the words (REPORT.states, REPORT.labels) come from lib/gvlscope/vocabulary.rb.
const COLORS = {
  started: "#9ecae1", wait: "#d62728", run: "#2ca02c", gc: "#ff7f0e", exited: "#000000",
  io: "#aec7e8", sleep: "#dbdb8d", lock: "#9467bd", join: "#c5b0d5", pass: "#98df8a", blocking: "#bcbd22",
  io_sleep: "#c7c7c7", unknown: "#e7e7e7",
};
const LANE = 22, LABEL_WIDTH = 170, AXIS = 20;

function decode(base64, Type) {
  const binary = atob(base64);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i); // a plain loop: 10x Uint8Array.from's
  return new Type(bytes.buffer);
}

const lanes = REPORT.threads.map((t) => ({
  label: t.label, codes: decode(t.codes, Uint8Array), starts: decode(t.starts, Uint32Array),
  ends: decode(t.ends, Uint32Array),
}));
const stateColors = REPORT.states.map((s) => COLORS[s]);
const totalUnits = Math.max(1, Math.ceil(REPORT.durationNs / REPORT.unitNs));
let view = { from: 0, to: totalUnits };

// 1.5 s, 2.25 ms, 800 us: three significant digits at most, no trailing zeros.
function formatNs(ns) {
  const [value, unit] = ns >= 1e9 ? [ns / 1e9, "s"] : ns >= 1e6 ? [ns / 1e6, "ms"] : ns >= 1e3 ? [ns / 1e3, "us"] : [ns, "ns"];
  return Number(value.toPrecision(3)) + " " + unit;
}

function text(id, content) { document.getElementById(id).textContent = content; }

function renderStatic() {
  text("summary", REPORT.summary);
  text("table", REPORT.table.join("\n"));
  const findings = document.getElementById("findings");
  if (REPORT.findings.length === 0) findings.textContent = "No findings: no convoy, hog or contention in this trace.";
  REPORT.findings.forEach((f) => {
    const box = document.createElement("div");
    box.className = "finding";
    const title = document.createElement("div");
    title.textContent = f.title;
    const fix = document.createElement("div");
    fix.className = "fix";
    fix.textContent = "Fix: " + f.fix;
    box.append(title, fix);
    if (f.focus_ns) {
      const link = document.createElement("a");
      link.href = "#focus=" + f.focus_ns.join(",");
      link.textContent = "show in the timeline";
      box.append(link);
    }
    findings.append(box);
  });
  const legend = document.getElementById("legend");
  REPORT.states.forEach((s, code) => {
    const item = document.createElement("span");
    const swatch = document.createElement("i");
    swatch.style.background = COLORS[s];
    item.append(swatch, REPORT.labels[code]);
    legend.append(item);
  });
  const histograms = document.getElementById("histograms");
  REPORT.histograms.forEach((lines) => {
    const pre = document.createElement("pre");
    pre.textContent = lines.join("\n");
    histograms.append(pre);
  });
}

const canvas = document.getElementById("timeline");
const context = canvas.getContext("2d");

// First interval of a lane that ends after +time+ (ends are sorted: a thread's intervals follow
// one another).
function firstAfter(lane, time) {
  let low = 0, high = lane.ends.length;
  while (low < high) {
    const mid = (low + high) >> 1;
    if (lane.ends[mid] < time) low = mid + 1; else high = mid;
  }
  return low;
}

function draw() {
  const began = performance.now();
  const width = canvas.clientWidth;
  canvas.width = width * devicePixelRatio;
  canvas.height = (AXIS + lanes.length * LANE) * devicePixelRatio;
  canvas.style.height = AXIS + lanes.length * LANE + "px";
  context.setTransform(devicePixelRatio, 0, 0, devicePixelRatio, 0, 0);
  context.clearRect(0, 0, width, AXIS + lanes.length * LANE);
  const plot = width - LABEL_WIDTH;
  const scale = plot / (view.to - view.from);
  drawAxis(plot, scale);
  let drawn = 0;
  lanes.forEach((lane, index) => {
    const top = AXIS + index * LANE;
    context.fillStyle = "#222";
    context.font = "12px system-ui, sans-serif";
    context.fillText(lane.label.slice(0, 24), 4, top + 15);
    // Intervals narrower than a pixel are merged: each pixel column shows the state that took
    // most of its time, so a zoomed-out view of millions of intervals stays correct and fast.
    let column = -1;
    const share = new Float64Array(REPORT.states.length);
    const flush = () => {
      if (column < 0) return;
      let best = 0;
      for (let s = 1; s < share.length; s++) if (share[s] > share[best]) best = s;
      context.fillStyle = stateColors[best];
      context.fillRect(LABEL_WIDTH + column, top + 3, 1, LANE - 6);
      share.fill(0);
      drawn++;
    };
    for (let i = firstAfter(lane, view.from); i < lane.codes.length && lane.starts[i] <= view.to; i++) {
      const x0 = (Math.max(lane.starts[i], view.from) - view.from) * scale;
      const x1 = (Math.min(lane.ends[i], view.to) - view.from) * scale;
      const code = lane.codes[i];
      if (x1 - x0 >= 1 || REPORT.states[code] === "exited") {
        flush();
        column = -1;
        context.fillStyle = stateColors[code];
        context.fillRect(LABEL_WIDTH + x0, top + 3, Math.max(x1 - x0, 1), LANE - 6);
        drawn++;
      } else {
        const at = Math.floor(x0);
        if (at !== column) { flush(); column = at; }
        share[code] += lane.ends[i] - lane.starts[i] + 1e-9;
      }
    }
    flush();
  });
  text("view", formatNs(view.from * REPORT.unitNs) + " - " + formatNs(view.to * REPORT.unitNs));
  document.body.dataset.rendered = "ok";
  document.body.dataset.lanes = String(lanes.length);
  document.body.dataset.rectangles = String(drawn);
  document.body.dataset.drawMs = (performance.now() - began).toFixed(1); // read by bench/report.rb
}

function drawAxis(plot, scale) {
  const span = (view.to - view.from) * REPORT.unitNs;
  let step = Math.pow(10, Math.floor(Math.log10(span / 5)));
  if (span / step > 10) step *= 2;
  context.fillStyle = "#555";
  context.font = "11px system-ui, sans-serif";
  const first = Math.ceil(view.from * REPORT.unitNs / step) * step;
  for (let t = first; t <= view.to * REPORT.unitNs; t += step) {
    const x = LABEL_WIDTH + (t / REPORT.unitNs - view.from) * scale;
    context.fillRect(x, AXIS - 6, 1, 6);
    context.fillText(formatNs(t), x + 2, AXIS - 8);
  }
}

function zoom(factor, centre) {
  const at = centre === undefined ? (view.from + view.to) / 2 : centre;
  const span = Math.max((view.to - view.from) * factor, 10);
  view.from = Math.max(0, at - (at - view.from) * span / (view.to - view.from));
  view.to = Math.min(totalUnits, view.from + span);
  draw();
}

function unitsAt(clientX) {
  const rect = canvas.getBoundingClientRect();
  const plot = rect.width - LABEL_WIDTH;
  return view.from + (clientX - rect.left - LABEL_WIDTH) / plot * (view.to - view.from);
}

function showFocus() {
  const match = /focus=(\d+),(\d+)/.exec(location.hash);
  if (!match) return;
  const from = Number(match[1]) / REPORT.unitNs, to = Number(match[2]) / REPORT.unitNs;
  const margin = Math.max((to - from) * 0.5, 10);
  view = { from: Math.max(0, from - margin), to: Math.min(totalUnits, to + margin) };
  draw();
  document.getElementById("timeline-box").scrollIntoView();
}

function tooltip(event) {
  const box = document.getElementById("tooltip");
  const rect = canvas.getBoundingClientRect();
  const index = Math.floor((event.clientY - rect.top - AXIS) / LANE);
  const lane = lanes[index];
  if (!lane || event.clientX - rect.left < LABEL_WIDTH) { box.style.display = "none"; return; }
  const time = unitsAt(event.clientX);
  const i = firstAfter(lane, time);
  if (i >= lane.codes.length || lane.starts[i] > time) { box.style.display = "none"; return; }
  box.textContent = lane.label + ": " + REPORT.labels[lane.codes[i]] + " for " +
    formatNs((lane.ends[i] - lane.starts[i]) * REPORT.unitNs) + " at " + formatNs(lane.starts[i] * REPORT.unitNs);
  box.style.left = event.clientX - rect.left + 12 + "px";
  box.style.top = event.clientY - rect.top + 12 + "px";
  box.style.display = "block";
}

let dragging = null;
canvas.addEventListener("wheel", (event) => {
  event.preventDefault();
  zoom(event.deltaY < 0 ? 0.8 : 1.25, unitsAt(event.clientX));
}, { passive: false });
canvas.addEventListener("mousedown", (event) => { dragging = { x: event.clientX, view: { ...view } }; });
window.addEventListener("mouseup", () => { dragging = null; });
canvas.addEventListener("mousemove", (event) => {
  if (!dragging) { tooltip(event); return; }
  const plot = canvas.clientWidth - LABEL_WIDTH;
  const span = dragging.view.to - dragging.view.from;
  const shift = Math.min(Math.max((dragging.x - event.clientX) / plot * span, -dragging.view.from),
                         totalUnits - dragging.view.to);
  view = { from: dragging.view.from + shift, to: dragging.view.to + shift };
  draw();
});
canvas.addEventListener("dblclick", () => { view = { from: 0, to: totalUnits }; draw(); });
document.getElementById("zoom-in").onclick = () => zoom(0.5);
document.getElementById("zoom-out").onclick = () => zoom(2);
document.getElementById("reset").onclick = () => { view = { from: 0, to: totalUnits }; draw(); };
window.addEventListener("hashchange", showFocus);
window.addEventListener("resize", draw);

renderStatic();
draw();
showFocus();
document.body.dataset.readyMs = performance.now().toFixed(0); // since navigation start; bench/report.rb


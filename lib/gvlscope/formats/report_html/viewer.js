// gvlscope's HTML report viewer: no dependencies, no network. Reads REPORT (written by
// lib/gvlscope/formats/report_html.rb), draws one lane per thread on a canvas (under an event
// loop's thread, a lane of its fibers' turns) and, with stacks, the holders' profile as an icicle
// graph and the release-site table.
"use strict";
// Errors are recorded on <body> as well as in the console, so a headless browser's DOM dump
// shows them (test/formats/report_html_test.rb).
window.addEventListener("error", (event) => {
  document.body.dataset.errors = (document.body.dataset.errors || "") + event.message + "\n";
});

// A colour per state code; the words (REPORT.states, REPORT.labels) come from lib/gvlscope/support/vocabulary.rb.
const COLORS = {
  started: "#9ecae1", wait: "#d62728", run: "#2ca02c", gc: "#ff7f0e", exited: "#000000",
  io: "#aec7e8", sleep: "#dbdb8d", lock: "#9467bd", join: "#c5b0d5", pass: "#98df8a", blocking: "#bcbd22",
  io_sleep: "#c7c7c7", unknown: "#e7e7e7",
};
// Zoomed out, a lane shows the overview's bins (report_html.rb): in each pixel column, the shares
// of run, gc, wait and idle stacked from the top (idle without its reason: the bins do not keep it).
const SUMMARY_STATES = ["run", "wait", "idle", "gc"]; // the order of the bins' four numbers
const SUMMARY_STACK = [0, 3, 1, 2]; // drawn from the top: run, gc, wait, idle (indexes in SUMMARY_STATES)
const SUMMARY_IDLE = "#8c8c8c"; // darker than the idle reasons' greys (io_sleep, unknown): a summary mixes them
const SUMMARY_IDLE_LABEL = "idle, any reason (zoomed-out summary)";
const LANE = 22, LABEL_WIDTH = 170, AXIS = 20, BAR_TOP = 3, BAR = LANE - 6, SHARE_ONE = 65535;

function decode(base64, Type) {
  const binary = atob(base64);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i); // a plain loop: 10x Uint8Array.from's
  return new Type(bytes.buffer);
}

const TIMELINE = REPORT.timeline;
const totalUnits = Math.max(1, Math.ceil(REPORT.durationNs / REPORT.unitNs));
const binUnits = TIMELINE.binNs ? TIMELINE.binNs / REPORT.unitNs : 0;
// Where the page holds every interval of the lanes, in units, sorted and apart.
const windows = TIMELINE.windows.map(([from, to]) => [from / REPORT.unitNs, to / REPORT.unitNs]);

// A lane's bins as running sums per state (bins + 1 entries each): the share of a state over any
// time range is two look-ups, whether a pixel column spans a thousand bins or a part of one.
function runningSums(base64) {
  const shares = decode(base64, Uint16Array);
  const bins = shares.length / 4;
  const sums = new Float64Array((bins + 1) * 4);
  for (let b = 0; b < bins; b++) {
    for (let s = 0; s < 4; s++) sums[(b + 1) * 4 + s] = sums[b * 4 + s] + shares[b * 4 + s] / SHARE_ONE;
  }
  return sums;
}

// A reader of BER integers (report_html.rb, ReportHTML#ber) from base64: each call, the next one.
function berReader(base64) {
  const bytes = decode(base64, Uint8Array);
  let at = 0;
  return () => {
    let value = 0, byte;
    do { byte = bytes[at++]; value = value * 128 + (byte & 127); } while (byte & 128);
    return value;
  };
}

// A lane's interval times (report_html.rb, ReportHTML#lane): BER integers, gap then length per
// interval, into arrays of starts and ends.
function intervalTimes(base64, count) {
  const starts = new Uint32Array(count), ends = new Uint32Array(count);
  const next = berReader(base64);
  let time = 0;
  for (let i = 0; i < count; i++) {
    starts[i] = time += next();
    ends[i] = time += next();
  }
  return [starts, ends];
}

// A loop's fibers lane (report_html.rb, ReportHTML#fiber_lane): its turns' fibers (BER serials)
// and times, encoded as the intervals'.
function fiberLane(t) {
  const fibers = new Uint32Array(t.fibers.count), next = berReader(t.fibers.serials);
  for (let i = 0; i < fibers.length; i++) fibers[i] = next();
  const [starts, ends] = intervalTimes(t.fibers.times, t.fibers.count);
  return { label: "fibers", loop: t.label, others: 0, fibers: fibers, starts: starts, ends: ends, sums: null };
}

const lanes = REPORT.threads.flatMap((t) => {
  const [starts, ends] = intervalTimes(t.times, t.count);
  const lane = { label: t.label, others: t.others, codes: decode(t.codes, Uint8Array), starts: starts, ends: ends,
                 sums: t.bins ? runningSums(t.bins) : null };
  return t.fibers ? [lane, fiberLane(t)] : [lane];
});
// A colour per fiber serial, golden-angle hues (neighbours differ, whatever the serials), paler
// than the states' colours.
const fiberColor = (serial) => `hsl(${(200 + serial * 137.508) % 360}, 60%, 70%)`;
const stateColors = REPORT.states.map((s) => COLORS[s]);
// A page made for a range (`gvlscope report --window`) opens on it.
let view = TIMELINE.asked ? { from: TIMELINE.asked[0] / REPORT.unitNs, to: TIMELINE.asked[1] / REPORT.unitNs }
  : { from: 0, to: totalUnits };

// The bins' time in one state from the trace's start to +time+ (units), in bins.
function summed(sums, state, time) {
  const bins = sums.length / 4 - 1;
  const at = Math.min(Math.max(time / binUnits, 0), bins);
  const bin = Math.min(Math.floor(at), bins - 1);
  return sums[bin * 4 + state] + (sums[(bin + 1) * 4 + state] - sums[bin * 4 + state]) * (at - bin);
}

// The shares of run, wait, idle and gc (SUMMARY_STATES) of a lane over [from, to) in units.
function sharesOf(lane, from, to) {
  const span = (to - from) / binUnits;
  return [0, 1, 2, 3].map((s) => span > 0 ? (summed(lane.sums, s, to) - summed(lane.sums, s, from)) / span : 0);
}

// 1.5 s, 2.25 ms, 800 us: three significant digits at most (or +digits), no trailing zeros.
function formatNs(ns, digits = 3) {
  const [value, unit] = ns >= 1e9 ? [ns / 1e9, "s"] : ns >= 1e6 ? [ns / 1e6, "ms"] : ns >= 1e3 ? [ns / 1e3, "us"] : [ns, "ns"];
  return Number(value.toPrecision(digits)) + " " + unit;
}

function text(id, content) { document.getElementById(id).textContent = content; }

function renderStatic() {
  text("summary", REPORT.summary);
  text("table", REPORT.table.join("\n"));
  const findings = document.getElementById("findings");
  if (REPORT.findings.length === 0) findings.textContent = REPORT.noFindings || "No findings.";
  REPORT.findings.forEach((f, index) => {
    const box = document.createElement("div");
    box.className = "finding";
    const title = document.createElement("div");
    title.textContent = (f.explains ? "[" + f.explains + "] " : "") + f.title;
    const fix = document.createElement("div");
    fix.className = "fix";
    fix.textContent = "Fix: " + f.fix;
    box.append(title, fix);
    const holderProfile = REPORT.stacks && f.holder !== null && REPORT.stacks.threads[f.holder];
    if (f.focus_ns || holderProfile) {
      // The hash, not a handler: a finding can be linked to (report.html#finding=2).
      const link = document.createElement("a");
      link.href = "#finding=" + index;
      link.textContent = [f.focus_ns && "show in the timeline", holderProfile && "show the holder's code"]
        .filter(Boolean).join(" and ");
      box.append(link);
    }
    findings.append(box);
  });
  if (REPORT.findingsTotal > REPORT.findings.length) {
    const more = document.createElement("div");
    more.textContent = `(${REPORT.findingsTotal - REPORT.findings.length} more findings: gvlscope report FILE lists them all)`;
    findings.append(more);
  }
  const legend = document.getElementById("legend");
  const swatch = (color, label) => {
    const item = document.createElement("span");
    const square = document.createElement("i");
    square.style.background = color;
    item.append(square, label);
    legend.append(item);
  };
  REPORT.states.forEach((s, code) => swatch(COLORS[s], REPORT.labels[code]));
  if (lanes.some((lane) => lane.sums)) swatch(SUMMARY_IDLE, SUMMARY_IDLE_LABEL);
  if (TIMELINE.turns) {
    const item = document.createElement("span");
    item.textContent = "fibers (under a loop's thread): its event loop's turns, a colour per fiber";
    legend.append(item);
  }
  text("timeline-note", timelineNote());
  if (TIMELINE.busiest) {
    const link = document.createElement("a");
    link.href = "#focus=" + TIMELINE.busiest.join(",");
    link.textContent = " Show where the threads waited most.";
    document.getElementById("timeline-note").append(link);
  }
  const histograms = document.getElementById("histograms");
  REPORT.histograms.forEach((lines) => {
    const pre = document.createElement("pre");
    pre.textContent = lines.join("\n");
    histograms.append(pre);
  });
}

// What the timeline holds, when it is not every interval of every thread.
function timelineNote() {
  const notes = [];
  if (TIMELINE.mode === "windows") {
    const summaries = `zoomed out, each lane shows the share of run, gc, wait and idle in each pixel (summaries of ` +
      `${formatNs(TIMELINE.binNs)}, stacked from the top). `;
    if (TIMELINE.asked) {
      const [from, to] = windows[0] || TIMELINE.asked.map((ns) => ns / REPORT.unitNs);
      const cut = to * REPORT.unitNs < TIMELINE.asked[1] ? ` (the range held more than a page takes: it has every one up to ` +
        `${formatNs(to * REPORT.unitNs, 6)})` : "";
      notes.push(`A page for ${formatNs(TIMELINE.asked[0], 6)} - ${formatNs(TIMELINE.asked[1], 6)} of this trace ` +
        `(--window): its ${TIMELINE.intervals.toLocaleString("en")} intervals are on the page${cut}, marked blue on the ` +
        `time axis; elsewhere, ` + summaries);
      return notes.concat(threadsNote()).join(" ");
    }
    notes.push(`This trace has ${TIMELINE.events.toLocaleString("en")} events: ` + summaries +
      `The intervals themselves are on the page around the findings` +
      (TIMELINE.busiest ? " and where the threads waited most" : "") + ` (${windows.length} ` +
      `window${windows.length === 1 ? "" : "s"}, marked blue on the time axis, ` +
      `${TIMELINE.intervals.toLocaleString("en")} intervals): zoom into one, or follow a finding's link, to see them.`);
  }
  return notes.concat(threadsNote()).join(" ");
}

function threadsNote() {
  if (TIMELINE.threadsTotal <= TIMELINE.lanesShown) return [];
  return [`Showing ${TIMELINE.lanesShown} of ${TIMELINE.threadsTotal.toLocaleString("en")} threads (those the ` +
    `findings name, then those that ran and waited most); the other ` +
    `${(TIMELINE.threadsTotal - TIMELINE.lanesShown).toLocaleString("en")} share the last lane, their average.`];
}

// "12.512345s": what `gvlscope report --window` reads (lib/gvlscope/support/units.rb, Units.seconds).
function seconds(microseconds) { return (microseconds / 1e6).toFixed(6).replace(/\.?0+$/, "") + "s"; }

// A word for the shell as it is, or in single quotes.
function shellWord(word) { return /^[\w.\/:@%+=-]+$/.test(word) ? word : "'" + word.replace(/'/g, "'\\''") + "'"; }

// Zoomed into summaries (a part of the view without the intervals themselves): the command that
// writes a page with every interval of the view, its start rounded down and its end up to a us.
function showDetailHint(summarised) {
  const hint = document.getElementById("detail-hint");
  const zoomed = view.to - view.from < totalUnits;
  hint.hidden = !(TIMELINE.mode === "windows" && binUnits && zoomed && summarised.length > 0);
  if (hint.hidden) return;
  const from = Math.floor(view.from * REPORT.unitNs / 1e3), to = Math.ceil(view.to * REPORT.unitNs / 1e3);
  const out = REPORT.file.replace(/^.*\//, "").replace(/\.[^.]*$/, "") + "-window.html";
  text("detail-command", `gvlscope report ${shellWord(REPORT.file)} --html ${shellWord(out)} --window ${seconds(from)}..${seconds(to)}`);
  text("detail-limit", `(up to ${TIMELINE.detailLimit.toLocaleString("en")} intervals)`);
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

// The parts of the view drawn from intervals: the windows that hold them (everywhere when the
// page holds every interval).
function intervalRanges() {
  return windows.filter(([from, to]) => to > view.from && from < view.to)
    .map(([from, to]) => [Math.max(from, view.from), Math.min(to, view.to)]);
}

// The rest of the view: drawn from the bins.
function binRanges(ranges) {
  const rest = [];
  let at = view.from;
  ranges.forEach(([from, to]) => { if (from > at) rest.push([at, from]); at = Math.max(at, to); });
  if (at < view.to) rest.push([at, view.to]);
  return rest;
}

let pixels = null; // the bins' ImageData, kept while the canvas keeps its size
const RGB = (hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
// Each state's colour as one little-endian RGBA word, in SUMMARY_STACK order.
const stackColors = new Uint32Array(SUMMARY_STACK.map((s) => {
  const [r, g, b] = RGB(SUMMARY_STATES[s] === "idle" ? SUMMARY_IDLE : COLORS[SUMMARY_STATES[s]]);
  return (255 << 24 | b << 16 | g << 8 | r) >>> 0;
}));

// The bins of every lane over +ranges+ of each, written pixel by pixel into one ImageData (a few
// million writes, one putImageData: far cheaper than a rectangle per state per column). Where a
// device-pixel column starts, in bins, is worked out once for all lanes.
function drawBins(rangesOf, scale) {
  const ratio = devicePixelRatio;
  const width = Math.max(1, Math.round((canvas.clientWidth - LABEL_WIDTH) * ratio));
  const height = Math.max(1, Math.round(lanes.length * LANE * ratio));
  if (!pixels || pixels.width !== width || pixels.height !== height) pixels = context.createImageData(width, height);
  const words = new Uint32Array(pixels.data.buffer);
  words.fill(0);
  const bins = TIMELINE.bins, binsPerPixel = 1 / (scale * ratio * binUnits);
  const edge = new Int32Array(width + 1), part = new Float64Array(width + 1);
  for (let x = 0; x <= width; x++) {
    const at = Math.min(Math.max(view.from / binUnits + x * binsPerPixel, 0), bins);
    edge[x] = Math.min(Math.floor(at), bins - 1);
    part[x] = at - edge[x];
  }
  const bar = Math.round(BAR * ratio);
  let columns = 0;
  lanes.forEach((lane, index) => {
    const sums = lane.sums;
    if (!sums) return;
    const top = Math.round((index * LANE + BAR_TOP) * ratio);
    rangesOf(lane).forEach(([from, to]) => {
      const first = Math.max(0, Math.round((from - view.from) * scale * ratio));
      const last = Math.min(width, Math.round((to - view.from) * scale * ratio));
      for (let x = first; x < last; x++) {
        let y = 0, filled = 0;
        for (let k = 0; k < 4; k++) {
          const s = SUMMARY_STACK[k], a = edge[x] * 4 + s, b = edge[x + 1] * 4 + s;
          const before = sums[a] + (sums[a + 4] - sums[a]) * part[x];
          const after = sums[b] + (sums[b + 4] - sums[b]) * part[x + 1];
          filled += Math.min(Math.max((after - before) / binsPerPixel, 0), 1);
          const end = Math.min(bar, Math.round(filled * bar));
          for (let at = (top + y) * width + x; y < end; y++, at += width) words[at] = stackColors[k];
        }
        if (y > 0) columns++;
      }
    });
  });
  context.putImageData(pixels, Math.round(LABEL_WIDTH * ratio), Math.round(AXIS * ratio));
  return columns;
}

// A lane's intervals within [from, to] (units). Intervals narrower than a pixel are merged: each
// pixel column shows the state that took most of its time, so millions of them draw correctly and
// fast at any zoom.
function drawIntervals(lane, top, from, to, scale) {
  let drawn = 0, column = -1;
  const share = new Float64Array(REPORT.states.length);
  const flush = () => {
    if (column < 0) return;
    let best = 0;
    for (let s = 1; s < share.length; s++) if (share[s] > share[best]) best = s;
    context.fillStyle = stateColors[best];
    context.fillRect(LABEL_WIDTH + column, top + BAR_TOP, 1, BAR);
    share.fill(0);
    drawn++;
  };
  for (let i = firstAfter(lane, from); i < lane.codes.length && lane.starts[i] <= to; i++) {
    const x0 = (Math.max(lane.starts[i], from) - view.from) * scale;
    const x1 = (Math.min(lane.ends[i], to) - view.from) * scale;
    const code = lane.codes[i];
    if (x1 - x0 >= 1 || REPORT.states[code] === "exited") {
      flush();
      column = -1;
      context.fillStyle = stateColors[code];
      context.fillRect(LABEL_WIDTH + x0, top + BAR_TOP, Math.max(x1 - x0, 1), BAR);
      drawn++;
    } else {
      const at = Math.floor(x0);
      if (at !== column) { flush(); column = at; }
      share[code] += lane.ends[i] - lane.starts[i] + 1e-9;
    }
  }
  flush();
  return drawn;
}

// Where the page has the turns: everywhere, or where it has the intervals (TIMELINE.turns).
function turnRanges() { return TIMELINE.turns === "all" ? [[view.from, view.to]] : intervalRanges(); }

// A fibers lane's turns within [from, to] (units), as drawIntervals draws intervals: a turn
// narrower than a pixel shares its column, which shows the fiber that took most of it. The loop's
// own time (its select, between turns) is left blank.
function drawTurns(lane, top, from, to, scale) {
  let drawn = 0, column = -1;
  const share = new Map();
  const flush = () => {
    if (column < 0) return;
    let best = -1, most = -1;
    share.forEach((time, fiber) => { if (time > most) { best = fiber; most = time; } });
    context.fillStyle = fiberColor(best);
    context.fillRect(LABEL_WIDTH + column, top + BAR_TOP, 1, BAR);
    share.clear();
    drawn++;
  };
  for (let i = firstAfter(lane, from); i < lane.fibers.length && lane.starts[i] <= to; i++) {
    const x0 = (Math.max(lane.starts[i], from) - view.from) * scale;
    const x1 = (Math.min(lane.ends[i], to) - view.from) * scale;
    if (x1 - x0 >= 1) {
      flush();
      column = -1;
      context.fillStyle = fiberColor(lane.fibers[i]);
      context.fillRect(LABEL_WIDTH + x0, top + BAR_TOP, x1 - x0, BAR);
      drawn++;
    } else {
      const at = Math.floor(x0);
      if (at !== column) { flush(); column = at; }
      share.set(lane.fibers[i], (share.get(lane.fibers[i]) || 0) + lane.ends[i] - lane.starts[i] + 1e-9);
    }
  }
  flush();
  return drawn;
}

function draw() {
  const began = performance.now();
  const width = canvas.clientWidth;
  const height = AXIS + lanes.length * LANE;
  canvas.width = width * devicePixelRatio;
  canvas.height = height * devicePixelRatio;
  canvas.style.height = height + "px";
  context.setTransform(devicePixelRatio, 0, 0, devicePixelRatio, 0, 0);
  context.clearRect(0, 0, width, height);
  const plot = width - LABEL_WIDTH;
  const scale = plot / (view.to - view.from);
  const detailed = intervalRanges();
  const summarised = binRanges(detailed);
  // The others' lane has bins only; the page's lanes have no bins when it holds all their intervals.
  const columns = binUnits ? drawBins((lane) => (lane.others ? [[view.from, view.to]] : summarised), scale) : 0;
  drawAxis(plot, scale);
  let drawn = 0, turnsDrawn = 0;
  lanes.forEach((lane, index) => {
    const top = AXIS + index * LANE;
    context.fillStyle = "#222";
    context.font = "12px system-ui, sans-serif";
    context.fillText(lane.fibers ? "  fibers" : lane.label.slice(0, 24), 4, top + 15);
    if (lane.fibers) turnRanges().forEach(([from, to]) => { turnsDrawn += drawTurns(lane, top, from, to, scale); });
    else if (!lane.others) detailed.forEach(([from, to]) => { drawn += drawIntervals(lane, top, from, to, scale); });
  });
  showDetailHint(summarised);
  const mode = detailed.length === 0 ? "summaries" : summarised.length === 0 || !binUnits ? "intervals" : "intervals and summaries";
  text("view", formatNs(view.from * REPORT.unitNs) + " - " + formatNs(view.to * REPORT.unitNs) + " (" + mode + ")");
  document.body.dataset.view = Math.round(view.from * REPORT.unitNs) + "," + Math.round(view.to * REPORT.unitNs);
  document.body.dataset.rendered = "ok";
  document.body.dataset.lanes = String(lanes.length);
  document.body.dataset.rectangles = String(drawn + columns);
  document.body.dataset.intervalsDrawn = String(drawn);
  if (TIMELINE.turns) document.body.dataset.turnsDrawn = String(turnsDrawn);
  document.body.dataset.binColumns = String(columns);
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
    // Enough digits that neighbours differ: 77.4002 s, 77.4004 s deep into a long trace.
    context.fillText(formatNs(t, Math.min(Math.max(Math.ceil(Math.log10(Math.max(t, 1) / step)) + 1, 3), 12)), x + 2, AXIS - 8);
  }
  if (TIMELINE.mode === "all") return;
  context.fillStyle = "#3182bd"; // where the intervals are: a finding's window, at least 2 px wide to be seen
  windows.forEach(([from, to]) => {
    if (to < view.from || from > view.to) return;
    const x0 = (Math.max(from, view.from) - view.from) * scale, x1 = (Math.min(to, view.to) - view.from) * scale;
    context.fillRect(LABEL_WIDTH + x0, AXIS - 3, Math.max(x1 - x0, 2), 3);
  });
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

// #finding=N (a finding's link): the timeline zooms to its focus_ns and the icicle shows its
// holder thread's profile. #focus=FROM,TO (ns) zooms the timeline only.
function showFocus() {
  const finding = /finding=(\d+)/.exec(location.hash);
  const f = finding && REPORT.findings[Number(finding[1])];
  const match = f ? f.focus_ns && [null, ...f.focus_ns] : /focus=(\d+),(\d+)/.exec(location.hash);
  if (f && REPORT.stacks) selectProfile(f.holder !== null && REPORT.stacks.threads[f.holder] ? f.holder : null);
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
  const inIntervals = !lane.others && intervalRanges().some(([from, to]) => time >= from && time <= to);
  if (lane.fibers) {
    const i = firstAfter(lane, time);
    const inTurns = turnRanges().some(([from, to]) => time >= from && time <= to);
    if (!inTurns || i >= lane.fibers.length || lane.starts[i] > time) { box.style.display = "none"; return; }
    box.textContent = lane.loop + ": fiber " + lane.fibers[i] + " for " +
      formatNs((lane.ends[i] - lane.starts[i]) * REPORT.unitNs) + " at " + formatNs(lane.starts[i] * REPORT.unitNs);
  } else if (inIntervals) {
    const i = firstAfter(lane, time);
    if (i >= lane.codes.length || lane.starts[i] > time) { box.style.display = "none"; return; }
    box.textContent = lane.label + ": " + REPORT.labels[lane.codes[i]] + " for " +
      formatNs((lane.ends[i] - lane.starts[i]) * REPORT.unitNs) + " at " + formatNs(lane.starts[i] * REPORT.unitNs);
  } else if (lane.sums) {
    const from = unitsAt(event.clientX - 0.5), to = unitsAt(event.clientX + 0.5);
    const shares = sharesOf(lane, Math.max(from, 0), to);
    const parts = SUMMARY_STATES.map((s, i) => [s, shares[i]]).filter(([, share]) => share >= 0.0005)
      .map(([s, share]) => s + " " + Number((100 * share).toPrecision(3)) + "%");
    box.textContent = lane.label + ": " + (parts.length ? parts.join(", ") : "no time") + " of " +
      formatNs((to - from) * REPORT.unitNs) + " at " + formatNs(Math.max(from, 0) * REPORT.unitNs) +
      (lane.others ? " (average of " + lane.others + " threads)" : " (summary)");
  } else { box.style.display = "none"; return; }
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
// The wait-weighted profile of holders as an icicle (root on top, callees below), in plain DOM:
// report_html.rb caps each tree at a few thousand nodes, and a div per node gives hover, click
// and a page a test can read. Widths are weights (waiters summed over samples).
const FLAME_ROW = 18;
let flame = null; // { label: holder thread (null: all threads), tree, zoom: node index drawn full width }

function flameTree(label) {
  const tree = label === null ? REPORT.stacks.all : REPORT.stacks.threads[label];
  if (!tree.children) { // children and depths, built on first use (nodes come after their parent)
    tree.children = tree.parent.map(() => []);
    tree.depth = tree.parent.map(() => 0);
    tree.parent.forEach((parent, node) => {
      if (parent < 0) return;
      tree.children[parent].push(node);
      tree.depth[node] = tree.depth[parent] + 1;
    });
  }
  return tree;
}

function selectProfile(label) {
  flame = { label: label, tree: flameTree(label), zoom: 0 };
  drawFlame();
}

function frameOf(node) { const id = flame.tree.frame[node]; return id < 0 ? null : REPORT.stacks.frames[id]; }

function frameName(node) {
  const frame = frameOf(node);
  if (frame) return frame[0];
  return flame.label === null ? "all threads" : "'" + flame.label + "'";
}

// Warm hues for Ruby code, blue for C methods (no file), grey for the root and "(other)", each
// name its own shade so neighbours differ.
function frameColor(node) {
  const frame = frameOf(node);
  if (!frame || frame[0] === "(other)") return "#d0d0d0";
  let hash = 0;
  for (let i = 0; i < frame[0].length; i++) hash = (hash * 31 + frame[0].charCodeAt(i)) >>> 0;
  return frame[1] ? `hsl(${10 + hash % 40}, 85%, ${62 + hash % 13}%)` : `hsl(${200 + hash % 30}, 45%, 72%)`;
}

function drawFlame() {
  const box = document.getElementById("flame");
  const tree = flame.tree;
  const width = box.clientWidth;
  const fragment = document.createDocumentFragment();
  let drawn = 0, rows = 0;
  const place = (node, x, w) => {
    const div = document.createElement("div");
    div.style.left = x + "px";
    div.style.width = w + "px";
    div.style.top = tree.depth[node] * FLAME_ROW + "px";
    div.style.background = frameColor(node);
    div.textContent = frameName(node);
    div.dataset.node = node;
    fragment.append(div);
    drawn++;
    rows = Math.max(rows, tree.depth[node] + 1);
  };
  // The zoomed node's callers span the whole width above it.
  for (let caller = tree.parent[flame.zoom]; caller >= 0; caller = tree.parent[caller]) place(caller, 0, width);
  const scale = tree.weight[flame.zoom] > 0 ? width / tree.weight[flame.zoom] : 0;
  const layout = (node, x) => {
    const w = tree.weight[node] * scale;
    if (w < 1) return; // narrower than a pixel: it and its callees cannot be seen
    place(node, x, w);
    tree.children[node].forEach((child) => { layout(child, x); x += tree.weight[child] * scale; });
  };
  layout(flame.zoom, 0);
  box.textContent = "";
  box.style.height = rows * FLAME_ROW + "px";
  box.append(fragment);
  const who = flame.label === null ? "all threads" : "thread '" + flame.label + "' (a finding's holder)";
  text("flame-title", `Holders: the code that held the GVL while threads waited, ${who}: ${tree.samples} samples, ` +
    "weighted by waiters" + (tree.samples === 0 ? " (no sample: no thread waited at a timer tick, 10 ms)" : ""));
  document.body.dataset.flame = "ok";
  document.body.dataset.flameNodes = String(drawn);
  document.body.dataset.flameThread = flame.label === null ? "" : flame.label;
}

function flameTooltip(event) {
  const tip = document.getElementById("flame-tooltip");
  const node = event.target.dataset.node;
  if (node === undefined) { tip.style.display = "none"; return; }
  const frame = frameOf(Number(node));
  const share = 100 * flame.tree.weight[node] / flame.tree.weight[0];
  tip.textContent = frameName(Number(node)) + (frame && frame[1] ? " at " + frame[1] + ":" + frame[2] : "") +
    ": " + Number(share.toPrecision(3)) + "% of the waiting (weight " + flame.tree.weight[node] + ")";
  const rect = document.getElementById("flame-box").getBoundingClientRect();
  tip.style.left = Math.min(event.clientX - rect.left + 12, rect.width - tip.offsetWidth) + "px";
  tip.style.top = event.clientY - rect.top + 14 + "px";
  tip.style.display = "block";
}

function renderStacks() {
  const stacks = REPORT.stacks;
  if (!stacks) {
    document.getElementById("stacks").textContent =
      "stacks: not recorded (traced with --no-stacks, an older trace, or a gvl-tracing import)";
    document.body.dataset.flame = "none";
    return;
  }
  const rows = document.querySelector("#sites tbody");
  if (stacks.sites.length === 0) rows.insertRow().insertCell().textContent = "(none recorded)";
  stacks.sites.forEach((site) => {
    const row = rows.insertRow();
    [site.site, site.cause, site.calls, site.wait, Number((100 * site.share).toPrecision(3)) + "%"].forEach((value, i) => {
      const cell = row.insertCell();
      cell.textContent = value;
      if (i >= 2) cell.className = "number";
    });
  });
  const box = document.getElementById("flame");
  box.addEventListener("mousemove", flameTooltip);
  box.addEventListener("mouseleave", () => { document.getElementById("flame-tooltip").style.display = "none"; });
  box.addEventListener("click", (event) => {
    const node = event.target.dataset.node;
    if (node === undefined) return;
    // Clicking the zoomed frame again goes back up one level.
    flame.zoom = Number(node) === flame.zoom ? Math.max(flame.tree.parent[flame.zoom], 0) : Number(node);
    drawFlame();
  });
  document.getElementById("flame-all").onclick = () => selectProfile(null);
  window.addEventListener("resize", drawFlame);
  selectProfile(null);
}

window.addEventListener("hashchange", showFocus);
window.addEventListener("resize", draw);

renderStatic();
draw();
renderStacks();
showFocus();
document.body.dataset.readyMs = performance.now().toFixed(0); // since navigation start; bench/report.rb


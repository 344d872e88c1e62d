// Run by speedscope as its #localProfilePath script (the way its own CLI hands it a file), after
// `var GVLSCOPE_PROBE = {name, data, show}` (test/support/speedscope.rb writes both into one file).
// It loads the profile, then reads what speedscope shows, profile after profile: the name in the
// toolbar and the Sandwich table (per frame: total and self time, as text and as the bar's %).
// The result is left as base64 JSON in <body data-gvlscope-probe> for `chromium --dump-dom`.
// At the end it shows profile number `show` (0-based) in the Time Order view, for a screenshot.
(function (config) {
  var result = { title: null, profiles: [], errors: [], warnings: [], log: [] };
  var POLL_MS = 50;
  var GIVE_UP_MS = 30000;
  var waited = 0;

  function text(args) {
    return Array.prototype.map.call(args, function (a) { return a && a.stack ? a.stack : String(a); }).join(" ");
  }
  ["log", "info", "warn", "error"].forEach(function (level) {
    var original = console[level];
    console[level] = function () {
      var line = text(arguments);
      result.log.push(level + ": " + line);
      // speedscope reports a file it cannot import with console.log("Failed to load format", e).
      if (level === "error" || /^Failed to load/.test(line)) result.errors.push(line);
      if (level === "warn") result.warnings.push(line);
      return original.apply(console, arguments);
    };
  });
  window.addEventListener("error", function (e) { result.errors.push("uncaught: " + e.message); });
  window.addEventListener("unhandledrejection", function (e) { result.errors.push("unhandled rejection: " + e.reason); });
  // speedscope alerts "Unrecognized format!" and "... it's empty!"; an alert would block the page.
  window.alert = function (message) { result.errors.push("alert: " + message); };

  // The toolbar shows "name (i/n)" when the file has several profiles, the bare name (not read
  // here) when it has one.
  function toolbarProfile() {
    var spans = document.querySelectorAll("span > span");
    for (var i = 0; i < spans.length; i++) {
      var m = /^\((\d+)\/(\d+)\)$/.exec(spans[i].textContent);
      if (m) return { name: spans[i].parentNode.firstChild.textContent.trim(), index: +m[1], count: +m[2] };
    }
    return { name: null, index: 1, count: 1 };
  }

  // The Sandwich table: rows of total, self (each "1.41ms (0.06%)" with a bar of that width) and name.
  function sandwichRows() {
    var rows = Array.prototype.filter.call(document.querySelectorAll("tr"), function (tr) {
      return tr.cells.length === 3 && tr.cells[0].querySelector("div[style*=width]");
    });
    return rows.map(function (tr) {
      function weight(cell) {
        return { text: cell.firstChild.textContent, percent: parseFloat(cell.querySelector("div[style*=width]").style.width) };
      }
      return { name: tr.cells[2].textContent, total: weight(tr.cells[0]), self: weight(tr.cells[1]) };
    });
  }

  function press(key) { window.dispatchEvent(new KeyboardEvent("keypress", { key: key })); }

  function finish() {
    result.title = document.title;
    if (/Something went wrong/.test(document.body.textContent)) result.errors.push("speedscope: Something went wrong");
    var json = JSON.stringify(result);
    document.body.setAttribute("data-gvlscope-probe", btoa(unescape(encodeURIComponent(json))));
  }

  var phase = "read";
  function poll() {
    waited += POLL_MS;
    if (waited > GIVE_UP_MS) {
      result.errors.push("probe: gave up after " + GIVE_UP_MS + " ms in phase " + phase);
      return finish();
    }
    if (result.errors.length > 0) return finish();
    var rows = sandwichRows();
    if (rows.length === 0) return setTimeout(poll, POLL_MS);
    var shown = toolbarProfile(); // drawn together with the rows
    var next = result.profiles.length + 1;
    if (phase === "read") {
      if (shown.index !== next) return setTimeout(poll, POLL_MS);
      result.profiles.push({ name: shown.name, rows: rows });
      if (next < shown.count) press("n"); else phase = "show";
      return setTimeout(poll, POLL_MS);
    }
    var wanted = (config.show || 0) + 1;
    if (shown.index > wanted) { press("p"); return setTimeout(poll, POLL_MS); }
    press("1"); // Time Order
    finish();
  }

  speedscope.loadFileFromBase64(config.name, config.data);
  setTimeout(poll, POLL_MS);
})(GVLSCOPE_PROBE);

// EvalStop console: live updates by polling server-rendered HTML, and the "Stop now" confirmation.
// Written for this project (no framework); works with script-src 'self'.
(function () {
  "use strict";

  // Fetch url() every `every` ms and hand the HTML to apply() (a 204 means nothing changed); a 401
  // (the session ended, in this tab or another) stops the polling and says so, with a link to
  // sign in again.
  function poll(url, every, note, apply) {
    function say(html) { if (note) { note.innerHTML = html; } }
    function tick() {
      fetch(url(), { credentials: "same-origin", headers: { "Accept": "text/html" }, redirect: "manual" })
        .then(function (r) {
          if (r.status === 401 || r.type === "opaqueredirect") { throw new Error("signed out"); }
          if (!r.ok) { throw new Error("the server answered " + r.status); }
          return r.status === 204 ? null : r.text();
        })
        .then(function (html) {
          if (html !== null) { apply(html); }
          say("Updated " + new Date().toLocaleTimeString() + "; every " + every / 1000 + " s.");
          setTimeout(tick, every);
        })
        .catch(function (e) {
          if (e.message === "signed out") {
            say('You are signed out, so this page no longer updates. <a href="/ui/login">Sign in again</a>.');
            return;
          }
          say("Live updates paused (" + e.message.replace(/</g, "&lt;") + "); retrying.");
          setTimeout(tick, every);
        });
    }
    setTimeout(tick, every);
  }

  function parse(html, wrapper) {
    var t = document.createElement("template");
    t.innerHTML = wrapper[0] + html + wrapper[1];
    return t.content;
  }

  // Keep whatever has the keyboard focus focused: rows are matched by job id and only cells
  // that changed are rewritten, rows are moved only when the order changed.
  function updateRows(body, html) {
    var focused = document.activeElement;
    var fresh = parse(html, ["<table><tbody>", "</tbody></table>"]).querySelector("tbody");
    var old = {};
    Array.prototype.forEach.call(body.rows, function (row) {
      var id = row.getAttribute("data-job-id");
      if (id) { old[id] = row; }
    });
    var wanted = Array.prototype.map.call(fresh.rows, function (row) {
      var id = row.getAttribute("data-job-id");
      var kept = id && old[id];
      if (!kept) { return row; }
      delete old[id];
      kept.className = row.className;
      Array.prototype.forEach.call(row.cells, function (cell, i) {
        var have = kept.cells[i];
        if (!have) { kept.appendChild(cell.cloneNode(true)); }
        else if (have.innerHTML !== cell.innerHTML) { have.innerHTML = cell.innerHTML; }
      });
      return kept;
    });
    Object.keys(old).forEach(function (id) { old[id].remove(); });
    Array.prototype.slice.call(body.rows).forEach(function (row) {
      if (!row.getAttribute("data-job-id")) { row.remove(); }  // "no jobs" and "showing" notes
    });
    wanted.forEach(function (row, i) {
      if (body.rows[i] !== row) { body.insertBefore(row, body.rows[i] || null); }
    });
    if (focused && focused !== document.activeElement && document.contains(focused)) {
      focused.focus({ preventScroll: true });
    }
  }

  // The job page: replace each data-live part that changed; enable the buttons and show the forms
  // that the new state allows.
  var liveToken = "";
  function updateJob(html) {
    var fresh = parse(html, ["", ""]);
    var live = fresh.getElementById("live");
    if (!live) { return; }
    liveToken = live.getAttribute("data-token") || "";
    Array.prototype.forEach.call(fresh.querySelectorAll("[data-live]"), function (part) {
      var name = part.getAttribute("data-live");
      document.querySelectorAll('[data-live="' + name + '"]').forEach(function (mine) {
        if (mine.innerHTML !== part.innerHTML) { mine.innerHTML = part.innerHTML; }
      });
    });
    var state = live.getAttribute("data-state"), override = live.getAttribute("data-override");
    document.querySelectorAll("button[data-when]").forEach(function (b) {
      var when = b.getAttribute("data-when");
      b.disabled = when === "never_stop" ? override !== "never_stop" : state !== when;
    });
    document.querySelectorAll("form[data-when]").forEach(function (f) {
      f.hidden = f.getAttribute("data-when") !== state;
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var body = document.getElementById("job-rows");
    var note = document.getElementById("updated");
    if (body && body.getAttribute("data-poll")) {
      poll(function () { return body.getAttribute("data-poll"); },
           parseInt(body.getAttribute("data-interval-ms"), 10) || 3000,
           note, function (html) { updateRows(body, html); });
    }
    var job = document.getElementById("live-note");
    if (job && job.getAttribute("data-poll")) {
      poll(function () { return job.getAttribute("data-poll") + "&since=" + encodeURIComponent(liveToken); },
           parseInt(job.getAttribute("data-interval-ms"), 10) || 3000, job, updateJob);
    }
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (e) {
        if (!window.confirm(form.getAttribute("data-confirm"))) { e.preventDefault(); }
      });
    });
  });
})();

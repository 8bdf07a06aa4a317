// EvalStop console: live updates of the jobs table by polling its server-rendered rows.
// Written for this project (no framework); works with script-src 'self'.
(function () {
  "use strict";
  function poll(body) {
    var url = body.getAttribute("data-poll");
    var every = parseInt(body.getAttribute("data-interval-ms"), 10) || 3000;
    var note = document.getElementById("updated");
    function tick() {
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) {
          if (r.redirected || !r.ok) { throw new Error("status " + r.status); }
          return r.text();
        })
        .then(function (html) {
          body.innerHTML = html;
          if (note) { note.textContent = "Updated " + new Date().toLocaleTimeString() + "; every " + every / 1000 + " s."; }
        })
        .catch(function (e) { if (note) { note.textContent = "Live updates paused: " + e.message; } })
        .finally(function () { setTimeout(tick, every); });
    }
    setTimeout(tick, every);
  }
  document.addEventListener("DOMContentLoaded", function () {
    var body = document.getElementById("job-rows");
    if (body && body.getAttribute("data-poll")) { poll(body); }
  });
})();

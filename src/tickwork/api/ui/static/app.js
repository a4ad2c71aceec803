// tickwork dashboard: the viewer's local times, live regions, DLQ selection.
// No framework and no inline script: the Content-Security-Policy allows this file only.
"use strict";

(function () {
  var body = document.body;
  var pollMs = parseInt(body.getAttribute("data-poll-ms"), 10) || 5000;
  var zoneName = (Intl.DateTimeFormat().resolvedOptions().timeZone) || "local time";
  var parts = new Intl.DateTimeFormat("en-CA", {
    year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit",
    hourCycle: "h23", timeZoneName: "short"
  });
  var utcNames = { "UTC": true, "Etc/UTC": true, "Etc/GMT": true, "GMT": true, "Etc/Universal": true };

  // "2026-03-29 03:00:00 CEST", as the server writes instants.
  function local(instant, withSeconds) {
    var p = {};
    parts.formatToParts(instant).forEach(function (part) { p[part.type] = part.value; });
    var time = p.hour + ":" + p.minute + (withSeconds ? ":" + p.second : "");
    return p.year + "-" + p.month + "-" + p.day + " " + time + " " + (p.timeZoneName || "");
  }

  function sameZone(shown) {
    if (!shown) { return false; }
    return shown === zoneName || (utcNames[shown] && utcNames[zoneName]);
  }

  // Every instant also in the viewer's zone, unless the page already shows that zone.
  function localTimes(root) {
    root.querySelectorAll(".viewer[data-instant]").forEach(function (span) {
      var instant = new Date(span.getAttribute("data-instant"));
      if (isNaN(instant.getTime())) { return; }
      var placeholderOnly = span.hasAttribute("data-always");
      if (sameZone(span.getAttribute("data-zone")) && !placeholderOnly) { return; }
      span.textContent = local(instant, span.getAttribute("data-seconds") !== "no");
      span.title = "your time (" + zoneName + ")";
      span.hidden = false;
      var placeholder = span.parentNode.querySelector(".no-js");
      if (placeholder) { placeholder.hidden = true; }
    });
    document.querySelectorAll(".viewer-zone").forEach(function (el) { el.textContent = zoneName; });
  }

  function focusKey(el) {
    if (!el || el === document.body) { return null; }
    if (el.id) { return "#" + el.id; }
    return [el.tagName, el.getAttribute("href") || "", el.name || "", el.value || ""].join("|");
  }

  function refocus(root, key) {
    if (!key) { return; }
    var found = null;
    if (key.charAt(0) === "#") {
      found = document.getElementById(key.slice(1));
    } else {
      root.querySelectorAll("a, button, input, select, summary").forEach(function (el) {
        if (!found && focusKey(el) === key) { found = el; }
      });
    }
    if (found) { found.focus({ preventScroll: true }); }
  }

  var live = document.querySelector("[data-live]");
  var status = document.querySelector(".live-status");
  var busy = false;
  var failures = 0;
  // Once a form is sent (sign out, an action) the page is on its way out: a refresh
  // answered after that must not reload or repaint it over the form's own answer.
  var leaving = false;
  document.addEventListener("submit", function (event) {
    if (!event.defaultPrevented) { leaving = true; }
  });
  window.addEventListener("pagehide", function () { leaving = true; });
  window.addEventListener("pageshow", function () { leaving = false; });

  function say(text) { if (status) { status.textContent = text; } }

  function refresh() {
    if (busy || leaving || document.hidden || !live) { return; }
    busy = true;
    fetch(window.location.href, {
      headers: { "X-Tickwork-Live": "1" },
      credentials: "same-origin",
      cache: "no-store",
      redirect: "manual"
    }).then(function (response) {
      if (leaving) { return null; }
      if (response.status === 401 || response.type === "opaqueredirect") {
        window.location.reload();  // the session ended: the page asks to sign in
        return null;
      }
      return response.text().then(function (text) {
        if (!response.ok) { throw new Error(text || ("HTTP " + response.status)); }
        return text;
      });
    }).then(function (html) {
      if (html === null || html === undefined || leaving) { return; }
      var checked = {};
      live.querySelectorAll("input[type=checkbox]:checked").forEach(function (box) {
        checked[box.name + "=" + box.value] = true;
      });
      var openDetails = {};
      live.querySelectorAll("details[open] > summary").forEach(function (s) { openDetails[s.textContent] = true; });
      var key = live.contains(document.activeElement) ? focusKey(document.activeElement) : null;
      live.innerHTML = html;
      live.querySelectorAll("input[type=checkbox]").forEach(function (box) {
        if (checked[box.name + "=" + box.value]) { box.checked = true; }
      });
      live.querySelectorAll("details > summary").forEach(function (s) {
        if (openDetails[s.textContent]) { s.parentNode.open = true; }
      });
      localTimes(live);
      refocus(live, key);
      failures = 0;
      say("updated " + new Date().toLocaleTimeString());
    }).catch(function (error) {
      failures += 1;
      say("live updates paused: " + error.message);
    }).then(function () {
      busy = false;
      live.setAttribute("data-refreshes", String((parseInt(live.getAttribute("data-refreshes"), 10) || 0) + 1));
    });
  }

  // DLQ: "all on this page" selects every row's box.
  document.addEventListener("change", function (event) {
    var all = event.target.closest ? event.target.closest(".select-all") : null;
    if (!all) { return; }
    var name = all.getAttribute("data-controls");
    document.querySelectorAll("input." + name).forEach(function (box) { box.checked = all.checked; });
  });

  localTimes(document);
  if (live) {
    window.setInterval(refresh, pollMs);
    document.addEventListener("visibilitychange", function () { if (!document.hidden) { refresh(); } });
  }
}());

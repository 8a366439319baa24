// The console's only script; every page works without it (a <noscript> refresh stands in
// for the updates, and times stay in UTC).
//
// 1. Live pages (data-refresh on <body>) re-read themselves every few seconds and replace
//    each region marked data-live, never a form being filled in. The request says it is
//    the page's own (X-Herald-Refresh), so it does not keep the session alive; when the
//    session has ended the page goes to the sign-in page. The page says when it was last
//    updated, can be paused (remembered), and tells screen readers what changed.
// 2. Times: every <time> can be shown in UTC (the default) or the browser's zone, by a
//    switch that is remembered; the date filters read and write the same zone.
(function () {
  "use strict";
  var store = window.localStorage;
  var ZONE = "herald.times", PAUSED = "herald.refresh.paused";

  function pad(n, width) { return String(n).padStart(width || 2, "0"); }

  function zoneName(date) {
    try {
      var parts = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(date);
      for (var i = 0; i < parts.length; i++) if (parts[i].type === "timeZoneName") return parts[i].value;
    } catch (e) { /* an old browser: the offset below */ }
    var offset = -date.getTimezoneOffset();
    return "UTC" + (offset >= 0 ? "+" : "-") + pad(Math.floor(Math.abs(offset) / 60)) + ":" + pad(Math.abs(offset) % 60);
  }

  function localText(date, millis) {
    return date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) + " " +
      pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds()) +
      (millis ? "." + pad(date.getMilliseconds(), 3) : "") + " " + zoneName(date);
  }

  function local() { return store.getItem(ZONE) === "local"; }

  function showTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      if (!el.dataset.utc) el.dataset.utc = el.textContent;
      var date = new Date(el.getAttribute("datetime"));
      if (isNaN(date)) return;
      el.textContent = local() ? localText(date, /\.\d{3} UTC$/.test(el.dataset.utc)) : el.dataset.utc;
    });
  }

  // Date inputs hold UTC on the server's side; in local mode they are shown and typed in
  // the browser's zone and turned back into UTC when the form is sent.
  var TYPED = /^(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2})(?::(\d{2}))?)?$/;
  function parts(text) {
    var m = TYPED.exec(text.trim());
    return m ? [+m[1], +m[2] - 1, +m[3], +(m[4] || 0), +(m[5] || 0), +(m[6] || 0)] : null;
  }
  function utcText(date) {
    return date.getUTCFullYear() + "-" + pad(date.getUTCMonth() + 1) + "-" + pad(date.getUTCDate()) +
      " " + pad(date.getUTCHours()) + ":" + pad(date.getUTCMinutes()) + ":" + pad(date.getUTCSeconds());
  }
  function localInputText(date) {
    return date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) +
      " " + pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds());
  }
  function showInputs() {
    document.querySelectorAll("input[data-zone-input]").forEach(function (input) {
      if (!input.dataset.utc) input.dataset.utc = input.value;
      var p = parts(input.dataset.utc || "");
      if (!p) return;
      input.value = local()
        ? localInputText(new Date(Date.UTC(p[0], p[1], p[2], p[3], p[4], p[5])))
        : input.dataset.utc;
    });
    document.querySelectorAll("[data-zone-label]").forEach(function (label) {
      label.textContent = local() ? "local time, " + zoneName(new Date()) : "UTC";
    });
  }
  document.addEventListener("submit", function (event) {
    if (!local()) return;
    event.target.querySelectorAll("input[data-zone-input]").forEach(function (input) {
      var p = parts(input.value);
      if (p) input.value = utcText(new Date(p[0], p[1], p[2], p[3], p[4], p[5]));
    });
  }, true);

  // What the server sent for each live region, before times were shown in another zone:
  // a refresh compares with this, so a change of zone is not a change of the page.
  var served = {};
  document.querySelectorAll("[data-live]").forEach(function (region) {
    served[region.id] = region.innerHTML;
  });

  var zoneSwitch = document.getElementById("zone-switch");
  function showZone() {
    showTimes(document);
    showInputs();
    if (zoneSwitch) {
      zoneSwitch.textContent = local() ? "Times: local (show UTC)" : "Times: UTC (show local)";
      zoneSwitch.setAttribute("aria-pressed", local() ? "true" : "false");
    }
  }
  if (zoneSwitch) {
    zoneSwitch.hidden = false;
    zoneSwitch.addEventListener("click", function () {
      store.setItem(ZONE, local() ? "utc" : "local");
      showZone();
    });
  }
  showZone();

  // --- live pages ----------------------------------------------------------------------
  var seconds = Number(document.body.dataset.refresh || 0);
  if (!seconds) return;
  var updated = document.getElementById("updated");
  var announce = document.getElementById("announce");
  var pause = document.getElementById("pause");
  var timer = null;

  function beingFilled(region) {
    if (region.contains(document.activeElement) && document.activeElement !== document.body) return true;
    var fields = region.querySelectorAll("input:not([type=hidden]), select, textarea");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.tagName === "SELECT") {
        for (var j = 0; j < f.options.length; j++) if (f.options[j].selected !== f.options[j].defaultSelected) return true;
      } else if (f.value !== f.defaultValue) return true;
    }
    return false;
  }

  function summary(doc) {
    var first = doc.querySelector("[data-announce]");
    return first ? first.textContent.trim() : "";
  }

  function refresh() {
    fetch(location.href, {
      credentials: "same-origin",
      headers: { Accept: "text/html", "X-Herald-Refresh": "1" }
    })
      .then(function (r) {
        if (r.redirected && r.url.indexOf("/console/sign-in") !== -1) {
          location.assign("/console/sign-in");
          return null;
        }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (!html) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        var changed = false;
        var held = false;
        document.querySelectorAll("[data-live]").forEach(function (region) {
          var fresh = doc.getElementById(region.id);
          if (fresh && fresh.innerHTML !== served[region.id]) {
            // Forms (the actions) follow the page too, unless one is being filled in:
            // then they wait for the next tick, and the stamp does not claim them.
            if (region.hasAttribute("data-live-form") && beingFilled(region)) { held = true; return; }
            served[region.id] = fresh.innerHTML;
            region.innerHTML = fresh.innerHTML;
            changed = true;
          }
        });
        // The stamp is the time of the answer every region now shows (a settled page
        // has no live stamp of its own: its render time says it).
        var stamp = doc.getElementById("updated");
        var rendered = doc.getElementById("rendered");
        if (updated && !held) {
          if (stamp) updated.innerHTML = stamp.innerHTML;
          else if (rendered) updated.innerHTML = "Last updated " + rendered.innerHTML + ".";
        }
        showTimes(document);
        if (changed && announce) announce.textContent = "Updated. " + summary(document);
        if (!doc.body.dataset.refresh && !held) {
          stop();
          if (updated) updated.appendChild(document.createTextNode(" No further updates: it has settled."));
          if (pause) pause.hidden = true;
        }
      })
      .catch(function () { /* the next tick tries again */ });
  }

  function start() { if (!timer) timer = setInterval(refresh, seconds * 1000); }
  function stop() { if (timer) { clearInterval(timer); timer = null; } }
  function showPause() {
    var paused = store.getItem(PAUSED) === "1";
    if (pause) {
      pause.textContent = paused ? "Resume updates" : "Pause updates";
      pause.setAttribute("aria-pressed", paused ? "true" : "false");
    }
    if (paused) stop(); else start();
  }
  if (pause) {
    pause.hidden = false;
    pause.addEventListener("click", function () {
      store.setItem(PAUSED, store.getItem(PAUSED) === "1" ? "0" : "1");
      showPause();
      if (store.getItem(PAUSED) !== "1") refresh();
    });
  }
  showPause();
})();

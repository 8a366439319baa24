// Refreshes the live part of a page (an open intent) without reloading it; the page
// works the same without this file (a <noscript> refresh stands in).
(function () {
  var seconds = Number(document.body.dataset.refresh || 0);
  var live = document.getElementById("live");
  if (!seconds || !live) return;
  var timer = setInterval(function () {
    fetch(location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("live");
        if (fresh) live.innerHTML = fresh.innerHTML;
        if (!doc.body.dataset.refresh) clearInterval(timer);
      })
      .catch(function () {});
  }, seconds * 1000);
})();

// keybrake console: local times, copy buttons and live updates over
// Server-Sent Events. No inline script anywhere (the Content-Security-Policy
// forbids it); this file is the console's only script.
"use strict";

(function () {
  var fmt = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });

  // localize shows every <time> in the viewer's zone; the title keeps UTC.
  function localize(root) {
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      if (t.dataset.local) return;
      var d = new Date(t.getAttribute("datetime"));
      if (!isNaN(d)) {
        t.textContent = fmt.format(d);
        t.dataset.local = "1";
      }
    });
  }

  function copy(button) {
    var el = document.getElementById(button.dataset.copy);
    if (!el) return;
    var text = el.value !== undefined ? el.value : el.textContent;
    var done = function () {
      var old = button.textContent;
      button.textContent = "Copied";
      button.classList.add("copied");
      setTimeout(function () { button.textContent = old; button.classList.remove("copied"); }, 2000);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { fallback(el, done); });
    } else {
      fallback(el, done);
    }
  }

  // fallback copies by selecting the text, where the Clipboard API is not
  // available (plain HTTP on a non-loopback address).
  function fallback(el, done) {
    if (el.select) {
      el.select();
    } else {
      var range = document.createRange();
      range.selectNodeContents(el);
      var sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
    }
    try { if (document.execCommand("copy")) done(); } catch (e) { /* the text stays selected for Ctrl+C */ }
  }

  function live(url) {
    var status = document.getElementById("live");
    var feed = document.querySelector("#feed tbody");
    var es = new EventSource(url);
    var set = function (text, cls) { if (status) { status.textContent = text; status.className = "live " + cls; } };
    es.onopen = function () { set("live", "on"); };
    es.onerror = function () { set("reconnecting…", "off"); };
    es.addEventListener("row", function (ev) {
      if (!feed) return;
      var tmp = document.createElement("tbody");
      tmp.innerHTML = ev.data; // rendered and escaped by the server's templates
      var row = tmp.firstElementChild;
      if (!row || feed.querySelector('tr[data-id="' + row.dataset.id + '"]')) return;
      row.classList.add("new");
      feed.insertBefore(row, feed.firstChild);
      while (feed.children.length > 200) feed.removeChild(feed.lastChild);
      var empty = document.getElementById("feed-empty");
      if (empty) empty.remove();
      localize(row);
    });
    es.addEventListener("panel", function (ev) {
      var p = JSON.parse(ev.data);
      var el = document.getElementById(p.id);
      if (el) {
        el.innerHTML = p.html; // rendered and escaped by the server's templates
        localize(el);
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    localize(document);
    document.querySelectorAll("[data-copy]").forEach(function (b) {
      b.addEventListener("click", function () { copy(b); });
    });
    var url = document.body.dataset.stream;
    if (url && window.EventSource) live(url);
  });
})();

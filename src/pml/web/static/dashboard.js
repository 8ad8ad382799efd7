// PML dashboard: live regions, nothing else. An element with data-live="URL" is refreshed
// from that URL (a server-rendered fragment) every data-interval ms while the tab is
// visible; data-live-append="1" appends what the server returns instead of replacing
// (the audit follow), passing the newest id it has as after_id.
(function () {
  "use strict";
  function refresh(el) {
    var url = new URL(el.getAttribute("data-live"), window.location.href);
    if (url.origin !== window.location.origin) return Promise.resolve();
    var append = el.getAttribute("data-live-append") === "1";
    if (append) {
      var last = el.getAttribute("data-after-id");
      if (last) url.searchParams.set("after_id", last);
    }
    return fetch(url.toString(), {
      credentials: "same-origin",
      headers: { "X-PML-Fragment": "1" },
      cache: "no-store",
    }).then(function (response) {
      if (response.status === 401) { el.setAttribute("data-live-stopped", "1"); return null; }
      if (!response.ok) return null;
      var next = response.headers.get("X-PML-After-Id");
      return response.text().then(function (html) {
        if (append) {
          if (html.trim()) el.insertAdjacentHTML("beforeend", html);
          if (next) el.setAttribute("data-after-id", next);
        } else if (el.__pmlLast !== html) {
          // compared with the last answer, not innerHTML: the browser rewrites markup, and
          // a needless swap would drop the keyboard focus and re-announce the region
          el.innerHTML = html;
          el.__pmlLast = html;
        }
      });
    }).catch(function () { /* offline for a moment: try again at the next tick */ });
  }
  function start(el) {
    el.__pmlLast = el.innerHTML;
    var interval = parseInt(el.getAttribute("data-interval") || "1500", 10);
    if (!(interval >= 500)) interval = 1500;
    var busy = false;
    window.setInterval(function () {
      if (busy || document.hidden || el.getAttribute("data-live-stopped")) return;
      if (el.getAttribute("data-live-paused") === "1") return;
      busy = true;
      refresh(el).then(function () { busy = false; }, function () { busy = false; });
    }, interval);
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-live]").forEach(start);
    document.querySelectorAll("[data-live-toggle]").forEach(function (box) {
      var target = document.getElementById(box.getAttribute("data-live-toggle"));
      if (!target) return;
      box.addEventListener("change", function () {
        target.setAttribute("data-live-paused", box.checked ? "0" : "1");
      });
    });
  });
})();

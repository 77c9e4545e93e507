// haul console: refreshes the page's content every few seconds. The page
// reads fully without this script; it only saves pressing reload. It
// waits while focus is inside the content (someone is using the keyboard
// there) or the tab is hidden, and it can be switched off (remembered for
// the tab). A notice after an action stays until the next page.
"use strict";
(function () {
  var EVERY_MS = 5000;
  var KEY = "haul-console-refresh";
  var on = true;
  try { on = sessionStorage.getItem(KEY) !== "off"; } catch (e) {}
  function busy() {
    var main = document.getElementById("main");
    var a = document.activeElement;
    return document.hidden || !on || (main && a && a !== main && main.contains(a));
  }
  function refresh() {
    if (busy()) return;
    fetch(location.pathname, { credentials: "same-origin", headers: { "accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (!text || busy()) return;
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.getElementById("main");
        var main = document.getElementById("main");
        if (fresh && main) {
          var notice = main.querySelector(".notice[role=status]");
          main.innerHTML = fresh.innerHTML;
          if (notice) main.insertBefore(notice, main.firstChild);
        }
        var foot = doc.querySelector("footer time");
        var old = document.querySelector("footer time");
        if (foot && old) old.replaceWith(foot);
      })
      .catch(function () {});
  }
  document.addEventListener("DOMContentLoaded", function () {
    var say = document.getElementById("refresh");
    if (say) {
      say.textContent = "";
      var b = document.createElement("button");
      b.type = "button";
      var show = function () {
        b.setAttribute("aria-pressed", on ? "true" : "false");
        b.textContent = "Auto-refresh every 5 s: " + (on ? "on" : "off");
      };
      show();
      b.addEventListener("click", function () {
        on = !on;
        try { sessionStorage.setItem(KEY, on ? "on" : "off"); } catch (e) {}
        show();
      });
      say.appendChild(b);
    }
    if (location.search) history.replaceState(null, "", location.pathname);
    setInterval(refresh, EVERY_MS);
  });
})();

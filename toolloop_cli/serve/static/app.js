// toolloop serve: the page's one script. It sends answers and controls through the JSON API
// (with the page's CSRF token) and keeps the live parts of the page up to date: the page is
// fetched again and the parts marked data-live are swapped in, unless a person is working in them.
(function () {
  "use strict";
  var csrfMeta = document.querySelector('meta[name="csrf-token"]');
  var csrf = csrfMeta ? csrfMeta.content : "";
  var stream = null;
  var refreshing = false;

  function post(url, body) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: {"Content-Type": "application/json", "Accept": "application/json", "X-CSRF-Token": csrf},
      body: body === undefined ? "" : body
    }).then(function (res) {
      return res.text().then(function (text) {
        var data = null;
        try { data = JSON.parse(text); } catch (e) { data = null; }
        return {status: res.status, data: data};
      });
    });
  }

  function say(form, kind, message) {
    var error = form.querySelector("p.error");
    var result = form.querySelector("p.result");
    if (error) { error.hidden = kind !== "error"; if (kind === "error") error.textContent = message; }
    if (result) { result.hidden = kind !== "result"; if (kind === "result") result.textContent = message; }
  }

  function busy(region) {
    var active = document.activeElement;
    if (active && active !== document.body && region.contains(active) &&
        (active.tagName === "TEXTAREA" || active.tagName === "INPUT")) return true;
    return !!region.querySelector("form[data-dirty], [data-keep], form[data-sending]");
  }

  function refresh() {
    var regions = document.querySelectorAll("[data-live]");
    if (!regions.length || refreshing) return Promise.resolve();
    refreshing = true;
    return fetch(location.pathname, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (res) { return res.ok ? res.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        Array.prototype.forEach.call(regions, function (region) {
          var fresh = doc.getElementById(region.id);
          if (!fresh || busy(region)) return;
          if (fresh.innerHTML !== region.innerHTML) region.innerHTML = fresh.innerHTML;
          Array.prototype.forEach.call(fresh.attributes, function (a) {
            if (a.name.indexOf("data-") === 0) region.setAttribute(a.name, a.value);
          });
        });
      })
      .catch(function () { /* the next look tries again */ })
      .then(function () { refreshing = false; follow(); });
  }

  function stop() {
    if (stream) { stream.close(); stream = null; }
  }

  // A running run's records arrive as Server-Sent Events; each one refreshes the timeline.
  function follow() {
    var run = document.getElementById("run");
    if (!run || stream || run.getAttribute("data-running") !== "1" || !window.EventSource) return;
    var timer = null;
    var soon = function () { clearTimeout(timer); timer = setTimeout(refresh, 150); };
    stream = new EventSource(run.getAttribute("data-follow"));
    ["receipt", "decision", "supervisor", "guardrail"].forEach(function (type) {
      stream.addEventListener(type, soon);
    });
    stream.addEventListener("summary", function () { stop(); clearTimeout(timer); refresh(); });
    stream.onerror = function () { stop(); setTimeout(refresh, 1000); };
  }

  function resumeForm(runId) {
    var form = document.createElement("form");
    form.className = "control";
    form.setAttribute("data-api", "/api/runs/" + encodeURIComponent(runId) + "/resume");
    form.setAttribute("data-kind", "resume");
    form.setAttribute("data-run", runId);
    var button = document.createElement("button");
    button.type = "submit";
    button.className = "primary";
    button.textContent = "Resume run";
    var link = document.createElement("a");
    link.href = "/runs/" + encodeURIComponent(runId);
    link.textContent = "Open the run";
    var error = document.createElement("p");
    error.className = "error"; error.setAttribute("role", "alert"); error.hidden = true;
    var result = document.createElement("p");
    result.className = "result"; result.setAttribute("role", "status"); result.hidden = true;
    form.appendChild(button); form.appendChild(link); form.appendChild(error); form.appendChild(result);
    return form;
  }

  function answerBody(form, decision) {
    var parts = ['"decision":' + JSON.stringify(decision)];
    var area = form.querySelector('textarea[name="args"]');
    if (area && decision === "approve" && area.value.trim() !== area.defaultValue.trim()) {
      try { JSON.parse(area.value); } catch (e) {
        throw new Error("The arguments are not JSON: " + e.message);
      }
      parts.push('"args":' + area.value.trim());  // sent as written: large numbers stay exact
    }
    var message = form.querySelector('input[name="message"]');
    if (message && message.value.trim()) parts.push('"message":' + JSON.stringify(message.value.trim()));
    return "{" + parts.join(",") + "}";
  }

  document.addEventListener("input", function (ev) {
    var form = ev.target.closest ? ev.target.closest("form[data-api]") : null;
    if (!form) return;
    var dirty = Array.prototype.some.call(form.querySelectorAll("textarea, input[type=text]"), function (el) {
      return el.value !== el.defaultValue;
    });
    if (dirty) form.setAttribute("data-dirty", "1"); else form.removeAttribute("data-dirty");
    var area = form.querySelector('textarea[name="args"]');
    var approve = form.querySelector('button[value="approve"]');
    if (area && approve) {
      approve.textContent = area.value.trim() !== area.defaultValue.trim() ? "Approve edited" : "Approve";
    }
  });

  document.addEventListener("submit", function (ev) {
    var form = ev.target.closest ? ev.target.closest("form[data-api]") : null;
    if (!form) return;
    ev.preventDefault();
    if (form.hasAttribute("data-sending")) return;
    var kind = form.getAttribute("data-kind") || "answer";
    var decision = ev.submitter && ev.submitter.value ? ev.submitter.value : "approve";
    var body;
    try {
      if (kind === "answer") {
        body = answerBody(form, decision);
      } else if (kind === "resume") {
        body = undefined;
      } else {
        var message = form.querySelector('input[name="message"]');
        body = JSON.stringify(message && message.value.trim() ? {message: message.value.trim()} : {});
      }
    } catch (e) {
      say(form, "error", e.message);
      var area = form.querySelector("textarea");
      if (area) area.focus();
      return;
    }
    form.setAttribute("data-sending", "1");
    var buttons = form.querySelectorAll("button");
    Array.prototype.forEach.call(buttons, function (b) { b.disabled = true; });
    post(form.getAttribute("data-api"), body).then(function (answer) {
      var data = answer.data || {};
      if (answer.status >= 200 && answer.status < 300) {
        done(form, kind, data);
      } else {
        say(form, "error", data.error || ("The server answered " + answer.status));
        var focusable = form.querySelector("textarea") || form.querySelector("p.error");
        if (focusable && focusable.tagName === "TEXTAREA") focusable.focus();
      }
    }, function () {
      say(form, "error", "The server cannot be reached; try again.");
    }).then(function () {
      form.removeAttribute("data-sending");
      Array.prototype.forEach.call(buttons, function (b) { b.disabled = false; });
    });
  });

  function done(form, kind, data) {
    if (kind === "answer") {
      var card = form.closest("article") || form.parentNode;
      card.setAttribute("data-keep", "1");
      var what = data.state === "rejected" ? "Rejected" : (data.edited ? "Approved with edited arguments" : "Approved");
      var result = document.createElement("p");
      result.className = "result";
      result.setAttribute("role", "status");
      result.setAttribute("tabindex", "-1");
      result.textContent = what + " by " + data.by + ". Resume the run to go on." + (data.note ? " Note: " + data.note + "." : "");
      var next = resumeForm(data.run_id);
      form.replaceWith(result);
      result.after(next);
      result.focus();
    } else if (kind === "resume") {
      var runId = form.getAttribute("data-run") || data.run_id;
      var onRunPage = document.getElementById("run");
      if (onRunPage) {
        Array.prototype.forEach.call(document.querySelectorAll("[data-keep]"), function (el) {
          el.removeAttribute("data-keep");
        });
        say(form, "result", "Resumed: the run goes on in the background.");
        refresh();
      } else {
        location.href = "/runs/" + encodeURIComponent(runId);
      }
    } else {
      form.removeAttribute("data-dirty");
      say(form, "result", kind === "steer" ? "Steer recorded: the run reads it before its next turn."
                                           : "Abort recorded: a running run stops; a paused one on resume.");
      Array.prototype.forEach.call(form.querySelectorAll("input[type=text]"), function (el) {
        el.value = ""; el.defaultValue = "";
      });
    }
  }

  follow();
  setInterval(function () {
    if (!stream && !document.hidden) refresh();
  }, 3000);
})();

/* Ticket page: live status while the agent (or the approved refund) is running, and the Copy
   button of the customer reply draft. Plain JS, no libraries. */
(function () {
  "use strict";
  var POLL_MS = 1500;
  var MAX_POLLS = 800; // ~20 minutes, then a reload button is enough

  function cell(row, text, cls) {
    var td = document.createElement("td");
    if (cls) td.className = cls;
    td.textContent = text == null ? "" : String(text);
    row.appendChild(td);
    return td;
  }

  function appendEvent(tbody, e) {
    var tr = document.createElement("tr");
    tr.className = "ev-" + (e.status || "") + " new-row";
    cell(tr, e.seq, "num muted");
    cell(tr, (e.at || "").slice(11, 19), "mono");
    var span = document.createElement("span");
    span.className = "span-tag span-" + e.span;
    span.textContent = e.span;
    cell(tr, "").appendChild(span);
    cell(tr, e.status);
    cell(tr, e.decision);
    var tool = cell(tr, "");
    if (e.tool) { var code = document.createElement("code"); code.textContent = e.tool; tool.appendChild(code); }
    cell(tr, e.reason);
    cell(tr, e.duration_ms == null ? "" : e.duration_ms + " ms", "num");
    var tokens = e.input_tokens == null && e.output_tokens == null ? "" : (e.input_tokens || 0) + " / " + (e.output_tokens || 0);
    cell(tr, tokens, "num");
    tbody.appendChild(tr);
  }

  function setStatus(root, data) {
    var badge = root.querySelector("#ticket-status .badge");
    if (badge) {
      badge.className = "badge s-" + data.status + (data.active ? " live" : "");
      badge.textContent = data.status_label;
      badge.setAttribute("data-status", data.status);
    }
    var reason = root.querySelector("#stop-reason");
    if (reason) { reason.textContent = data.stop_reason_label ? "stop reason: " + data.stop_reason_label : ""; }
    var detail = root.querySelector("#stop-detail");
    if (detail) { detail.textContent = data.stop_detail || ""; detail.hidden = !data.stop_detail; }
    var waiting = root.querySelector("#provider-waiting");
    if (waiting) { waiting.textContent = data.provider_waiting || ""; waiting.hidden = !data.provider_waiting; }
  }

  function startPolling(root) {
    var url = root.getAttribute("data-poll-url");
    var status = root.getAttribute("data-status");
    var lastSeq = parseInt(root.getAttribute("data-last-seq") || "0", 10);
    var tbody = document.getElementById("trace-rows");
    var count = document.getElementById("trace-count");
    var polls = 0;

    function tick() {
      polls += 1;
      fetch(url + "?since=" + lastSeq, { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
        .then(function (data) {
          (data.events || []).forEach(function (e) {
            if (e.seq > lastSeq) { appendEvent(tbody, e); lastSeq = e.seq; }
          });
          if (count) count.textContent = String(tbody.rows.length);
          setStatus(root, data);
          if (!data.active) {
            // A stop state: render the draft, approval and ledger server-side.
            if (data.status !== status) window.location.reload();
            return;
          }
          status = data.status;
          if (polls < MAX_POLLS) window.setTimeout(tick, POLL_MS);
        })
        .catch(function () { if (polls < MAX_POLLS) window.setTimeout(tick, POLL_MS * 2); });
    }
    window.setTimeout(tick, POLL_MS);
  }

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
    return new Promise(function (resolve, reject) {
      var area = document.createElement("textarea");
      area.value = text;
      area.style.position = "fixed";
      area.style.opacity = "0";
      document.body.appendChild(area);
      area.select();
      try { document.execCommand("copy") ? resolve() : reject(new Error("copy refused")); } catch (err) { reject(err); }
      document.body.removeChild(area);
    });
  }

  document.querySelectorAll("[data-copy-target]").forEach(function (button) {
    button.addEventListener("click", function () {
      var target = document.querySelector(button.getAttribute("data-copy-target"));
      if (!target) return;
      var label = button.textContent;
      copyText(target.textContent).then(
        function () { button.textContent = "Copied ✓"; },
        function () { button.textContent = "Press Ctrl+C"; }
      );
      window.setTimeout(function () { button.textContent = label; }, 2000);
    });
  });

  var root = document.getElementById("ticket");
  if (root && root.getAttribute("data-active") === "true") startPolling(root);
})();

/* New-ticket form: when the customer field changes, "Refund to" offers that customer's own
   payment methods (GET tickets/new/methods.json, the same picker the page renders). Without
   this script, "Show the customer's payment methods" posts the form to do the same. Plain JS. */
(function () {
  "use strict";
  var form = document.getElementById("ticket-new-form");
  if (!form || !window.fetch || !window.URLSearchParams) return;
  var customer = form.querySelector("input[name=customer]");
  var picker = form.querySelector("select[name=refund_to]");
  var button = document.getElementById("show-methods");
  var note = document.getElementById("refund-to-note");
  if (!customer || !picker) return;
  if (button) button.hidden = true;
  var original = picker.options[0] ? picker.options[0].textContent : "";
  var asked = 0; // only the answer for the latest customer typed fills the picker

  function fill(choices) {
    var keep = picker.value;
    picker.textContent = "";
    choices.forEach(function (choice) {
      var option = document.createElement("option");
      option.value = choice.value;
      option.textContent = choice.label; // shop data: text, never markup
      picker.appendChild(option);
    });
    picker.value = keep;
    if (picker.value !== keep) picker.value = "";
  }

  function load() {
    var id = customer.value.trim();
    var mine = ++asked;
    if (!id) {
      fill([{ value: "", label: original }]);
      if (note) note.textContent = "";
      return;
    }
    var url = form.getAttribute("data-methods-url") + "?" + new URLSearchParams({ customer: id });
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.json(); })
      .then(function (body) {
        if (mine !== asked) return;
        fill(body.choices && body.choices.length ? body.choices : [{ value: "", label: original }]);
        if (note) note.textContent = body.note || body.detail || "";
      })
      .catch(function () {
        if (mine === asked && button) button.hidden = false; // the form's own way still works
      });
  }

  customer.addEventListener("change", load);
  // Back on the page with a customer typed (a refused post) and no methods listed yet.
  if (customer.value.trim() && picker.options.length <= 1) load();
})();

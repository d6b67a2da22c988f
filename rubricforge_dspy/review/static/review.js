// Keyboard shortcuts of the review page: j/k next/previous item, p pass, f fail, s skip, u undo.
// No inline script anywhere (the Content-Security-Policy allows scripts from this server only).
(function () {
  "use strict";
  function typing(target) {
    var tag = target && target.tagName ? target.tagName.toLowerCase() : "";
    return tag === "input" || tag === "textarea" || tag === "select" || (target && target.isContentEditable);
  }
  function follow(id) {
    var link = document.getElementById(id);
    if (link) { window.location.assign(link.getAttribute("href")); return true; }
    return false;
  }
  function submit(formId, buttonId) {
    var form = document.getElementById(formId);
    if (!form) { return false; }
    var button = buttonId ? document.getElementById(buttonId) : null;
    if (button) { form.requestSubmit(button); } else { form.requestSubmit(); }
    return true;
  }
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    if (typing(event.target)) {
      if (event.key === "Escape") { event.target.blur(); }
      return;
    }
    var done = false;
    switch (event.key) {
      case "j": done = follow("next"); break;
      case "k": done = follow("prev"); break;
      case "p": done = submit("label-form", "btn-pass"); break;
      case "f": done = submit("label-form", "btn-fail"); break;
      case "s": done = submit("label-form", "btn-skip"); break;
      case "u": done = submit("undo-form", null); break;
      default: break;
    }
    if (done) { event.preventDefault(); }
  });
}());

// Small page behaviour shared by every page; no build step.
// htmx does not swap error answers other than 400/422 (see base.html), so say what happened.
document.addEventListener("htmx:responseError", function (event) {
  var xhr = event.detail.xhr;
  var reasons = {
    403: "Your role does not allow this action.",
    404: "Not found: it may have been removed, or you are no longer a member.",
    409: "This conflicts with the current state; reload the page.",
  };
  var text = reasons[xhr.status] || "The server could not complete this request (" + xhr.status + ").";
  var list = document.querySelector(".messages");
  if (!list) {
    list = document.createElement("ul");
    list.className = "messages";
    list.setAttribute("role", "status");
    document.querySelector("main").prepend(list);
  }
  var item = document.createElement("li");
  item.className = "message error";
  item.textContent = text;
  list.appendChild(item);
});
document.addEventListener("htmx:sendError", function () {
  var main = document.querySelector("main");
  var note = document.createElement("p");
  note.className = "message error";
  note.textContent = "The portal could not be reached; check your connection and try again.";
  main.prepend(note);
});

// Live pages: an element with sse-connect holds the page's one event stream; elements inside it
// marked data-live-poll re-fetch on "sse:job", and once on "sse:hello" (the server says hello
// once the stream is subscribed: a change made after the page was rendered and before that
// moment was announced to nobody, so the fragment catches up then). While the stream is not open (no pub/sub on this
// server, a dropped connection, a proxy that buffers) they are polled instead, every 5 s.
var LIVE_POLL_MS = 5000;
function liveRoot(element) {
  return element.closest ? element.closest("[sse-connect]") || element : element;
}
function startLivePolling(root) {
  if (root.livePoll) return;
  root.livePoll = setInterval(function () {
    root.querySelectorAll("[data-live-poll]").forEach(function (element) {
      htmx.trigger(element, "live:poll");
    });
  }, LIVE_POLL_MS);
}
function stopLivePolling(root) {
  clearInterval(root.livePoll);
  root.livePoll = null;
}
document.addEventListener("htmx:sseOpen", function (event) {
  stopLivePolling(liveRoot(event.target));
});
["htmx:sseError", "htmx:sseClose"].forEach(function (name) {
  document.addEventListener(name, function (event) {
    startLivePolling(liveRoot(event.target));
  });
});

// Every destructive action confirms: a form with data-confirm asks first (cancel a job, ...).
document.addEventListener("submit", function (event) {
  var form = event.target;
  if (form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
    event.preventDefault();
    event.stopImmediatePropagation();
  }
}, true);

// The submit form's kind switch: show only the fields that apply to the chosen kind (the CSS
// hides the others from form[data-kind]; the server also ignores them).
document.addEventListener("change", function (event) {
  var input = event.target;
  if (input.name === "kind" && input.form && input.form.dataset.kind !== undefined) {
    input.form.dataset.kind = input.value;
  }
});

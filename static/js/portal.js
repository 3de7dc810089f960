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

// trajforge UI: live updates by server-sent events, and scrolling to the selected message.
"use strict";

function watchRuns(table) {
  const params = new URLSearchParams(location.search);
  const firstPage = !params.get("page") || params.get("page") === "1";
  const newestFirst = (!params.get("sort") || params.get("sort") === "created") &&
    params.get("dir") !== "asc";
  const note = document.getElementById("live-note");
  const count = document.getElementById("run-count");
  const events = new EventSource("/api/events" + location.search);
  events.onopen = () => { if (note) note.textContent = "· live"; };
  events.onerror = () => { if (note) note.textContent = "· live updates paused (reconnecting)"; };
  events.addEventListener("run", (event) => {
    const data = JSON.parse(event.data);
    const holder = document.createElement("tbody");
    holder.innerHTML = data.html;
    const row = holder.firstElementChild;
    const old = table.querySelector(`tr[data-id="${CSS.escape(data.id)}"]`);
    if (old) {
      old.replaceWith(row);
    } else if (firstPage && newestFirst) {
      table.tBodies[0].prepend(row);
      if (count) {
        const total = Number(count.dataset.total) + 1;
        count.dataset.total = String(total);
        count.firstChild.textContent = `${total} runs (new runs arrive live) `;
      }
    }
  });
}

function watchActivity(block) {
  const status = document.getElementById("live-status");
  const events = new EventSource("/api/events");
  events.onopen = () => { status.textContent = "live: watching the store"; };
  events.onerror = () => { status.textContent = "live updates paused (reconnecting)"; };
  let pending = false;
  events.addEventListener("run", () => {
    if (pending) return;
    pending = true;
    setTimeout(async () => {
      pending = false;
      const response = await fetch("/live/activity");
      if (response.ok) document.getElementById("activity").outerHTML = await response.text();
    }, 300);
  });
}

function watchTraining(holder) {
  const status = document.getElementById("training-status");
  const query = new URLSearchParams({ after: holder.dataset.after });
  const only = new URLSearchParams(location.search).get("run");
  if (only) query.set("run", only);
  const events = new EventSource("/api/training/events?" + query);
  events.onopen = () => { status.textContent = "live: new iterations appear as the loop writes them"; };
  events.onerror = () => { status.textContent = "live updates paused (reconnecting)"; };
  events.addEventListener("iteration", (event) => {
    const data = JSON.parse(event.data);
    const box = document.createElement("div");
    box.innerHTML = data.html;
    const section = box.firstElementChild;
    const old = [...holder.querySelectorAll("section.training-run")]
      .find((s) => s.dataset.run === data.run);
    if (old) {
      old.replaceWith(section);
    } else {
      holder.prepend(section);
      const empty = document.getElementById("no-training");
      if (empty) empty.remove();
    }
  });
}

async function fillRisks(table) {
  const cells = [...table.querySelectorAll("[data-risk]")];
  if (!cells.length) return;
  const ids = cells.map((cell) => cell.dataset.risk).join(",");
  const response = await fetch("/api/risk?ids=" + encodeURIComponent(ids));
  if (!response.ok) return;
  const risks = await response.json();
  for (const cell of cells) {
    const risk = risks[cell.dataset.risk];
    cell.textContent = risk === null || risk === undefined ? "" : risk.toFixed(2);
    cell.classList.remove("dim");
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const runs = document.getElementById("runs");
  if (runs) {
    watchRuns(runs);
    fillRisks(runs);
  }
  const trainingRuns = document.getElementById("training");
  if (trainingRuns) watchTraining(trainingRuns);
  const activity = document.getElementById("activity");
  if (activity) watchActivity(activity);
  const risk = document.getElementById("risk");
  if (risk && risk.dataset.src) {
    fetch(risk.dataset.src).then((r) => r.text()).then((html) => {
      risk.innerHTML = html;
      const stop = risk.querySelector("[data-stop-message]");
      if (stop) {
        const target = document.getElementById("m-" + stop.dataset.stopMessage);
        if (target) target.querySelector("header").insertAdjacentHTML("afterend", stop.dataset.note);
      }
    });
  }
  const selected = document.querySelector(".msg.selected");
  if (selected) selected.scrollIntoView({ block: "center" });
});

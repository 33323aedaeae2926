// Jobs: start a retrain (method, teachers, recipe, parameters), follow every job's progress
// (phase, step, loss, ETA) without reloading, cancel one. Nothing shows before the admin token.
import {
  api, busy, confirmAction, el, fail, fmt, keyReady, onKeysChanged, redraw, say,
} from "./common.js";

const ACTIVE = new Set(["queued", "started", "requeued", "scheduled", "deferred"]);
// Phases after the last training step: training is complete.
const TRAINED = new Set(["evaluating", "bundling", "diagnosing", "promoting", "done"]);
const content = document.getElementById("admin-content");
const notice = document.getElementById("key-notice");
const tbody = document.querySelector("#jobs-table tbody");
const status = document.getElementById("retrain-status");
let timer = null;

function percent(job) {
  if (job.status === "finished" || TRAINED.has(job.progress.phase)) return 100;
  return typeof job.progress.percent === "number" ? job.progress.percent : 0;
}

function duration(seconds) {
  if (typeof seconds !== "number") return "—";
  const whole = Math.round(seconds);
  return whole < 60 ? `${whole} s` : `${Math.floor(whole / 60)} min ${whole % 60} s`;
}

function progressCell(job) {
  const value = percent(job);
  const progress = job.progress;
  const steps = typeof progress.step === "number" ? `, step ${progress.step} of ${progress.total}` : "";
  const label = `${progress.phase ?? job.status}${steps}`;
  return el("td", { class: "progress-cell", "data-label": "progress" },
    el("progress", { max: "100", value: String(value), "aria-label": `Progress of job ${job.id}` }),
    el("span", { class: "percent" }, `${Math.round(value)} %`),
    el("div", { class: "phase muted" }, label));
}

function resultCell(job) {
  if (job.error) return el("td", { class: "error", "data-label": "error" }, job.error);
  if (!job.result) return el("td", { class: "muted", "data-label": "result" }, "—");
  return el("td", { "data-label": "result" }, el("code", {}, job.result.version), el("div", { class: "muted" },
    job.result.promoted ? "promoted" : "not promoted"));
}

async function cancel(id) {
  if (!(await confirmAction(`Cancel job ${id}? A running job is stopped.`, "Cancel job"))) return;
  try {
    const result = await api(`admin/jobs/${encodeURIComponent(id)}`, { method: "DELETE", auth: "admin" });
    say(status, `Job ${result.id}: ${result.status}.`);
    await refresh();
  } catch (error) {
    fail(status, error);
  }
}

function jobRow(job) {
  return el("tr", { "data-job": job.id, "data-status": job.status },
    el("th", { scope: "row" }, el("code", {}, job.id.slice(0, 8)),
      el("div", { class: "muted" }, `${job.method}, ${job.recipe}${job.force ? ", forced" : ""}`)),
    el("td", { class: "status", "data-label": "status" }, job.status),
    progressCell(job),
    el("td", { class: "loss", "data-label": "loss" }, fmt(job.progress.loss, 4)),
    el("td", { class: "eta", "data-label": "ETA" }, duration(job.progress.eta_s)),
    resultCell(job),
    el("td", {}, ACTIVE.has(job.status) ? el("button", {
      type: "button", class: "secondary danger", "aria-label": `Cancel job ${job.id}`,
      onclick: () => cancel(job.id),
    }, "Cancel") : ""));
}

async function refresh() {
  clearTimeout(timer);
  try {
    const { jobs } = await api("admin/jobs", { auth: "admin" });
    redraw(tbody, () => tbody.replaceChildren(...jobs.map(jobRow)));
    // Every second while a job may move, else every ten.
    timer = setTimeout(refresh, jobs.some((job) => ACTIVE.has(job.status)) ? 1000 : 10000);
  } catch (error) {
    fail(status, error);  // a 401 stops the refresh until the keys change
  }
}

function start() {
  clearTimeout(timer);
  tbody.replaceChildren();
  content.hidden = !keyReady("admin", notice);
  if (!content.hidden) refresh();
}

document.getElementById("retrain-form").addEventListener("submit", (event) => {
  event.preventDefault();
  busy(document.getElementById("retrain-submit"), async () => {
    try {
      const params = JSON.parse(document.getElementById("params").value || "{}");
      if (params === null || typeof params !== "object" || Array.isArray(params)) {
        throw new Error("parameters must be a JSON object");
      }
      const body = {
        method: document.getElementById("method").value,
        recipe: document.getElementById("recipe").value,
        text: document.getElementById("text-source").value,
        teachers: document.getElementById("teachers").value.split(",")
          .map((name) => name.trim()).filter(Boolean),
        params,
        force: document.getElementById("force").checked,
      };
      const accepted = await api("admin/retrain", { method: "POST", body, auth: "admin" });
      say(status, `Job ${accepted.job_id} is ${accepted.status}.`);
      await refresh();
    } catch (error) {
      fail(status, error);
    }
  });
});

onKeysChanged(start);
start();

// Models: every version with its dev metrics and gate decision, the active one marked,
// activate or roll back after a confirmation, diagnostics charts, what each replica serves.
// Nothing is shown before the admin token is entered; the page refreshes itself.
import { api, confirmAction, el, fail, fmt, keyReady, onKeysChanged, redraw, say } from "./common.js";

const REFRESH_MS = 3000;
const content = document.getElementById("admin-content");
const status = document.getElementById("models-status");
const notice = document.getElementById("key-notice");
const charts = document.getElementById("charts");
const chartStatus = document.getElementById("diagnostics-status");
let shown = "";  // the last answer rendered, to redraw only on change
let timer = null;
let diagnosticsShown = 0;  // counts chart requests and clears: only the latest one draws

function metricsList(dev) {
  if (!dev) return el("span", { class: "muted" }, "none");
  return el("dl", { class: "metrics" }, Object.entries(dev).map(([scoring, tasks]) =>
    el("div", {}, el("dt", {}, scoring), el("dd", {},
      Object.entries(tasks).map(([task, value]) => `${task} ${fmt(value, 1)}`).join(" · ")))));
}

function gateText(gate) {
  if (!gate) return el("span", { class: "muted" }, "no gate (not trained by a job)");
  const verdict = gate.promote
    ? (gate.passed ? "promoted: passed" : "promoted (forced)")
    : "not promoted";
  const against = gate.active_score === null
    ? `candidate ${fmt(gate.candidate, 2)}; ${gate.active_version} could not be scored`
    : `candidate ${fmt(gate.candidate, 2)} vs ${fmt(gate.active_score, 2)} (${gate.active_version})`;
  const interval = gate.interval
    ? `, difference ${fmt(gate.interval.difference, 2)}, ${Math.round(gate.interval.confidence * 100)} % interval [${fmt(gate.interval.low, 2)}, ${fmt(gate.interval.high, 2)}]`
    : "";
  return el("div", { class: "gate" }, el("strong", {}, verdict), el("br"), `${against}${interval}`);
}

async function activate(version, verb) {
  const message = `${verb} to ${version}? Every replica loads it and then serves it.`;
  if (!(await confirmAction(message, verb))) return;
  try {
    const result = await api(`admin/models/${encodeURIComponent(version)}/activate`,
      { method: "POST", auth: "admin" });
    say(status, `${result.active} is active (was ${result.previous ?? "the settings model"}).`);
    await refresh();
  } catch (error) {
    fail(status, error);
  }
}

function clearCharts() {
  diagnosticsShown += 1;  // a request still in flight draws nothing
  for (const image of charts.querySelectorAll("img")) URL.revokeObjectURL(image.src);
  charts.replaceChildren();
}

async function showDiagnostics(version) {
  clearCharts();
  const request = diagnosticsShown;
  say(chartStatus, `Loading the diagnostics of ${version}…`);
  try {
    const report = await api(`admin/models/${encodeURIComponent(version)}/report`, { auth: "admin" });
    // The charts need the admin token too, so they arrive as blobs rather than plain <img> URLs.
    for (const [name, url] of Object.entries(report.charts)) {
      const chart = await api(url, { auth: "admin", blob: true });
      if (request !== diagnosticsShown) return;  // another version was chosen meanwhile
      const image = el("img", { alt: `${name} chart of ${version}` });
      image.src = URL.createObjectURL(chart);
      charts.append(el("figure", { class: "chart", "data-chart": name }, image, el("figcaption", {}, name)));
    }
    say(chartStatus, `Diagnostics of ${version}.`);
  } catch (error) {
    fail(chartStatus, error);
  }
}

function versionRow(entry, activeCreated) {
  const actions = [];
  if (!entry.active) {
    const verb = activeCreated && entry.created_at < activeCreated ? "Roll back" : "Activate";
    actions.push(el("button", {
      type: "button", class: "activate", "aria-label": `${verb} to ${entry.version}`,
      onclick: () => activate(entry.version, verb),
    }, verb));
  }
  if (entry.has_report) {
    actions.push(el("button", {
      type: "button", class: "secondary diagnostics", "aria-label": `Diagnostics of ${entry.version}`,
      onclick: () => showDiagnostics(entry.version),
    }, "Diagnostics"));
  }
  return el("tr", { "data-version": entry.version, class: entry.active ? "active" : "" },
    el("th", { scope: "row" },
      el("code", {}, entry.version), entry.active ? el("span", { class: "badge" }, "active") : "",
      el("div", { class: "muted" }, `${entry.created_at}${entry.method ? `, ${entry.method}` : ""}` +
        `${entry.parent ? ` from ${entry.parent}` : ""}`),
      entry.refused ? el("div", { class: "error" }, `refused by ${entry.refused.replica}: ${entry.refused.error}`) : ""),
    el("td", { "data-label": "model" }, entry.name, el("div", { class: "muted" }, `${entry.dim} dimensions` +
      `${entry.corpus_revision === null ? "" : `, corpus revision ${entry.corpus_revision}`}`)),
    el("td", { "data-label": "dev metrics" }, metricsList(entry.metrics.dev)),
    el("td", { "data-label": "gate" }, gateText(entry.metrics.gate)),
    el("td", { class: "row-actions" }, actions));
}

function render(models) {
  const active = models.versions.find((entry) => entry.active);
  const versions = document.querySelector("#versions-table tbody");
  redraw(versions, () => versions.replaceChildren(
    ...[...models.versions].reverse().map((entry) => versionRow(entry, active?.created_at))));
  document.querySelector("#replicas-table tbody").replaceChildren(
    ...Object.entries(models.replicas).map(([replica, state]) => el("tr", { "data-replica": replica },
      el("th", { scope: "row" }, replica),
      el("td", { class: "serving", "data-label": "serving" }, state.version ?? "nothing yet"),
      el("td", { "data-label": "loading" }, state.loading ?? "—"),
      el("td", { "data-label": "reported" }, state.at ?? "—"))));
  document.getElementById("history").replaceChildren(...models.history.map((entry) =>
    el("li", {}, `${entry.at}: ${entry.previous ?? "the settings model"} → ${entry.version} (${entry.reason})`)));
  if (!models.versions.length) say(status, "No bundles yet: the first retrain job writes one.");
}

async function refresh() {
  clearTimeout(timer);
  try {
    const models = await api("admin/models", { auth: "admin" });
    const text = JSON.stringify(models);
    if (text !== shown) {
      shown = text;
      render(models);
    }
    timer = setTimeout(refresh, REFRESH_MS);
  } catch (error) {
    fail(status, error);  // a 401 stops the refresh until the keys change
  }
}

function start() {
  clearTimeout(timer);
  shown = "";
  // Whatever an earlier token showed goes with it.
  for (const id of ["versions-table", "replicas-table"]) {
    document.querySelector(`#${id} tbody`).replaceChildren();
  }
  document.getElementById("history").replaceChildren();
  clearCharts();
  content.hidden = !keyReady("admin", notice);
  if (!content.hidden) refresh();
}

onKeysChanged(start);
start();

// Search: a query with λ, top_k and a metadata filter; each hit's Eq. 7 score beside its
// cosine and rank similarity, and how far Eq. 7 moved it from cosine order.
import { api, bindRange, busy, el, fail, fmt, keyReady, onKeysChanged, say } from "./common.js";

const form = document.getElementById("search-form");
const rows = document.getElementById("filter-rows");
const status = document.getElementById("search-status");
const hits = document.getElementById("hits");
const notice = document.getElementById("key-notice");
let conditions = 0;

bindRange(document.getElementById("lambda"), document.getElementById("lambda-value"));
keyReady("api", notice);
onKeysChanged(() => keyReady("api", notice));

function addCondition() {
  const n = ++conditions;
  const value = el("input", { id: `filter-value-${n}`, class: "filter-value", autocomplete: "off" });
  const type = el("select", { id: `filter-type-${n}`, class: "filter-type" },
    ["text", "number", "true", "false", "null"].map((kind) => el("option", {}, kind)));
  // true, false and null carry their value in the type.
  type.addEventListener("change", () => { value.disabled = ["true", "false", "null"].includes(type.value); });
  const row = el("div", { class: "filter-row" },
    el("div", {}, el("label", { for: `filter-key-${n}` }, "Key"),
      el("input", { id: `filter-key-${n}`, class: "filter-key", required: true, autocomplete: "off" })),
    el("div", {}, el("label", { for: `filter-type-${n}` }, "Type"), type),
    el("div", {}, el("label", { for: `filter-value-${n}` }, "Value"), value),
    el("button", {
      type: "button",
      class: "secondary",
      "aria-label": `Remove condition ${n}`,
      onclick: () => { row.remove(); document.getElementById("add-filter").focus(); },
    }, "Remove"));
  rows.append(row);
  row.querySelector("input").focus();
}

function readFilter() {
  const filter = {};
  for (const row of rows.querySelectorAll(".filter-row")) {
    const name = row.querySelector(".filter-key").value.trim();
    const kind = row.querySelector(".filter-type").value;
    const text = row.querySelector(".filter-value").value;
    if (kind === "number") {
      const number = Number(text);
      if (text.trim() === "" || !Number.isFinite(number)) {
        throw new Error(`the value of ${name} is not a number`);
      }
      filter[name] = number;
    } else {
      filter[name] = { text, true: true, false: false, null: null }[kind];
    }
  }
  return filter;
}

function movement(moved, count) {
  const bar = el("span", { class: `move-bar ${moved > 0 ? "up" : moved < 0 ? "down" : ""}` });
  bar.style.width = `${(50 * Math.abs(moved)) / Math.max(1, count - 1)}%`;
  const words = moved > 0 ? `up ${moved}` : moved < 0 ? `down ${-moved}` : "not";
  return el("div", { class: "move", role: "img", "aria-label": `Eq. 7 moved it ${words} from cosine order` },
    el("span", { class: "move-track" }, bar),
    el("span", { class: "move-text", "aria-hidden": "true" },
      moved > 0 ? `▲ ${moved}` : moved < 0 ? `▼ ${-moved}` : "="));
}

function hitItem(hit, moved, count) {
  const metadata = Object.entries(hit.metadata).map(([name, value]) =>
    el("li", {}, `${name}: ${JSON.stringify(value)}`));
  return el("li", { class: "hit", "data-id": hit.id },
    el("div", { class: "hit-head" },
      el("span", { class: "hit-id" }, hit.id),
      movement(moved, count)),
    el("p", { class: "hit-text" }, hit.text),
    el("dl", { class: "scores" },
      el("div", {}, el("dt", {}, "Eq. 7"), el("dd", { class: "score" }, fmt(hit.score))),
      el("div", {}, el("dt", {}, "cosine"), el("dd", { class: "cosine" }, fmt(hit.cosine))),
      el("div", {}, el("dt", {}, "rank"), el("dd", { class: "rank" }, fmt(hit.rank)))),
    metadata.length ? el("ul", { class: "chips", "aria-label": "metadata" }, metadata) : "");
}

function render(result) {
  // Places in cosine order among these hits; the API returns them in Eq. 7 order.
  const byCosine = [...result.hits].sort((a, b) => b.cosine - a.cosine);
  const cosinePlace = new Map(byCosine.map((hit, place) => [hit.id, place]));
  hits.replaceChildren(...result.hits.map((hit, place) =>
    hitItem(hit, cosinePlace.get(hit.id) - place, result.hits.length)));
  say(status, `${result.hits.length} hits, λ = ${fmt(result.lambda, 2)}, model ` +
    `${result.model_version}, corpus revision ${result.revision}.`);
}

document.getElementById("add-filter").addEventListener("click", addCondition);
form.addEventListener("submit", (event) => {
  event.preventDefault();
  busy(document.getElementById("search-submit"), async () => {
    try {
      const body = {
        query: document.getElementById("query").value,
        top_k: Number(document.getElementById("top-k").value),
        lambda: Number(document.getElementById("lambda").value),
      };
      const filter = readFilter();
      if (Object.keys(filter).length) body.filter = filter;
      say(status, "Searching…");
      render(await api("search", { method: "POST", body }));
    } catch (error) {
      hits.replaceChildren();
      fail(status, error);
    }
  });
});

// Compare: one text against one or more, with cosine, rank similarity and Eq. 7, and the
// anchors nearest each text: the top of the rank vectors whose agreement is the rank term.
import { api, bindRange, busy, el, fail, fmt, keyReady, onKeysChanged, say } from "./common.js";

const form = document.getElementById("compare-form");
const status = document.getElementById("compare-status");
const table = document.getElementById("compare-table");
const lists = document.getElementById("anchor-lists");
const notice = document.getElementById("key-notice");

bindRange(document.getElementById("lambda"), document.getElementById("lambda-value"));
keyReady("api", notice);
onKeysChanged(() => keyReady("api", notice));

function bar(value) {
  // Similarities lie in [-1, 1]: the bar fills from the left edge at -1.
  const fill = el("span", { class: "bar-fill" });
  fill.style.width = `${Math.max(0, Math.min(100, ((value + 1) / 2) * 100))}%`;
  return el("span", { class: "bar", "aria-hidden": "true" }, fill);
}

function scoreCell(value, name, label) {
  return el("td", { class: name, "data-label": label }, el("span", { class: "num" }, fmt(value)), bar(value));
}

function anchorList(title, anchors, shared) {
  return el("figure", { class: "anchor-list" },
    el("figcaption", {}, title),
    el("ol", {}, anchors.map((anchor) => {
      const isShared = shared.has(anchor.anchor);
      return el("li", { class: isShared ? "shared" : "", "data-anchor": anchor.anchor },
        el("span", { class: "num" }, fmt(anchor.cosine)), " ", anchor.text,
        isShared ? el("span", { class: "shared-tag" }, "shared") : "");
    })));
}

function render(result, source, targets) {
  const sourceAnchors = new Set(result.source.nearest_anchors.map((anchor) => anchor.anchor));
  // The text's own anchors are marked when any compared text shares them.
  const targetAnchors = new Set(result.targets.flatMap((target) =>
    target.nearest_anchors.map((anchor) => anchor.anchor)));
  const count = result.source.nearest_anchors.length;
  table.tBodies[0].replaceChildren(...result.targets.map((target, k) =>
    el("tr", {},
      el("th", { scope: "row" }, targets[k]),
      scoreCell(target.score, "score", "Eq. 7"),
      scoreCell(target.cosine, "cosine", "cosine"),
      scoreCell(target.rank, "rank", "rank"),
      el("td", { class: "shared-count", "data-label": "shared anchors" },
        `${target.shared_anchors} of ${count}`))));
  table.hidden = false;
  lists.replaceChildren(
    anchorList(`“${source}”`, result.source.nearest_anchors, targetAnchors),
    ...result.targets.map((target, k) =>
      anchorList(`“${targets[k]}”`, target.nearest_anchors, sourceAnchors)));
  say(status, `λ = ${fmt(result.lambda, 2)}, ${result.anchor_count} anchors, model ` +
    `${result.model_version}.`);
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  busy(document.getElementById("compare-submit"), async () => {
    const source = document.getElementById("source").value.trim();
    const targets = document.getElementById("targets").value.split("\n")
      .map((line) => line.trim()).filter(Boolean);
    try {
      if (!targets.length) throw new Error("give at least one text to compare with");
      say(status, "Scoring…");
      const result = await api("similarity/explain", {
        method: "POST",
        body: {
          source,
          targets,
          lambda: Number(document.getElementById("lambda").value),
          anchors: Number(document.getElementById("anchor-count").value),
        },
      });
      render(result, source, targets);
    } catch (error) {
      table.hidden = true;
      lists.replaceChildren();
      fail(status, error);
    }
  });
});

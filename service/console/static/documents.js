// Documents: the corpus a page at a time, each document's metadata, delete, add one, and a
// JSONL upload sent in batches with its progress.
import { api, busy, confirmAction, el, fail, keyReady, onKeysChanged, say } from "./common.js";

const tbody = document.querySelector("#documents-table tbody");
const status = document.getElementById("documents-status");
const pageSize = document.getElementById("page-size");
const previous = document.getElementById("previous-page");
const next = document.getElementById("next-page");
const notice = document.getElementById("key-notice");
// The cursor of every page shown so far (null: the first), to step back.
let cursors = [null];
let nextCursor = null;

function documentRow(doc) {
  const fields = Object.keys(doc.metadata).length;
  const metadata = fields
    ? el("details", {}, el("summary", {}, `metadata: ${fields} ${fields === 1 ? "field" : "fields"}`),
      el("pre", {}, JSON.stringify(doc.metadata, null, 2)))
    : el("span", { class: "muted" }, "no metadata");
  return el("tr", { "data-id": doc.id },
    el("th", { scope: "row", class: "doc-id" }, doc.id),
    el("td", { class: "doc-text" }, doc.text),
    el("td", { class: "doc-metadata" }, metadata),
    el("td", { class: "doc-actions" }, el("button", {
      type: "button",
      class: "secondary danger",
      "aria-label": `Delete ${doc.id}`,
      onclick: () => remove(doc.id),
    }, "Delete")));
}

async function load() {
  const cursor = cursors[cursors.length - 1];
  const query = new URLSearchParams({ limit: pageSize.value });
  if (cursor) query.set("cursor", cursor);
  try {
    const page = await api(`documents?${query}`);
    nextCursor = page.next_cursor;
    tbody.replaceChildren(...page.documents.map(documentRow));
    say(status, page.documents.length ? "" : "No documents on this page.");
  } catch (error) {
    nextCursor = null;
    tbody.replaceChildren();
    fail(status, error);
  }
  previous.disabled = cursors.length === 1;
  next.disabled = nextCursor === null;
  document.getElementById("page-number").textContent = `page ${cursors.length}`;
}

async function remove(id) {
  if (!(await confirmAction(`Delete document “${id}”? It leaves the search index at once.`, "Delete"))) return;
  try {
    await api(`documents/${encodeURIComponent(id)}`, { method: "DELETE" });
    say(status, `Deleted ${id}.`);
    await load();
  } catch (error) {
    fail(status, error);
  }
}

function restart() {
  cursors = [null];
  if (keyReady("api", notice)) load();
}

function parseMetadata(text, where) {
  if (!text.trim()) return {};
  const value = JSON.parse(text);
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new Error(`${where}: metadata must be a JSON object`);
  }
  return value;
}

function parseJsonl(text) {
  const documents = [];
  text.split("\n").forEach((line, index) => {
    if (!line.trim()) return;
    let doc;
    try {
      doc = JSON.parse(line);
    } catch (error) {
      throw new Error(`line ${index + 1}: ${error.message}`);
    }
    if (doc === null || typeof doc !== "object" || typeof doc.text !== "string") {
      throw new Error(`line ${index + 1}: a document is an object with a "text" string`);
    }
    documents.push(doc);
  });
  if (!documents.length) throw new Error("the file holds no documents");
  return documents;
}

pageSize.addEventListener("change", restart);
document.getElementById("refresh-documents").addEventListener("click", load);
previous.addEventListener("click", () => { cursors.pop(); load(); });
next.addEventListener("click", () => { cursors.push(nextCursor); load(); });
onKeysChanged(restart);
restart();

document.getElementById("add-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const region = document.getElementById("add-status");
  busy(document.getElementById("add-submit"), async () => {
    try {
      const doc = {
        text: document.getElementById("doc-text").value,
        metadata: parseMetadata(document.getElementById("doc-metadata").value, "metadata"),
      };
      const id = document.getElementById("doc-id").value.trim();
      if (id) doc.id = id;
      const result = await api("documents", { method: "POST", body: { documents: [doc] } });
      say(region, `Saved ${result.ids[0]} (corpus revision ${result.revision}).`);
      event.target.reset();
      await load();
    } catch (error) {
      fail(region, error);
    }
  });
});

document.getElementById("upload-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const region = document.getElementById("upload-status");
  const progress = document.getElementById("upload-progress");
  const button = document.getElementById("upload-submit");
  busy(button, async () => {
    progress.value = 0;
    try {
      const documents = parseJsonl(await document.getElementById("upload-file").files[0].text());
      const batch = Number(button.dataset.batch);
      for (let start = 0; start < documents.length; start += batch) {
        const chunk = documents.slice(start, start + batch);
        const result = await api("documents", { method: "POST", body: { documents: chunk } });
        const done = start + chunk.length;
        progress.value = (100 * done) / documents.length;
        say(region, `Uploaded ${done} of ${documents.length} documents (corpus revision ${result.revision}).`);
      }
      await load();
    } catch (error) {
      fail(region, error);
    }
  });
});

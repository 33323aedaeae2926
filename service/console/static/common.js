// Shared by every console page: the keys (this tab's sessionStorage only), API calls, DOM
// helpers, the keys and confirmation dialogs.

const STORAGE = { api: "rankserve.apiKey", admin: "rankserve.adminToken" };
// Pages live at <root>/console/<page>; the API at <root>/, also behind a path prefix.
const API_ROOT = new URL("..", window.location.href);

export function key(kind) {
  return sessionStorage.getItem(STORAGE[kind]) || "";
}

export function keyRequired(kind) {
  // The keys dialog has an input for exactly the keys this server requires.
  return document.getElementById(kind === "api" ? "api-key" : "admin-token") !== null;
}

export class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

// `auth` names the key sent as the bearer token: "api" for data, "admin" for /admin.
export async function api(path, { method = "GET", body, auth = "api", blob = false } = {}) {
  const headers = {};
  const secret = key(auth);
  if (secret) headers.Authorization = `Bearer ${secret}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(new URL(path, API_ROOT), {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) {
    let type = "http_error";
    let message = `${response.status} ${response.statusText}`;
    try {
      ({ type, message } = (await response.json()).error);
    } catch {
      // Not the API's error body (a proxy's page): the status line is all there is.
    }
    throw new ApiError(response.status, type, message);
  }
  return blob ? response.blob() : response.json();
}

export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === false || value === null || value === undefined) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  // Strings become text nodes: data from the API is never parsed as HTML.
  for (const child of children.flat()) if (child !== null && child !== undefined) node.append(child);
  return node;
}

export function fmt(value, digits = 3) {
  return typeof value === "number" ? value.toFixed(digits) : "—";
}

export function say(region, text) {
  region.classList.remove("error");
  region.textContent = text;
}

export function fail(region, error) {
  region.classList.add("error");
  const kind = error instanceof ApiError ? ` (${error.type})` : "";
  region.textContent = `${error.message}${kind}`;
  if (error instanceof ApiError && error.status === 401) {
    region.append(" ", el("button", { type: "button", class: "link", onclick: openKeys }, "Enter keys"));
  }
}

export function bindRange(range, output) {
  const show = () => { output.value = Number(range.value).toFixed(2); };
  range.addEventListener("input", show);
  show();
}

// Shows a notice with a way to enter the key when a required one is missing; true when the
// page can call the API.
export function keyReady(kind, notice) {
  const missing = keyRequired(kind) && !key(kind);
  const what = kind === "api" ? "This server requires an API key" : "The admin token is needed";
  notice.replaceChildren(missing ? el("p", { class: "notice", role: "note" },
    `${what} for this page; it is kept in this tab only. `,
    el("button", { type: "button", id: `enter-${kind}-key`, onclick: openKeys },
      kind === "api" ? "Enter the API key" : "Enter the admin token")) : "");
  return !missing;
}

// Redraws part of a page that refreshes itself; a control that had the focus there (found
// again by its aria-label) keeps it, so a keyboard user is not thrown back to the top.
export function redraw(container, draw) {
  const focused = container.contains(document.activeElement)
    ? document.activeElement.getAttribute("aria-label") : null;
  draw();
  if (focused) container.querySelector(`[aria-label="${CSS.escape(focused)}"]`)?.focus();
}

export function onKeysChanged(listener) {
  document.addEventListener("rankserve:keys", listener);
}

export async function busy(button, work) {
  button.disabled = true;
  button.setAttribute("aria-busy", "true");
  try {
    return await work();
  } finally {
    button.disabled = false;
    button.removeAttribute("aria-busy");
  }
}

const keysDialog = document.getElementById("keys-dialog");

function openKeys() {
  for (const [kind, id] of [["api", "api-key"], ["admin", "admin-token"]]) {
    const input = document.getElementById(id);
    if (input) input.value = key(kind);
  }
  keysDialog.returnValue = "";
  keysDialog.showModal();
}

if (keysDialog) {
  document.getElementById("keys-button").addEventListener("click", openKeys);
  keysDialog.addEventListener("close", () => {
    const choice = keysDialog.returnValue;
    if (choice !== "save" && choice !== "forget") return;
    for (const [kind, id] of [["api", "api-key"], ["admin", "admin-token"]]) {
      const input = document.getElementById(id);
      const value = choice === "save" && input ? input.value.trim() : "";
      if (value) sessionStorage.setItem(STORAGE[kind], value);
      else sessionStorage.removeItem(STORAGE[kind]);
    }
    document.dispatchEvent(new Event("rankserve:keys"));
  });
}

// Resolves true when the user confirms; Cancel has the focus first.
export function confirmAction(message, label) {
  const dialog = document.getElementById("confirm-dialog");
  document.getElementById("confirm-message").textContent = message;
  document.getElementById("confirm-ok").textContent = label;
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
  });
}

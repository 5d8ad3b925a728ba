// The dashboard's entry: the router (one page per location hash), the token
// form and the caller's role. Each page is a module whose show(main, ctx)
// draws into <main> and returns a function that stops its timers and streams.

import { ApiError, get, setToken, token } from "./api.js";
import { showCluster } from "./grid.js";
import { showLag } from "./lag.js";
import { showLive } from "./live.js";
import { showProvider } from "./provider.js";
import { showQueue } from "./queue.js";
import { showRequest } from "./request.js";

const main = document.getElementById("main");
const errorLine = document.getElementById("error");
const context = { me: null, fail };
let stop = () => {};

const routes = [
  [/^#?\/?$/, () => showCluster],
  [/^#\/provider\/(.+)$/, () => showProvider],
  [/^#\/queue$/, () => showQueue],
  [/^#\/live$/, () => showLive],
  [/^#\/lag$/, () => showLag],
  [/^#\/request\/(.+)$/, () => showRequest],
];

function fail(error) {
  if (error && error.name === "AbortError") return;
  errorLine.hidden = false;
  errorLine.textContent = error instanceof ApiError && error.status === 401
    ? "This API needs a token: enter it above."
    : `Error: ${error.message || error}`;
}

async function whoami() {
  const role = document.getElementById("role");
  try {
    context.me = await get("/v1/whoami");
    role.textContent = `as ${context.me.role}`;
  } catch (error) {
    context.me = null;
    role.textContent = "";
    fail(error);
  }
}

async function route() {
  stop();
  errorLine.hidden = true;
  main.replaceChildren();
  const where = location.hash || "#/";
  for (const [pattern, page] of routes) {
    const match = where.match(pattern);
    if (!match) continue;
    document.querySelectorAll("nav a").forEach((a) => {
      a.toggleAttribute("aria-current", a.getAttribute("href") === where);
    });
    if (context.me === null) await whoami();
    if (context.me === null) return;
    const argument = match[1] ? decodeURIComponent(match[1]) : undefined;
    stop = page()(main, context, argument) || (() => {});
    return;
  }
  main.append("No such page.");
}

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const field = document.getElementById("token");
  setToken(field.value.trim());
  field.value = "";
  context.me = null;
  route();
});

document.getElementById("lookup").addEventListener("submit", (event) => {
  event.preventDefault();
  const id = document.getElementById("lookup-id").value.trim();
  if (id) location.hash = `#/request/${encodeURIComponent(id)}`;
});

document.getElementById("token").placeholder = token() ? "token set" : "bearer token";
window.addEventListener("hashchange", () => {
  route();
  main.focus();
});
route();

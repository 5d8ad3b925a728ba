// The dashboard's entry: the router (one page per location hash), the token
// form and the caller's role. Each page is a module whose show(main, ctx)
// draws into <main> and returns a function that stops its timers and streams.

import { ApiError, get, setToken, token } from "./api.js";

// each page's module is loaded when first shown: the first page needs only its own
const page = (file, name) => async () => (await import(file))[name];
const showCluster = page("./grid.js", "showCluster");
const showProvider = page("./provider.js", "showProvider");
const showQueue = page("./queue.js", "showQueue");
const showLive = page("./live.js", "showLive");
const showLag = page("./lag.js", "showLag");
const showRequest = page("./request.js", "showRequest");

const main = document.getElementById("main");
const errorLine = document.getElementById("error");
const context = { me: null, fail };
let stop = () => {};
let routed = 0;

// [location, page, whether the page reads the caller's role]: the cluster
// does not, so its data and the role are fetched at once
const routes = [
  [/^#?\/?$/, showCluster, false],
  [/^#\/provider\/(.+)$/, showProvider, true],
  [/^#\/queue$/, showQueue, false],
  [/^#\/live$/, showLive, false],
  [/^#\/lag$/, showLag, true],
  [/^#\/request\/(.+)$/, showRequest, false],
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
  for (const [pattern, load, readsRole] of routes) {
    const match = where.match(pattern);
    if (!match) continue;
    document.querySelectorAll("nav a").forEach((a) => {
      a.toggleAttribute("aria-current", a.getAttribute("href") === where);
    });
    const known = context.me === null ? whoami() : Promise.resolve();
    const shown = ++routed;
    const show = await load();
    if (readsRole) await known;
    if (shown !== routed || (readsRole && context.me === null)) return; // moved on, or no role
    const argument = match[1] ? decodeURIComponent(match[1]) : undefined;
    stop = show(main, context, argument) || (() => {});
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

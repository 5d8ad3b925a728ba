// The cluster: one cell per provider, coloured and patterned by how much of
// the chosen resource class it uses, its percentage written in it, filtered
// by zone, aggregate, trait and state. Refreshed every 2 s: the server sends
// the attributes only when they changed (the layout), the usage every time,
// and only cells whose usage changed are touched.

import { get } from "./api.js";
import { encode, h } from "./dom.js";

const REFRESH_MS = 2000;
export const BUCKETS = [
  { name: "u0", label: "under 25%", below: 0.25 },
  { name: "u1", label: "25–50%", below: 0.5 },
  { name: "u2", label: "50–75%", below: 0.75 },
  { name: "u3", label: "75–90%", below: 0.9 },
  { name: "u4", label: "90% and over", below: Infinity },
];
const STATE_MARK = { enabled: "", disabled: "D", offline: "O", evacuating: "E" };

export function bucketOf(used, capacity) {
  if (!capacity) return "none";
  const share = used / capacity;
  return BUCKETS.find((b) => share < b.below).name;
}

export function showCluster(main, context) {
  const chosen = { resource_class: sessionStorage.getItem("berth-class") || "" };
  const filters = { zone: "", aggregate: "", trait: "", state: "" };
  let data = null;
  let cells = [];
  let shown = [];
  let timer = null;
  let stopped = false;

  const classSelect = h("select", { id: "class", onchange: () => {
    chosen.resource_class = classSelect.value;
    sessionStorage.setItem("berth-class", classSelect.value);
    refresh();
  } });
  const selects = {};
  for (const name of Object.keys(filters)) {
    selects[name] = h("select", { id: `filter-${name}`, onchange: () => {
      filters[name] = selects[name].value;
      draw();
    } });
  }
  const summary = h("p", { id: "summary", "aria-live": "polite" });
  const legend = h("ul", { class: "legend", "aria-label": "Legend" });
  const grid = h("div", { id: "grid", class: "grid", role: "group",
    "aria-label": "Providers (arrow keys move, Enter opens)", onkeydown: move });

  main.append(
    h("h2", {}, "Cluster"),
    h("div", { class: "controls" },
      h("label", { for: "class" }, "Resource class"), classSelect,
      ...Object.keys(filters).map((name) => [h("label", { for: `filter-${name}` }, name), selects[name]])),
    legend, summary, grid);

  function options(select, names, all, current) {
    select.replaceChildren(h("option", { value: "" }, all),
      ...names.map((name, n) => h("option", { value: String(n), selected: String(n) === current }, name || "(none)")));
  }

  function passes(i) {
    return (filters.zone === "" || data.zone[i] === +filters.zone)
      && (filters.state === "" || data.state[i] === +filters.state)
      && (filters.aggregate === "" || data.aggregate[i].includes(+filters.aggregate))
      && (filters.trait === "" || data.trait[i].includes(+filters.trait));
  }

  function describe(i) {
    const zone = data.zones[data.zone[i]] || "no zone";
    const state = data.states[data.state[i]];
    const { text } = usage(i);
    return `${data.ids[i]}: ${data.resource_class} ${text} used, ${zone}, ${state}`;
  }

  function usage(i) {
    const capacity = data.capacity[i];
    if (!capacity) return { bucket: "none", text: "–" };
    return { bucket: bucketOf(data.used[i], capacity), text: `${Math.round((100 * data.used[i]) / capacity)}%` };
  }

  function paint(cell, i) {
    const { bucket, text } = usage(i);
    const state = data.states[data.state[i]];
    const label = text.replace("%", "") + (STATE_MARK[state] ?? "?");
    if (cell.dataset.bucket !== bucket || cell.textContent !== label) {
      cell.className = `cell ${bucket} state-${state}`;
      cell.dataset.bucket = bucket;
      cell.textContent = label;
      cell.setAttribute("aria-label", describe(i));
      cell.title = describe(i);
    }
  }

  function draw() {
    shown = [];
    for (let i = 0; i < data.ids.length; i++) if (passes(i)) shown.push(i);
    const fragment = document.createDocumentFragment();
    cells = shown.map((i, n) => {
      const cell = h("a", { href: `#/provider/${encode(data.ids[i])}`, tabindex: n === 0 ? "0" : "-1" });
      paint(cell, i);
      fragment.append(cell);
      return cell;
    });
    grid.replaceChildren(fragment);
    count();
  }

  function count() {
    const byBucket = {};
    for (const i of shown) {
      const { bucket } = usage(i);
      byBucket[bucket] = (byBucket[bucket] || 0) + 1;
    }
    legend.replaceChildren(...[...BUCKETS, { name: "none", label: "no such inventory" }].map((b) =>
      h("li", {}, h("span", { class: `swatch cell ${b.name}`, "aria-hidden": "true" }),
        `${b.label}: `, h("span", { "data-bucket-count": b.name }, String(byBucket[b.name] || 0)))));
    legend.append(h("li", {}, "letters: D disabled, O offline, E evacuating"));
    summary.textContent = `${shown.length} of ${data.providers} providers shown, by ${data.resource_class || "no class"} used`;
    summary.dataset.shown = String(shown.length);
    summary.dataset.total = String(data.providers);
  }

  async function refresh() {
    clearTimeout(timer);
    try {
      const query = new URLSearchParams();
      if (chosen.resource_class) query.set("resource_class", chosen.resource_class);
      if (data) query.set("layout", data.layout);
      const reply = await get(`/v1/cluster?${query}`);
      if (stopped) return;
      if (reply.ids) {
        data = reply;
        classSelect.replaceChildren(...reply.classes.map((name) =>
          h("option", { value: name, selected: name === reply.resource_class }, name)));
        options(selects.zone, reply.zones, "all zones", filters.zone);
        options(selects.aggregate, reply.aggregates, "all aggregates", filters.aggregate);
        options(selects.trait, reply.traits, "all traits", filters.trait);
        options(selects.state, reply.states, "all states", filters.state);
        draw();
      } else {
        const classChanged = reply.resource_class !== data.resource_class;
        Object.assign(data, { capacity: reply.capacity, used: reply.used,
          resource_class: reply.resource_class, providers: reply.providers });
        shown.forEach((i, n) => paint(cells[n], i));
        if (classChanged) cells.forEach((cell, n) => cell.setAttribute("aria-label", describe(shown[n])));
        count();
      }
      main.dataset.refreshed = String(Date.now());
    } catch (error) {
      context.fail(error);
    }
    if (!stopped) timer = setTimeout(refresh, REFRESH_MS);
  }

  function move(event) {
    const at = cells.indexOf(document.activeElement);
    if (at < 0) return;
    const columns = Math.max(1, Math.round(grid.clientWidth / cells[0].offsetWidth));
    const to = { ArrowRight: at + 1, ArrowLeft: at - 1, ArrowDown: at + columns, ArrowUp: at - columns,
      Home: 0, End: cells.length - 1 }[event.key];
    if (to === undefined) return;
    event.preventDefault();
    const next = cells[Math.min(cells.length - 1, Math.max(0, to))];
    cells[at].tabIndex = -1;
    next.tabIndex = 0;
    next.focus();
  }

  refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

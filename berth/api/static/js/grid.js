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
const ROWS_PER_BLOCK = 8;
const FIRST_BLOCKS = 4;
const LATER_BLOCKS = 6;
const CELL_GAP_PX = 2;
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
  let columns = 1;
  let drawn = 0;
  let resized = null;

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
    "aria-label": "Providers (arrow keys move, Enter opens)", onkeydown: move,
    onfocusin: (event) => name(event.target), onmouseover: (event) => {
      if (event.target.classList.contains("cell")) name(event.target);
    } });

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
      if (cell.hasAttribute("aria-label")) name(cell);
    }
  }

  // a cell's full name (provider, share used, zone, state) is made when it
  // is focused or pointed at, not for all 10,000 at every refresh
  function name(cell) {
    const i = shown[cells.indexOf(cell)];
    if (i === undefined) return;
    cell.setAttribute("aria-label", describe(i));
    cell.title = describe(i);
  }

  // The cells go in blocks of whole rows, each laid out and painted by the
  // browser only when on screen (content-visibility): 10,000 cells cost
  // about as much as the thousand in view.
  function draw() {
    shown = [];
    for (let i = 0; i < data.ids.length; i++) if (passes(i)) shown.push(i);
    cells = [];
    grid.replaceChildren();
    columns = 1;
    if (shown.length) {
      const probe = h("div", { class: "block" }, makeCell(0));
      grid.append(probe);
      const width = probe.firstChild.getBoundingClientRect().width + CELL_GAP_PX;
      columns = Math.max(1, Math.floor((grid.clientWidth + CELL_GAP_PX) / width));
      probe.remove();
    }
    const perBlock = columns * ROWS_PER_BLOCK;
    const block = (from) => {
      const made = [];
      for (let n = from; n < Math.min(shown.length, from + perBlock); n++) made.push(makeCell(n));
      cells.push(...made);
      return h("div", { class: "block" }, made);
    };
    // the first screenful now, the rest a few blocks a task after it, so
    // the grid shows (and the page answers) before 10,000 cells are made
    const drawing = ++drawn;
    for (let b = 0; b < FIRST_BLOCKS && b * perBlock < shown.length; b++) grid.append(block(b * perBlock));
    // each step after a frame: the browser paints between them
    const later = (step) => requestAnimationFrame(() => setTimeout(step, 0));
    const more = () => {
      for (let b = 0; b < LATER_BLOCKS && drawing === drawn && cells.length < shown.length; b++) {
        grid.append(block(cells.length));
      }
      if (drawing === drawn && cells.length < shown.length) later(more);
    };
    later(more);
    count();
  }

  function makeCell(n) {
    const cell = document.createElement("a");
    cell.href = `#/provider/${encode(data.ids[shown[n]])}`;
    cell.tabIndex = n === 0 ? 0 : -1;
    paint(cell, shown[n]);
    return cell;
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
        cells.forEach((cell, n) => paint(cell, shown[n]));
        if (classChanged) cells.forEach((cell) => { if (cell.hasAttribute("aria-label")) name(cell); });
        count();
      }
      main.dataset.refreshed = String(Date.now());
    } catch (error) {
      context.fail(error);
      if (error.status === 401) return; // until a token is given
    }
    if (!stopped) timer = setTimeout(refresh, REFRESH_MS);
  }

  function move(event) {
    const at = cells.indexOf(document.activeElement);
    if (at < 0) return;
    const to = { ArrowRight: at + 1, ArrowLeft: at - 1, ArrowDown: at + columns, ArrowUp: at - columns,
      Home: 0, End: cells.length - 1 }[event.key];
    if (to === undefined) return;
    event.preventDefault();
    const next = cells[Math.min(cells.length - 1, Math.max(0, to))];
    cells[at].tabIndex = -1;
    next.tabIndex = 0;
    next.focus();
  }

  // whole rows again when the window's width changes
  const onResize = () => {
    clearTimeout(resized);
    resized = setTimeout(() => { if (data) draw(); }, 200);
  };
  window.addEventListener("resize", onResize);
  refresh();
  return () => {
    stopped = true;
    drawn += 1; // blocks still to append are not
    clearTimeout(timer);
    clearTimeout(resized);
    window.removeEventListener("resize", onResize);
  };
}

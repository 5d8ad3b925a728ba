// What waits and what still fits: the queue by resource shape, and the
// headroom (more instances that fit) of the shapes the operator chose,
// kept in this tab. Refreshed every 2 s.

import { get } from "./api.js";
import { h, table } from "./dom.js";

const REFRESH_MS = 2000;
const KEY = "berth-shapes";
const DEFAULT_SHAPES = "VCPU=1,MEMORY_MB=2048\nVCPU=4,MEMORY_MB=8192";

export function showQueue(main, context) {
  const controller = new AbortController();
  let timer = null;
  const queue = h("div", { id: "queue" });
  const room = h("div", { id: "headroom" });
  const shapes = h("textarea", { id: "shapes", rows: "3", cols: "40" });
  shapes.value = sessionStorage.getItem(KEY) || DEFAULT_SHAPES;
  const form = h("form", { onsubmit: (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, shapes.value);
    refresh();
  } }, h("label", { for: "shapes" }, "Shapes (CLASS=AMOUNT,… one a line)"), shapes, h("button", {}, "Measure"));
  main.append(h("h2", {}, "Queue and headroom"), queue, h("h3", {}, "Headroom"), form, room);

  async function refresh() {
    clearTimeout(timer);
    try {
      const depth = await get("/v1/queue", controller.signal);
      const rows = Object.entries(depth).sort(([, a], [, b]) => b.instances - a.instances)
        .map(([shape, d]) => [shape, d.instances, d.batches]);
      queue.replaceChildren(rows.length
        ? table("Waiting, by shape", ["shape", "instances", "batches"], rows)
        : h("p", {}, "Nothing waits."));
      const wanted = shapes.value.split("\n").map((s) => s.trim()).filter(Boolean);
      const found = await Promise.all(wanted.map((shape) =>
        get(`/v1/headroom?resources=${encodeURIComponent(shape)}`, controller.signal)
          .then((r) => [shape, r.instances, Object.keys(r.providers).length])
          .catch((error) => [shape, `error: ${error.message}`, ""])));
      room.replaceChildren(table("More instances that fit", ["shape", "instances", "providers"], found));
    } catch (error) {
      context.fail(error);
      if (error.status === 401) return; // until a token is given
    }
    if (!controller.signal.aborted) timer = setTimeout(refresh, REFRESH_MS);
  }

  refresh();
  return () => {
    controller.abort();
    clearTimeout(timer);
  };
}

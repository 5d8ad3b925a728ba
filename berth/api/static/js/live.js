// Decisions and answers as they happen, from the API's two Server-Sent
// Event streams, newest first (the last 100 kept), with the writers'
// decisions counted by kind and the reasons for rejections counted by code.

import { follow } from "./api.js";
import { encode, h, link, table, when } from "./dom.js";

const KEPT = 100;

export function showLive(main, context) {
  const controller = new AbortController();
  const kinds = {};
  const reasons = {};
  const open = h("p", { id: "stream-state", "aria-live": "polite" }, "connecting…");
  const counts = h("div", { id: "counts", class: "columns" });
  const list = h("ol", { id: "events", class: "events", "aria-live": "off" });
  main.append(h("h2", {}, "Live decisions and answers"), open, counts, h("h3", {}, "Latest first"), list);
  let connected = 0;

  function opened() {
    connected += 1;
    open.textContent = `following ${connected} of 2 streams`;
    open.dataset.open = String(connected);
  }

  function add(item) {
    list.prepend(item);
    while (list.children.length > KEPT) list.lastChild.remove();
  }

  function drawCounts() {
    const sorted = (counter) => Object.entries(counter).sort(([, a], [, b]) => b - a);
    counts.replaceChildren(
      table("Decisions by kind", ["kind", "count"], sorted(kinds)),
      table("Rejection reasons", ["reason", "count"], sorted(reasons)));
  }

  function outcome(_name, o) {
    kinds[o.kind] = (kinds[o.kind] || 0) + 1;
    const codes = (o.reasons || []).map((r) => r.code);
    if (o.kind === "rejected") codes.forEach((code) => { reasons[code] = (reasons[code] || 0) + 1; });
    add(h("li", { class: `kind-${o.kind}`, "data-event-id": o.event_id },
      `${when(o.clock_ms)} decision ${o.kind} `, h("span", { class: "id" }, o.subject),
      ` (event ${o.event_id}, partition ${o.partition} offset ${o.offset})`,
      codes.length ? ` reasons: ${codes.join(", ")}` : ""));
    drawCounts();
  }

  function answer(_name, a) {
    const result = a.status === "queued" ? "queued" : a.placed ? "placed" : "failed";
    if (result === "failed") {
      const why = `answer: ${(a.reason || "unknown").split(/[:;(]/)[0].trim()}`;
      reasons[why] = (reasons[why] || 0) + 1;
      drawCounts();
    }
    add(h("li", { class: `answer-${result}`, "data-request-id": a.request_id },
      `answer ${result} `, link(`#/request/${encode(a.request_id)}`, a.request_id),
      a.reason ? `: ${a.reason}` : ""));
  }

  drawCounts();
  for (const [path, handler] of [["/v1/streams/outcomes", outcome], ["/v1/streams/placements", answer]]) {
    follow(path, handler, controller.signal, opened).catch(context.fail);
  }
  return () => controller.abort();
}

// A provider: its description, inventory and usage, the reservations on it
// and its history. An operator's token also gets buttons to enable and
// disable it (a provider_state_set event, decided by its partition's writer).

import { get, post } from "./api.js";
import { encode, h, link, table, when } from "./dom.js";

const SHOWN_STEPS = 200;

export function showProvider(main, context, id) {
  const controller = new AbortController();
  load();

  // ``expected``: the state just decided; the writer publishes a decision
  // just before its view commits it, so read again until the view has it
  async function load(expected, tries = 50) {
    try {
      const found = await get(`/v1/history/${encode(id)}?records=false`, controller.signal);
      if (expected && found.provider && found.provider.state !== expected && tries > 0) {
        setTimeout(load, 100, expected, tries - 1);
        return;
      }
      main.replaceChildren(h("h2", {}, "Provider ", h("span", { class: "id" }, id)));
      draw(found);
    } catch (error) {
      if (error.status === 404) main.replaceChildren(h("h2", {}, "Provider ", h("span", { class: "id" }, id)), h("p", { id: "unseen" }, "The view holds nothing about this provider that this token may read (a project sees its own reservations only)."));
      else context.fail(error);
    }
  }

  function draw(found) {
    const p = found.provider;
    if (!p) {
      main.append(h("p", {}, "The view holds no provider by this id."));
      return;
    }
    main.append(
      description(p),
      context.me.writes_providers ? stateButtons(p) : "",
      table("Inventory and usage", ["class", "total", "reserved", "ratio", "capacity", "held", "consumed", "free", "used"],
        Object.entries(p.inventories).map(([rc, i]) => [rc, i.total, i.reserved, i.allocation_ratio, i.capacity,
          i.held, i.consumed, i.free, i.capacity ? `${Math.round((100 * (i.held + i.consumed)) / i.capacity)}%` : "–"])),
      table(`Reservations (${p.allocations.length})`, ["reservation", "consumer", "status", "resources"],
        p.allocations.map((a) => [link(`#/request/${encode(a.consumer_id.replace(/\.\d+$/, ""))}`, a.reservation_id),
          a.consumer_id, a.status, Object.entries(a.resources).map(([k, v]) => `${k}=${v}`).join(", ")])),
      history(found.history));
  }

  function description(p) {
    const rows = [
      ["state", p.state], ["partition", p.partition], ["availability zone", p.availability_zone || "none"],
      ["host", p.host || ""], ["address", p.host_ip || ""],
      ["aggregates", (p.aggregates || []).join(", ")], ["traits", (p.traits || []).join(", ")],
      ["capabilities", JSON.stringify(p.capabilities)], ["metadata", JSON.stringify(p.metadata)],
      ["metrics", `${JSON.stringify(p.metrics)} ${p.metrics_at_ms ? `at ${when(p.metrics_at_ms)}` : ""}`],
    ];
    return h("dl", { class: "description" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))]));
  }

  function stateButtons(p) {
    const status = h("span", { "aria-live": "polite" });
    const button = (state) => h("button", { type: "button", disabled: p.state === state, onclick: async () => {
      status.textContent = "publishing…";
      try {
        const event = { type: "provider_state_set", event_id: `dashboard-${id}-${state}-${Date.now()}`,
          ts_ms: Date.now(), partition_key: id, provider_id: id, state };
        const reply = await post("/v1/events?wait=10", event);
        const kinds = Object.values(reply.decisions || {}).flat().map((o) => o.kind);
        status.textContent = `decided: ${kinds.join(", ") || "pending"}`;
        load(kinds.includes("applied") ? state : undefined);
      } catch (error) {
        status.textContent = "";
        context.fail(error);
      }
    } }, state === "enabled" ? "Enable" : "Disable");
    return h("p", { class: "actions" }, button("enabled"), " ", button("disabled"), " ", status);
  }

  function history(steps) {
    const last = steps.slice(-SHOWN_STEPS).reverse();
    return table(`History (${steps.length} decisions, newest first${steps.length > SHOWN_STEPS ? `, last ${SHOWN_STEPS}` : ""})`,
      ["clock", "kind", "subject", "event", "reasons"],
      last.map((s) => [when(s.clock_ms), s.kind, s.subject, s.event_id,
        (s.reasons || []).map((r) => r.code).join(", ")]));
  }

  return () => controller.abort();
}

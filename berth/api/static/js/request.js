// A request: as submitted, the scheduler's answers, an explanation on the
// view as it is now (the filters' counts, why each provider was removed,
// the best candidates by score), and its reservations with their history.

import { get } from "./api.js";
import { encode, h, link, table, when } from "./dom.js";

export function showRequest(main, context, id) {
  const controller = new AbortController();
  main.append(h("h2", {}, "Request ", h("span", { class: "id" }, id)));
  load();

  async function load() {
    try {
      draw(await get(`/v1/requests/${encode(id)}`, controller.signal));
    } catch (error) {
      if (error.status === 404) main.append(h("p", {}, "The log holds no such request."));
      else context.fail(error);
    }
  }

  function draw(found) {
    const last = found.answers[found.answers.length - 1];
    main.append(
      h("section", { id: "answer" }, h("h3", {}, "Answer"),
        last ? h("p", {}, last.status === "queued" ? "queued" : last.placed ? "placed" : "failed",
          last.reason ? `: ${last.reason}` : "", ` after ${last.attempts ?? 0} attempts`) : h("p", {}, "not answered yet"),
        last && last.trace && last.trace.length ? h("pre", {}, last.trace.join("\n")) : null),
      decided(last),
      h("section", {}, h("h3", {}, "As submitted"), h("pre", {}, JSON.stringify(found.request, null, 2))),
      explanation(found.explanation),
      h("section", { id: "reservations" }, h("h3", {}, "Reservations"),
        found.reservations.length ? found.reservations.map(reservation) : h("p", {}, "none")));
  }

  // how the scheduler made the answer, as it recorded it: the policy, the
  // best candidates with each weigher's part; and, when asked, the request
  // placed again on the view as of the answer (GET /v1/explain/ID)
  function decided(answer) {
    if (!answer) return "";
    const candidates = answer.candidates || [];
    const weighers = candidates.length ? Object.keys(candidates[0].weighers) : [];
    const again = h("div", { id: "replayed", "aria-live": "polite" });
    const button = h("button", { type: "button", onclick: async () => {
      button.disabled = true;
      again.replaceChildren("placing it again on the view as it was…");
      try {
        const e = await get(`/v1/explain/${encode(id)}`, controller.signal);
        again.replaceChildren(h("p", {}, e.same ? "Placed again, the same pick: " : "Placed again, another pick: ",
          `recorded ${e.recorded.join(", ") || "none"}, now ${e.recomputed.join(", ") || "none"} (policy ${e.policy})`));
      } catch (error) {
        again.replaceChildren(`could not place it again: ${error.message}`);
      }
      button.disabled = false;
    } }, "Place it again as decided");
    return h("section", { id: "decided" }, h("h3", {}, "How it was decided"),
      h("p", {}, `policy ${answer.policy || "default"}`),
      candidates.length
        ? table("Best candidates, as ranked then", ["provider", "score", ...weighers],
          candidates.map((c) => [link(`#/provider/${encode(c.provider_id)}`, c.provider_id), c.score.toFixed(3),
            ...weighers.map((w) => `${c.weighers[w][0].toFixed(2)} × ${c.weighers[w][1]}`)]))
        : h("p", {}, "The answer records no candidates."),
      h("p", {}, button), again);
  }

  function explanation(e) {
    if (!e) return h("section", {}, h("h3", {}, "Explanation"), h("p", {}, "Only a single request is explained."));
    return h("section", { id: "explanation" }, h("h3", {}, "Explanation, on the view as it is now"),
      h("p", {}, e.placed ? `one instance would go to ${e.providers.join(", ")}` : e.reason,
        ` (${e.considered} providers considered)`),
      Object.keys(e.counts).length
        ? table("Filters", ["filter", "providers removed"], Object.entries(e.counts))
        : h("p", {}, "No filter removed a provider."),
      table("Ranking, best first", ["provider", "score"],
        e.ranking.map((r) => [link(`#/provider/${encode(r.provider_id)}`, r.provider_id), r.score.toFixed(3)])),
      table(`Removed (${e.eliminated}${e.eliminated > e.eliminations.length ? `, first ${e.eliminations.length}` : ""})`,
        ["provider", "filter", "why"],
        e.eliminations.map((x) => [link(`#/provider/${encode(x.provider_id)}`, x.provider_id), x.filter, x.reason])));
  }

  function reservation(found) {
    return h("div", { class: "reservation" },
      found.reservations.map((r) => h("p", {}, h("span", { class: "id" }, r.reservation_id), ` ${r.status}, project ${r.project_id}, on `,
        r.items.map((item) => link(`#/provider/${encode(item.provider_id)}`, item.provider_id)),
        `, expires ${when(r.expires_at_ms)}`)),
      table(`History of ${found.subject}`, ["clock", "kind", "event", "record"],
        found.history.map((s) => [when(s.clock_ms), s.kind, s.event_id, s.record ? s.record.type || "" : ""])));
  }

  return () => controller.abort();
}

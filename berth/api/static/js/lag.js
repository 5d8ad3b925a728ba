// The writers: how far each partition's view is behind its log, its clock
// and its dead letters, every 2 s (status without the table scans).

import { get } from "./api.js";
import { h, table, when } from "./dom.js";

const REFRESH_MS = 2000;

export function showLag(main, context) {
  const controller = new AbortController();
  let timer = null;
  const body = h("div", { id: "lag" });
  main.append(h("h2", {}, "Writers' lag per partition"), body);
  if (!context.me.reads_everything) {
    body.append(h("p", {}, `The status of every partition is an operator's to read; this token is ${context.me.role}'s.`));
    return () => {};
  }

  async function refresh() {
    clearTimeout(timer);
    try {
      const status = await get("/v1/status?lag=true", controller.signal);
      const most = Math.max(1, ...status.partitions.map((p) => p.behind));
      body.replaceChildren(
        h("p", { id: "behind" }, `At most ${status.behind} records behind.`),
        table("Partitions", ["partition", "log end", "applied", "behind", "", "clock", "dead letters"],
          status.partitions.map((p) => [p.partition, p.log_end, p.applied, p.behind,
            h("meter", { min: "0", max: String(most), value: String(p.behind), "aria-label": `partition ${p.partition} behind` }),
            when(p.clock_ms), p.dead_letters])),
        ...(status.damaged.length
          ? [table("Damaged partitions", ["topic", "partition", "damage"], status.damaged.map((d) => [d.topic, d.partition, d.damage]))]
          : []));
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

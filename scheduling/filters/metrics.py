"""Nova's MetricsFilter: drop the providers that do not report every metric
the metrics weigher's ``weight_setting`` names, so that weighing them with
``required = True`` cannot fail (Nova pairs the two)."""

from __future__ import annotations

from scheduling.filters.base import Context, HostFilter
from scheduling.model import Request
from scheduling.weighers.metrics import parse_weight_setting


class MetricsFilter(HostFilter):
    """``weight_setting`` is the MetricsWeigher's (``"cpu.percent=-1.0,
    ..."``): every metric it names must be reported. Metrics change with
    each report, so the filter is asked provider by provider."""

    name = "MetricsFilter"
    cost = 3

    def __init__(self, weight_setting: str = "") -> None:
        self.metrics = tuple(name for name, _ in parse_weight_setting(weight_setting))

    def applies(self, request: Request) -> bool:
        return bool(self.metrics)

    def reject(self, ctx: Context, row: int) -> str | None:
        reported = ctx.snapshot.providers[row].metrics
        missing = [name for name in self.metrics if name not in reported]
        return f"does not report {', '.join(missing)}" if missing else None

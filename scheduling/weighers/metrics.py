"""MetricsWeigher: a weighted sum of the metrics providers report (Nova's
MetricsWeigher).

``weight_setting`` is ``"name1=ratio1, name2=ratio2"``; a provider's raw
weight is ``sum(metric * ratio)``. A metric a provider does not report is
handled as Nova does:

* ``required=True``: weighing fails with :class:`MetricNotFound` (pair this
  weigher with a filter that drops providers lacking the metrics);
* ``required=False``: the provider's raw weight becomes
  ``weight_of_unavailable`` (default -10000.0, meant to sink it), unless that
  metric's ratio times the provider's multiplier is 0, in which case the
  metric cannot matter and is simply skipped.

With ``max_age_ms``, a provider whose latest report was made more than that
before the request (``Request.ts_ms``) reports nothing: each of its
metrics is unavailable, as a missing one is. A request without a time, or
a provider without a report time, is not aged.

Nova never weighs a lone candidate, so a lone candidate lacking a required
metric does not fail.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import ClassVar

import numpy as np

from scheduling.filters.base import Context
from scheduling.model import FloatArray, IntArray, Provider
from scheduling.weighers.base import Weigher

_NONE: Mapping[str, float] = {}


class MetricNotFound(LookupError):
    """A provider lacks a metric the weigher was told is required."""

    def __init__(self, provider_id: str, metric: str) -> None:
        super().__init__(
            f"provider {provider_id!r} does not report metric {metric!r}, which the "
            "metrics weigher requires (filter such providers out, or set required=False)"
        )
        self.provider_id = provider_id
        self.metric = metric


def parse_weight_setting(setting: str | Iterable[str]) -> tuple[tuple[str, float], ...]:
    """``"a=1.0, b=-0.5"`` (or the entries as a list) as ``(("a", 1.0), ("b", -0.5))``.

    Nova logs and drops malformed entries; here they are errors, because a
    silently dropped term changes placements without anyone noticing. Blank
    entries (a trailing comma) are ignored."""
    entries = setting.split(",") if isinstance(setting, str) else list(setting)
    parsed: list[tuple[str, float]] = []
    for entry in entries:
        text = entry.strip()
        if not text:
            continue
        name, sep, ratio_text = text.partition("=")
        name = name.strip()
        if not sep:
            raise ValueError(f"metrics weight_setting: {text!r} is not of the form name=ratio")
        if not name:
            raise ValueError(f"metrics weight_setting: {text!r} has no metric name")
        try:
            ratio = float(ratio_text)
        except ValueError:
            raise ValueError(
                f"metrics weight_setting: ratio {ratio_text.strip()!r} of metric {name!r} "
                "is not a number"
            ) from None
        if not math.isfinite(ratio):
            # NaN or infinity would poison every provider's total.
            raise ValueError(
                f"metrics weight_setting: ratio of metric {name!r} must be finite, "
                f"not {ratio_text.strip()!r}"
            )
        parsed.append((name, ratio))
    return tuple(parsed)


class MetricsWeigher(Weigher):
    name: ClassVar[str] = "MetricsWeigher"
    multiplier_key: ClassVar[str] = "metrics_weight_multiplier"

    def __init__(
        self,
        multiplier: float = 1.0,
        weight_setting: str | Iterable[str] = "",
        required: bool = True,
        weight_of_unavailable: float = -10000.0,
        max_age_ms: int | None = None,
    ) -> None:
        super().__init__(multiplier)
        self.setting = parse_weight_setting(weight_setting)
        self.required = required
        self.weight_of_unavailable = float(weight_of_unavailable)
        if max_age_ms is not None and (isinstance(max_age_ms, bool) or max_age_ms < 0):
            raise ValueError(f"metrics max_age_ms must be a count of ms, not {max_age_ms!r}")
        self.max_age_ms = max_age_ms

    def _reported(self, ctx: Context, provider: Provider) -> Mapping[str, float]:
        """The provider's metrics, or none if they are older than ``max_age_ms``."""
        now = ctx.request.ts_ms
        at = provider.metrics_at_ms
        if self.max_age_ms is None or now is None or at is None:
            return provider.metrics
        return provider.metrics if now - at <= self.max_age_ms else _NONE

    def weigh(self, ctx: Context, rows: IntArray) -> FloatArray:
        out = np.zeros(len(rows), dtype=np.float64)
        if len(rows) <= 1 or not self.setting:
            return out
        # Only consulted for missing metrics, but per row: an aggregate can
        # zero the multiplier for some providers and not others.
        multipliers = None if self.required else self.multipliers(ctx, rows)
        for k, row in enumerate(rows):
            provider = ctx.snapshot.providers[int(row)]
            metrics = self._reported(ctx, provider)
            value = 0.0
            for metric, ratio in self.setting:
                reported = metrics.get(metric)
                if reported is not None:
                    value += float(reported) * ratio
                    continue
                if multipliers is None:
                    raise MetricNotFound(provider.provider_id, metric)
                if ratio * float(multipliers[k]) != 0.0:
                    value = self.weight_of_unavailable
                    break
            out[k] = value
        return out

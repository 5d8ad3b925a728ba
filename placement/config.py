"""Scheduler configuration from TOML, validated with clear errors.

Example::

    [scheduler]
    max_attempts = 3
    sample_percentage = 100      # weigh only this share of feasible providers
    sample_minimum = 100

    [filters]
    enabled = ["ComputeFilter", "ResourceFilter", "AvailabilityZoneFilter"]

    [filters.NumInstancesFilter]   # constructor options of one filter
    max_instances_per_host = 50

    [weighers]                     # weigher name = multiplier
    RAMWeigher = 1.0
    IoOpsWeigher = -1.0

    [weighers.MetricsWeigher]      # or a table: multiplier and options
    multiplier = 1.0
    weight_setting = "cpu.percent=-1.0"
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from placement.engine import Engine, Sampling
from placement.filters.base import HostFilter
from placement.registry import DEFAULT_FILTERS, DEFAULT_WEIGHERS, FILTERS, WEIGHERS
from placement.weighers.base import Weigher

_T = TypeVar("_T")


class ConfigError(ValueError):
    """A configuration that cannot be used; the message says what to change."""


class _Scheduler(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_attempts: int = Field(default=3, ge=1, le=100)
    sample_percentage: float = Field(default=100.0, gt=0.0, le=100.0)
    sample_minimum: int = Field(default=100, ge=1)


class SchedulerConfig:
    """The engine's filters and weighers, and the worker's retry bound."""

    def __init__(
        self,
        filters: list[HostFilter],
        weighers: list[Weigher],
        max_attempts: int,
        sampling: Sampling,
    ) -> None:
        self.filters = filters
        self.weighers = weighers
        self.max_attempts = max_attempts
        self.sampling = sampling

    def engine(self) -> Engine:
        return Engine(self.filters, self.weighers, self.sampling)

    @classmethod
    def default(cls) -> SchedulerConfig:
        return cls.from_mapping({})

    @classmethod
    def load(cls, path: str | Path) -> SchedulerConfig:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise ConfigError(f"{path}: {error}") from None
        try:
            return cls.from_mapping(data)
        except ConfigError as error:
            raise ConfigError(f"{path}: {error}") from None

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> SchedulerConfig:
        unknown = set(data) - {"scheduler", "filters", "weighers"}
        if unknown:
            raise ConfigError(
                f"unknown sections {sorted(unknown)}; expected scheduler, filters, weighers"
            )
        try:
            scheduler = _Scheduler.model_validate(data.get("scheduler", {}))
        except ValidationError as error:
            raise ConfigError(f"[scheduler]: {_summary(error)}") from None
        return cls(
            filters=_filters(data.get("filters", {})),
            weighers=_weighers(data.get("weighers", DEFAULT_WEIGHERS)),
            max_attempts=scheduler.max_attempts,
            sampling=Sampling(scheduler.sample_percentage, scheduler.sample_minimum),
        )


def _summary(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}"
        for e in error.errors(include_url=False)
    )


def _filters(section: dict[str, Any]) -> list[HostFilter]:
    names = section.get("enabled", list(DEFAULT_FILTERS))
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError("[filters] enabled must be a list of filter names")
    options = {k: v for k, v in section.items() if k != "enabled"}
    for name in options:
        if name not in names:
            raise ConfigError(f"[filters.{name}] configures a filter that is not enabled")
    built = []
    for name in names:
        cls = FILTERS.get(name)
        if cls is None:
            raise ConfigError(f"unknown filter {name!r}; known: {', '.join(sorted(FILTERS))}")
        built.append(_construct(f"filters.{name}", cls, options.get(name, {})))
    return built


def _weighers(section: dict[str, Any]) -> list[Weigher]:
    built = []
    for name, value in section.items():
        cls = WEIGHERS.get(name)
        if cls is None:
            raise ConfigError(f"unknown weigher {name!r}; known: {', '.join(sorted(WEIGHERS))}")
        if isinstance(value, int | float) and not isinstance(value, bool):
            built.append(_construct(f"weighers.{name}", cls, {"multiplier": float(value)}))
        elif isinstance(value, dict):
            built.append(_construct(f"weighers.{name}", cls, value))
        else:
            raise ConfigError(f"[weighers] {name} must be a multiplier or a table")
    return built


def _construct(where: str, cls: type[_T], options: Any) -> _T:
    if not isinstance(options, dict):
        raise ConfigError(f"[{where}] must be a table of options")
    try:
        return cls(**options)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"[{where}]: {error}") from None

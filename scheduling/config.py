"""Scheduler configuration from TOML, validated with clear errors.

Example::

    [scheduler]
    max_attempts = 3
    sample_percentage = 100      # weigh only this share of feasible providers
    sample_minimum = 100
    mode = "auto"                # full, bounded, or auto: bounded from bounded_from providers
    candidates = 64              # bounded: providers weighed, drawn from the feasibility index
    bounded_from = 20000
    levels = 64                  # bounded: how finely the index orders by free capacity
    ranked = 10                  # best candidates an answer records (0: none)
    wave = 0                     # requests ranked on one snapshot (0: a step's all)
    depth = 1                    # waves in flight: 2 ranks the next while the writers decide

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

    [scriptlet]                    # scheduling/scriptlet.py: the last word on each pick
    path = "placement.star"        # relative to this file; or source = "..."
    max_checks = 1000              # cancelled after this many of Starlark's loop checks
    max_candidates = 100           # the program sees the best this many

    [balance]                      # scheduling/balance.py: what `berth balance` proposes
    policy = "power_saving"        # or none, evenly_distributed, vm_evenly_distributed
    max_moves = 10                 # moves in one plan
    high_utilization = 80          # the rest are the policy's options
    low_utilization = 20
    resource_class = "VCPU"

A filter, weigher or balance policy may also be named by import path,
``package.module:ClassName``: an operator's own (see
:func:`scheduling.registry.resolve`).

A balance policy with a ranking of its own (power_saving stacks) sets the
weighers when ``[weighers]`` is not given, as oVirt's cluster policies pair
a balance unit with cost functions that agree with it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scheduling.balance import BALANCE_UNITS, Balancer
from scheduling.balancers.base import BalanceUnit
from scheduling.engine import Bounded, Engine, Sampling
from scheduling.filters.base import HostFilter
from scheduling.registry import DEFAULT_FILTERS, DEFAULT_WEIGHERS, FILTERS, WEIGHERS, resolve
from scheduling.scriptlet import Scriptlet, ScriptletError
from scheduling.weighers.base import Weigher

_T = TypeVar("_T")
_M = TypeVar("_M", bound=BaseModel)


class ConfigError(ValueError):
    """A configuration that cannot be used; the message says what to change."""


class SchedulerSection(BaseModel):
    """``[scheduler]``: the retry bound, sampling, bounded mode and the worker's waves."""

    model_config = ConfigDict(extra="forbid")
    max_attempts: int = Field(default=3, ge=1, le=100)
    sample_percentage: float = Field(default=100.0, gt=0.0, le=100.0)
    sample_minimum: int = Field(default=100, ge=1)
    mode: Literal["full", "bounded", "auto"] = "auto"
    candidates: int = Field(default=64, ge=1, le=100_000)
    bounded_from: int = Field(default=20_000, ge=0)
    levels: int = Field(default=64, ge=1, le=65_536)
    ranked: int = Field(default=10, ge=0, le=100)
    wave: int = Field(default=0, ge=0)
    depth: int = Field(default=1, ge=1, le=8)


class ScriptletSection(BaseModel):
    """``[scriptlet]``: the placement program, by path or by source."""

    model_config = ConfigDict(extra="forbid")
    path: str | None = None
    source: str | None = None
    max_checks: int = Field(default=1_000, ge=1, le=1_000_000)
    max_candidates: int = Field(default=100, ge=1, le=100_000)


class BalanceSection(BaseModel):
    """``[balance]``: the balance unit by name, with its options."""

    model_config = ConfigDict(extra="allow")  # the rest are the policy's options
    policy: str = "none"
    max_moves: int = Field(default=10, ge=0, le=100_000)


class FiltersSection(BaseModel):
    """``[filters]``: the enabled filters in order; the other keys are
    tables of one filter's options."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, dict[str, Any]]
    enabled: list[str] | None = None


class PolicyTables(BaseModel):
    """The configuration's tables as data (a policy's shape, before its
    units are loaded and its scriptlet compiled)."""

    model_config = ConfigDict(extra="forbid")
    # a table given is a table: null is not "absent"
    scheduler: SchedulerSection = Field(default_factory=SchedulerSection)
    filters: FiltersSection = Field(default_factory=FiltersSection)
    weighers: dict[str, float | dict[str, Any]] = Field(
        default_factory=dict, description="absent: Nova's default multipliers"
    )
    scriptlet: ScriptletSection = Field(default_factory=ScriptletSection)
    balance: BalanceSection = Field(default_factory=BalanceSection)


class SchedulerConfig:
    """The engine's filters, weighers and scriptlet, the worker's retry
    bound, and the balance policy."""

    def __init__(
        self,
        filters: list[HostFilter],
        weighers: list[Weigher],
        max_attempts: int,
        sampling: Sampling,
        scriptlet: Scriptlet | None = None,
        balance: BalanceUnit | None = None,
        max_moves: int = 10,
        bounded: Bounded | None = None,
        ranked: int = 10,
        wave: int = 0,
        depth: int = 1,
    ) -> None:
        self.filters = filters
        self.weighers = weighers
        self.max_attempts = max_attempts
        self.sampling = sampling
        self.scriptlet = scriptlet
        self.balance = balance
        self.max_moves = max_moves
        self.bounded = bounded or Bounded()
        self.ranked = ranked
        self.wave = wave
        """The scheduler worker's requests a wave (0: all of a step's)."""
        self.depth = depth
        """The scheduler worker's waves in flight (see :class:`Scheduler`):
        more than 1 pays only with its writers in another process."""

    def engine(self) -> Engine:
        return Engine(
            self.filters, self.weighers, self.sampling, self.scriptlet, self.bounded, self.ranked
        )

    def balancer(self) -> Balancer:
        return Balancer(self.balance, self.engine(), self.max_moves)

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
            return cls.from_mapping(data, base=Path(path).parent)
        except ConfigError as error:
            raise ConfigError(f"{path}: {error}") from None

    @classmethod
    def from_mapping(cls, data: dict[str, Any], base: Path = Path()) -> SchedulerConfig:
        """The configuration in ``data``; a scriptlet's ``path`` is relative to ``base``."""
        unknown = set(data) - {"scheduler", "filters", "weighers", "scriptlet", "balance"}
        if unknown:
            raise ConfigError(
                f"unknown sections {sorted(unknown)}; "
                "expected scheduler, filters, weighers, scriptlet, balance"
            )
        scheduler = _table("scheduler", SchedulerSection, data.get("scheduler", {}))
        balance, max_moves = _balance(data.get("balance", {}))
        ranking = balance.weighers if balance is not None else None
        return cls(
            filters=_filters(data.get("filters", {})),
            weighers=_weighers(data.get("weighers", ranking or DEFAULT_WEIGHERS)),
            max_attempts=scheduler.max_attempts,
            sampling=Sampling(scheduler.sample_percentage, scheduler.sample_minimum),
            scriptlet=_scriptlet(data.get("scriptlet"), base),
            balance=balance,
            max_moves=max_moves,
            bounded=Bounded(
                scheduler.mode, scheduler.candidates, scheduler.bounded_from, scheduler.levels
            ),
            ranked=scheduler.ranked,
            wave=scheduler.wave,
            depth=scheduler.depth,
        )


def _summary(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}"
        for e in error.errors(include_url=False)
    )


def _table(where: str, model: type[_M], section: Any) -> _M:
    """``section`` validated as ``model``, or a :class:`ConfigError` naming it."""
    if not isinstance(section, dict):
        raise ConfigError(f"[{where}] must be a table")
    try:
        return model.model_validate(section)
    except ValidationError as error:
        raise ConfigError(f"[{where}]: {_summary(error)}") from None


def _scriptlet(section: Any, base: Path) -> Scriptlet | None:
    if section is None:
        return None
    given = _table("scriptlet", ScriptletSection, section)
    if (given.path is None) == (given.source is None):
        raise ConfigError("[scriptlet] needs either path or source")
    name, source = "placement.star", given.source
    if source is None:
        file = base / str(given.path)
        try:
            name, source = str(file), file.read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError(f"[scriptlet] path: {error}") from None
    try:
        return Scriptlet(source, name, given.max_checks, given.max_candidates)
    except ScriptletError as error:
        raise ConfigError(f"[scriptlet]: {error}") from None


def _balance(section: Any) -> tuple[BalanceUnit | None, int]:
    given = _table("balance", BalanceSection, section)
    options = dict(given.model_extra or {})
    if given.policy == "none":
        if options:
            raise ConfigError(f"[balance] policy none takes no options, not {sorted(options)}")
        return None, given.max_moves
    cls = _resolve(given.policy, BALANCE_UNITS, BalanceUnit, "policy", "[balance] ", ("none",))
    return _construct("balance", cls, options), given.max_moves


def _filters(section: Any) -> list[HostFilter]:
    if not isinstance(section, dict):
        raise ConfigError("[filters] must be a table")
    names = section.get("enabled", list(DEFAULT_FILTERS))
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError("[filters] enabled must be a list of filter names")
    options = {k: v for k, v in section.items() if k != "enabled"}
    for name in options:
        if name not in names:
            raise ConfigError(f"[filters.{name}] configures a filter that is not enabled")
    built = []
    for name in names:
        cls = _resolve(name, FILTERS, HostFilter, "filter")
        built.append(_construct(f"filters.{name}", cls, options.get(name, {})))
    return built


def _weighers(section: Any) -> list[Weigher]:
    if not isinstance(section, dict):
        raise ConfigError("[weighers] must be a table")
    built = []
    for name, value in section.items():
        cls = _resolve(name, WEIGHERS, Weigher, "weigher")
        if isinstance(value, int | float) and not isinstance(value, bool):
            built.append(_construct(f"weighers.{name}", cls, {"multiplier": float(value)}))
        elif isinstance(value, dict):
            built.append(_construct(f"weighers.{name}", cls, value))
        else:
            raise ConfigError(f"[weighers] {name} must be a multiplier or a table")
    return built


def _resolve(
    name: str,
    known: dict[str, type[_T]],
    port: type[Any],
    what: str,
    where: str = "",
    also: tuple[str, ...] = (),
) -> type[_T]:
    try:
        return resolve(name, known, port, what, also)
    except ValueError as error:
        raise ConfigError(f"{where}{error}") from None


def _construct(where: str, cls: type[_T], options: Any) -> _T:
    if not isinstance(options, dict):
        raise ConfigError(f"[{where}] must be a table of options")
    try:
        return cls(**options)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"[{where}]: {error}") from None

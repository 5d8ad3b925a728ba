"""Scheduler configuration from TOML: what it builds and what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduling.config import ConfigError, SchedulerConfig
from scheduling.registry import DEFAULT_FILTERS, DEFAULT_WEIGHERS


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scheduler.toml"
    path.write_text(text)
    return path


def test_the_default_is_nova_like() -> None:
    config = SchedulerConfig.default()
    assert [f.name for f in config.filters] == list(DEFAULT_FILTERS)
    assert {w.name: w.multiplier for w in config.weighers} == DEFAULT_WEIGHERS
    assert config.max_attempts == 3
    # a step's requests in one wave, waited for: the worker's writers may share its GIL
    assert (config.wave, config.depth) == (0, 1)


def test_a_file_sets_filters_options_weighers_and_sampling(tmp_path: Path) -> None:
    config = SchedulerConfig.load(
        write(
            tmp_path,
            """
[scheduler]
max_attempts = 5
sample_percentage = 10
sample_minimum = 50
mode = "bounded"
candidates = 16
bounded_from = 1000
levels = 64
wave = 1000
depth = 2

[filters]
enabled = ["ComputeFilter", "ResourceFilter", "NumInstancesFilter"]

[filters.NumInstancesFilter]
max_instances_per_host = 7

[weighers]
RAMWeigher = -1.0

[weighers.MetricsWeigher]
multiplier = 2.0
weight_setting = "cpu.percent=-1.0"
""",
        )
    )
    assert [f.name for f in config.filters] == [
        "ComputeFilter",
        "ResourceFilter",
        "NumInstancesFilter",
    ]
    assert config.filters[2].max_instances_per_host == 7  # type: ignore[attr-defined]
    assert [(w.name, w.multiplier) for w in config.weighers] == [
        ("RAMWeigher", -1.0),
        ("MetricsWeigher", 2.0),
    ]
    assert config.max_attempts == 5
    assert (config.wave, config.depth) == (1000, 2)
    assert config.sampling.size(1000) == 100
    engine = config.engine()
    assert engine.each_pick  # the engine builds
    assert (engine.bounded.mode, engine.bounded.candidates) == ("bounded", 16)
    assert (engine.bounded.from_providers, engine.bounded.levels) == (1000, 64)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[filters]\nenabled = ['NoSuchFilter']", "unknown filter 'NoSuchFilter'"),
        ("[weighers]\nNoSuchWeigher = 1.0", "unknown weigher 'NoSuchWeigher'"),
        ("[filters]\nenabled = ['ComputeFilter']\n[filters.IoOpsFilter]\nx = 1", "not enabled"),
        (
            "[filters]\nenabled = ['NumInstancesFilter']\n[filters.NumInstancesFilter]\nbogus = 1",
            "[filters.NumInstancesFilter]",
        ),
        ("[scheduler]\nmax_attempts = 0", "max_attempts"),
        ("[scheduler]\nretries = 2", "retries"),
        ("[scheduler]\nmode = 'sampled'", "mode"),
        ("[scheduler]\ncandidates = 0", "candidates"),
        ("[scheduler]\ndepth = 0", "depth"),
        ("[scheduler]\nwave = -1", "wave"),
        ("[placement]\nx = 1", "unknown sections"),
        ("[weighers]\nRAMWeigher = 'high'", "multiplier or a table"),
        ("[weighers.MetricsWeigher]\nweight_setting = 'cpu'", "[weighers.MetricsWeigher]"),
        ("[filters\n", "scheduler.toml"),
    ],
)
def test_bad_configuration_is_refused_with_a_clear_error(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        SchedulerConfig.load(write(tmp_path, text))
    assert message in str(error.value)

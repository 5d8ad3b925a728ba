"""bench.end_to_end's sustained scenario, as bench.scale's writers part runs
it: the scheduler with waves in flight beside a ``berth projector`` process."""

from __future__ import annotations

from bench.end_to_end import sustained


def test_waves_in_flight_beside_a_projector_process_place_every_request_once() -> None:
    result = sustained(200, 600, 100.0, False, wave=100, writer_processes=1, depth=2)
    assert (result["placed"], result["failed"]) == (600, 0)
    assert result["overcommitted_providers"] == 0
    # each claim counted the waves still in flight: none lost to another
    assert result["attempts"] == 600
    assert result["waves"] == 6
    waits = result["wave_decided_ms"]
    assert 0 < waits["p50"] <= waits["p99"] <= waits["max"]
    assert result["projectors_cpu_s"] > 0

"""OpenStack Placement's own API tests (the gabbi files shipped in
``openstack-placement``) against ``berth serve --placement-api``, each file
on a server started empty: a ratchet on how many pass. Raise FLOOR as the
API grows; it fails if a change makes fewer pass."""

from __future__ import annotations

import pytest

from bench.placement_gabbits import JOBS, run, totals

FLOOR = 1315
"""Tests that passed when the floor was last raised (of 1,316; a file that
needs what the runner cannot give it would be skipped whole and counted
as skipped, never as passed)."""


@pytest.mark.timeout(1200)
def test_placement_gabbits_pass_at_least_the_floor() -> None:
    results = run([], JOBS)
    sums = totals(results)
    assert sums["tests"] == sums["passed"] + sums["failed"] + sums["skipped"]
    assert sums["files"] == 79
    assert sums["passed"] >= FLOOR, (
        f"{sums['passed']} passed, below the floor of {FLOOR}: "
        + "; ".join(f"{r.name}: {', '.join(r.failures)}" for r in results if r.failures)
    )


def test_one_file_runs_against_a_real_server() -> None:
    """The runner can fail: a file's tests are counted by what the server answers."""
    [result] = run(["microversion"])
    assert result.tests == 8
    assert result.passed + result.failed == 8
    assert result.passed >= 6

"""The ranking's best candidates and their numbers, by the C kernel where
it is built and by numpy: the same rows and the same bits as a stable sort
of the negated scores, whatever the scores (ties, NaN, infinities, signed
zeros) and whatever the arrays (the kernel reads contiguous float64 and
int64; numpy takes the others)."""

from __future__ import annotations

import binascii
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from berth.compile import compiled
from scheduling.model import FloatArray, IntArray
from scheduling.ranking import (
    KERNEL_SOURCE,
    StaleKernel,
    native,
    ranked,
    ranked_by_numpy,
    refuse_stale,
)
from schemas.ranked import strings
from schemas.ranked import text as ranked_text
from tests.test_compiled import _project_copy, _python_in

_SCORES = st.sampled_from([0.0, -0.0, 0.25, 0.5, 1.0, -1.0, np.inf, -np.inf, np.nan])


def _expected(
    scores: FloatArray, rows: IntArray, parts: tuple[FloatArray, ...], count: int
) -> tuple[list[int], bytes]:
    best = np.argsort(-scores, kind="stable")[:count]
    numbers = np.concatenate([scores[best], *[part[best] for part in parts]])
    return rows[best].tolist(), numbers.tobytes()


@given(
    scores=st.lists(_SCORES | st.floats(allow_nan=True), min_size=1, max_size=1500),
    count=st.integers(min_value=0, max_value=40),
    weighers=st.integers(min_value=0, max_value=5),
)
def test_the_best_are_a_stable_sort_cut_short(
    scores: list[float], count: int, weighers: int
) -> None:
    values = np.array(scores, dtype=np.float64)
    rows = np.arange(len(values), dtype=np.int64) * 7 + 3
    rng = np.random.default_rng(len(values))
    parts = tuple(rng.random(len(values)) for _ in range(weighers))
    expected = _expected(values, rows, parts, count)
    assert ranked(values, rows, parts, count) == expected
    assert ranked_by_numpy(values, rows, parts, count) == expected


def test_arrays_the_kernel_does_not_read_are_ranked_the_same() -> None:
    rng = np.random.default_rng(5)
    scores = rng.random(2000)
    rows = np.arange(2000, dtype=np.int64)
    parts = (rng.random(2000), rng.random(2000))
    expected = _expected(scores, rows, parts, 10)
    strided = np.repeat(scores, 2)[::2]  # the same scores, not contiguous
    assert ranked(strided, rows, parts, 10) == expected
    assert ranked(scores, rows.astype(np.int32), parts, 10) == expected
    wide = np.stack(parts, axis=1)  # each part a column: strided
    assert ranked(scores, rows, (wide[:, 0], wide[:, 1]), 10) == expected


_IDS = st.text(max_size=12) | st.from_regex(r"[a-z0-9-]{1,36}", fullmatch=True)


@given(
    ids=st.lists(_IDS, max_size=12),
    names=st.lists(st.text(max_size=20), max_size=5),
    numbers=st.binary(max_size=200),
    multipliers=st.binary(max_size=40),
)
def test_the_kernel_writes_a_ranking_s_text_as_python_does(
    ids: list[str], names: list[str], numbers: bytes, multipliers: bytes
) -> None:
    """The same text, base64 across the numbers' end included; None (left
    to Python) exactly when an id needs an escape."""
    from scheduling._ranked import text  # built by make, as CI runs it

    written = strings(names)
    encoded = binascii.b2a_base64(numbers + multipliers, newline=False).decode("ascii")
    expected = ranked_text(ids, written, encoded)
    got = text(tuple(ids), written, numbers, multipliers)
    if got is None:
        assert json.dumps(ids) != '["' + '", "'.join(ids) + '"]'
    else:
        assert got == expected
        assert json.loads(got)["providers"] == ids


def test_the_kernel_ranks_wherever_the_core_is_compiled() -> None:
    assert native() == compiled()


def test_a_kernel_built_from_another_source_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "_ranked.c"
    shutil.copy(KERNEL_SOURCE, source)
    refuse_stale(hashlib.sha256(KERNEL_SOURCE.read_bytes()).hexdigest(), source)
    with source.open("a") as f:
        f.write("/* changed */\n")
    with pytest.raises(StaleKernel, match=r"_ranked\.c changed since compiled"):
        refuse_stale(hashlib.sha256(KERNEL_SOURCE.read_bytes()).hexdigest(), source)


def test_importing_a_stale_kernel_fails(tmp_path: Path) -> None:
    """A built kernel whose source changed after: the scheduler does not start."""
    root = _project_copy(tmp_path / "project", compiled_too=True)
    with (root / "scheduling" / "_ranked.c").open("a") as f:
        f.write("/* changed */\n")
    run = _python_in(root, "-c", "import scheduling.ranking")
    if native():
        assert run.returncode == 1
        assert "StaleKernel: _ranked.c changed since compiled" in run.stderr
    else:  # nothing built to refuse: numpy ranks
        assert run.returncode == 0, run.stderr

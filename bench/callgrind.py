"""Callgrind's client requests from Python, to count one step's instructions.

Under ``valgrind --tool=callgrind --instr-atstart=no``, ``Marks`` starts
the instrumentation where the measured part begins, dumps the counts
after each step and stops it after the last: one ``callgrind.out.PID.N`` file per step, whose
``totals:`` line is that step's instructions (``totals`` reads them back).
Instruction counts do not drift with the machine's load as wall and CPU
times do. The macros are C, so a few lines of C are compiled on first use
(``cc`` and valgrind's headers); outside valgrind they do nothing.
"""

from __future__ import annotations

import ctypes
import glob
import os
import subprocess
import tempfile

_SOURCE = r"""
#include <valgrind/callgrind.h>
int berth_cg_running(void) { return RUNNING_ON_VALGRIND; }
void berth_cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void berth_cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void berth_cg_dump(const char *what) { CALLGRIND_DUMP_STATS_AT(what); }
"""


class Marks:
    """Brackets steps for callgrind; inert outside valgrind."""

    def __init__(self) -> None:
        folder = tempfile.mkdtemp(prefix="berth-cg-")
        source, library = os.path.join(folder, "cg.c"), os.path.join(folder, "cg.so")
        with open(source, "w") as f:
            f.write(_SOURCE)
        subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", library, source], check=True)
        self._lib = ctypes.CDLL(library)
        self.running = bool(self._lib.berth_cg_running())

    def start(self) -> None:
        self._lib.berth_cg_start()

    def stop(self) -> None:
        self._lib.berth_cg_stop()

    def zero(self) -> None:
        """Set aside what was counted since the last dump (between steps), as
        a dump named ``between`` (a dump zeroes the counts; callgrind's own
        zero request does not reliably)."""
        self._lib.berth_cg_dump(b"between")

    def dump(self, what: str) -> None:
        """Write what was counted since the last dump or zero, as ``what``."""
        self._lib.berth_cg_dump(what.encode())


def totals(pid: int, folder: str = ".") -> dict[str, int]:
    """Each dump's description -> its instructions, from callgrind's files
    (summed over the dumps of a step measured several times)."""
    out: dict[str, int] = {}
    for path in glob.glob(os.path.join(folder, f"callgrind.out.{pid}.*")):
        what, total = "", 0
        with open(path) as f:
            for line in f:
                if line.startswith("desc: Trigger: Client Request: "):
                    what = line.split(": ", 3)[3].strip()
                elif line.startswith("totals:"):
                    total = int(line.split()[1])
        if what:
            out[what] = out.get(what, 0) + total
    return out

"""Waking a reader when a partition file changes, in this process or another.

On Linux an inotify instance watches the partition files for writes
(``IN_MODIFY``): an appender's ``pwrite`` rings it, whichever process made
it. The bell rings when the bytes are written, before they are fsynced; a
reader that wakes then indexes the file under the shared lock, which waits
for the appender's fsync, so it still never reads what is not durable.
Elsewhere, or if inotify cannot be had, :class:`Doorbell` falls back to
short naps that double up to a bound, which only costs latency.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import threading
import time
from pathlib import Path

__all__ = ["Doorbell"]

_IN_MODIFY = 0x00000002
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_NAP_FIRST_S = 0.001
_NAP_MAX_S = 0.02


def _libc() -> ctypes.CDLL | None:
    if not hasattr(select, "poll"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.inotify_init1  # noqa: B018 - the symbol exists only where inotify does
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


class Doorbell:
    """One thread's bell for a set of files: :meth:`watch` them, check what
    you wait for, then :meth:`wait`. A write after ``watch`` always wakes
    the wait; an earlier one may too (check again, and wait again if need be).
    Not shared between threads: each waiting thread makes its own."""

    def __init__(self) -> None:
        self._fd = -1
        self._watched: dict[Path, int] = {}
        self._nap = _NAP_FIRST_S
        if _LIBC is not None:
            fd = _LIBC.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
            if fd >= 0:
                self._fd = fd
                self._poller = select.poll()
                self._poller.register(fd, select.POLLIN)

    @property
    def rings(self) -> bool:
        """Whether writes wake a wait (inotify), rather than naps ending it."""
        return self._fd >= 0

    def watch(self, paths: list[Path]) -> None:
        if self._fd < 0 or _LIBC is None:
            return
        for path in paths:
            if path in self._watched:
                continue
            wd = _LIBC.inotify_add_watch(self._fd, os.fsencode(path), _IN_MODIFY)
            if wd < 0:
                code = ctypes.get_errno()
                raise OSError(code, f"inotify_add_watch: {os.strerror(code)}", str(path))
            self._watched[path] = wd

    def wait(self, timeout_s: float) -> None:
        """Until a watched file is written or ``timeout_s`` passes; what
        woke it is drained, so the next wait waits for a new write."""
        if timeout_s <= 0:
            return
        if self._fd < 0:
            time.sleep(min(timeout_s, self._nap))
            self._nap = min(self._nap * 2, _NAP_MAX_S)
            return
        if self._poller.poll(timeout_s * 1000):
            self._drain()

    def rang(self) -> None:
        """Something arrived: the next fallback nap starts short again."""
        self._nap = _NAP_FIRST_S

    def _drain(self) -> None:
        while True:
            try:
                if not os.read(self._fd, 65536):
                    return
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    return
                raise

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._watched.clear()


class Doorbells:
    """A :class:`Doorbell` per thread, closed together."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._all: list[Doorbell] = []
        self._lock = threading.Lock()

    def mine(self) -> Doorbell:
        bell: Doorbell | None = getattr(self._local, "bell", None)
        if bell is None:
            bell = self._local.bell = Doorbell()
            with self._lock:
                self._all.append(bell)
        return bell

    def close(self) -> None:
        with self._lock:
            for bell in self._all:
                bell.close()
            self._all.clear()

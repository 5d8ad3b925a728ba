"""A process stopped inside a commit, as SIGSTOP or a stalled machine would
leave it: the first commit on an engine holds its transaction, idle, until
the test resumes it, while the call that made it runs in a thread of its own."""

from __future__ import annotations

import threading
from collections.abc import Callable

from sqlalchemy import Engine, event


class StoppedInCommit:
    """Runs ``call`` in a thread; its first commit on ``engine`` waits,
    its transaction open, until :meth:`resume`."""

    def __init__(self, engine: Engine, call: Callable[[], object]) -> None:
        self.stopped = threading.Event()
        self._resumed = threading.Event()
        self.failures: list[BaseException] = []
        event.listen(engine, "commit", self._stop_once)
        self._thread = threading.Thread(target=self._run, args=(call,))
        self._thread.start()
        assert self.stopped.wait(timeout=10), "the call never reached a commit"

    def _stop_once(self, conn: object) -> None:
        if not self.stopped.is_set():
            self.stopped.set()
            self._resumed.wait(timeout=30)

    def _run(self, call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as error:
            self.failures.append(error)

    def resume(self) -> list[type[BaseException]]:
        """Let the stopped commit go on; the kinds of what the call raised."""
        self._resumed.set()
        self._thread.join(timeout=10)
        return [type(f) for f in self.failures]

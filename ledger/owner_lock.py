"""A partition's owner as an exclusive lock on a file: held until the file
is closed or its process dies, which the kernel sees to (``flock``)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ledger.log import OwnedElsewhere


def lock_owner(path: Path, topic: str, partition: int) -> int:
    """The open, locked ``path`` (created if missing), or
    :class:`OwnedElsewhere` if another open file description holds it."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise OwnedElsewhere(topic, partition) from exc
    return fd

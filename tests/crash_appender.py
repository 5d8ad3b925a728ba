"""Appends to an embedded log until killed, reporting what was acknowledged.

Run as ``python -m tests.crash_appender DATA_DIR SEED``. Each stdout line,
``partition offset digest``, is written only after the ``append`` holding that
record has returned, so every complete line is a durability promise that the
crash test checks after killing this process at a random moment.
"""

from __future__ import annotations

import hashlib
import random
import sys

from ledger.embedded import EmbeddedLog
from ledger.log import Append

TOPIC = "crash"
PARTITIONS = 3
# Mostly small records, with large ones to widen the window a kill can land in.
_VALUE_SIZES = (0, 1, 40, 300, 300, 300, 4000, 200_000)


def record_digest(key: bytes, value: bytes) -> str:
    return hashlib.sha256(len(key).to_bytes(4, "little") + key + value).hexdigest()


def main(argv: list[str]) -> int:
    data_dir, seed = argv[1], int(argv[2])
    rng = random.Random(seed)
    out = sys.stdout
    with EmbeddedLog(data_dir) as log:
        log.create_topic(TOPIC, PARTITIONS)
        serial = 0
        while True:
            batch = []
            for _ in range(rng.randint(1, 40)):
                key = f"{seed}-{serial}".encode() if serial % 7 else b""
                serial += 1
                value = rng.randbytes(rng.choice(_VALUE_SIZES))
                batch.append(Append(rng.randrange(PARTITIONS), key, value))
            offsets = log.append(TOPIC, batch)
            out.write(
                "".join(
                    f"{a.partition} {o} {record_digest(a.key, a.value)}\n"
                    for a, o in zip(batch, offsets, strict=True)
                )
            )
            out.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv))

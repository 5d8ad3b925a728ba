"""What the test broker (tansu) does not do that faust-streaming can ask
for, kept as tests: should tansu learn it, they fail, and the workaround
in docs/operations-kafka-workers.md can go.

``berth worker`` needs none of it: its exactly-once effect is the view's
offsets, committed with the changes, not Kafka transactions."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, UnknownError


async def _start_producer(bootstrap: str, **options: object) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=5000, **options)
    try:
        await asyncio.wait_for(producer.start(), timeout=30)
    finally:
        await producer.stop()


@pytest.mark.parametrize(
    "options",
    [
        # faust's processing_guarantee="exactly_once": a transactional producer
        {"transactional_id": "berth-gap-probe"},
        # an idempotent producer, which faust leaves off by default
        {"enable_idempotence": True},
    ],
    ids=["transactional", "idempotent"],
)
def test_tansu_answers_init_producer_id_with_an_unknown_error(
    kafka_bootstrap: str, options: dict[str, object]
) -> None:
    """InitProducerId, the request such a producer sends first, is answered
    with error code -1 (UNKNOWN_SERVER_ERROR), so it cannot start."""
    with pytest.raises(UnknownError) as refused:
        asyncio.run(_start_producer(kafka_bootstrap, **options))
    assert refused.value.errno == -1


def test_a_plain_producer_starts(kafka_bootstrap: str) -> None:
    """The control: the broker is there, and the producer berth worker's
    faust app uses (acks=all, neither transactional nor idempotent) starts."""
    try:
        asyncio.run(_start_producer(kafka_bootstrap, acks="all"))
    except KafkaError as error:  # pragma: no cover - the failure message is the point
        pytest.fail(f"a plain producer did not start: {error!r}")

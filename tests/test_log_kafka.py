"""The log contract against a Kafka-protocol broker (tansu unless BERTH_TEST_KAFKA is set)."""

from __future__ import annotations

import threading

import pytest

from ledger.kafka import KafkaLog
from ledger.log import Append, Log, LogError
from tests.contracts.log_contract import LogContract
from tests.kafka_broker import free_port


class TestKafkaLog(LogContract):
    @pytest.fixture(autouse=True)
    def _broker(self, kafka_bootstrap: str) -> None:
        self.bootstrap = kafka_bootstrap

    def make_log(self) -> Log:
        return KafkaLog(self.bootstrap, client_id="berth-test", request_timeout=10.0)


def test_unreachable_broker_is_a_log_error() -> None:
    with pytest.raises(LogError):
        KafkaLog(f"127.0.0.1:{free_port()}", request_timeout=1.0)


def test_a_long_wait_does_not_hold_back_another_threads_wait(kafka_bootstrap: str) -> None:
    """An API thread waits long for a decision while the writer's loop in the
    same process waits for the record it must decide: the writer's wait ends
    as soon as its record is there, not when the other wait gives up."""
    log = KafkaLog(kafka_bootstrap, client_id="berth-test", request_timeout=10.0)
    try:
        decisions, events = TestKafkaLog.new_topic(log), TestKafkaLog.new_topic(log)
        long_wait: dict[str, bool] = {}
        waiting = threading.Thread(
            target=lambda: long_wait.update(got=log.wait({decisions: {0: 0}}, 60.0))
        )
        waiting.start()
        log.append(events, [Append(0, b"k", b"v")])
        assert log.wait({events: {0: 0}}, 60.0)
        assert waiting.is_alive(), "the writer's wait ended only when the other one did"
        log.append(decisions, [Append(0, b"k", b"v")])
        waiting.join(timeout=60)
        assert long_wait == {"got": True}
    finally:
        log.close()

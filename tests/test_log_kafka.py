"""The log contract against a Kafka-protocol broker (tansu unless BERTH_TEST_KAFKA is set)."""

from __future__ import annotations

import pytest

from ledger.kafka import KafkaLog
from ledger.log import Log, LogError
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

"""Reading Prometheus metrics back in tests, with the Prometheus client's
own parser (so that a malformed exposition fails the test)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample by name and sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    return {
        dict(labels)[label]: value for (n, labels), value in samples.items() if n == name and labels
    }

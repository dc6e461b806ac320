"""Reading a Prometheus endpoint from the tests: a free port to give it, its page, its
sample values."""

import socket
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def values(body: str) -> dict[str, float]:
    """Sample values by name, labelled samples summed."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out

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


def scrape_unix(path: str) -> str:
    """The page served on the Unix socket at `path` (HTTP/1.0: the server closes when done)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(path)
        s.sendall(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        reply = b"".join(iter(lambda: s.recv(65536), b""))
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200"), head
    return body.decode()


def families(body: str) -> dict:
    """The page's metric families by name (a counter's without `_total`)."""
    return {f.name: f for f in text_string_to_metric_families(body)}

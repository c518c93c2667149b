"""network.reachable answers within its timeout: yes for a listening port, no for a closed port,
a name that does not resolve, or a connection attempt that hangs."""

from __future__ import annotations

import socket
import time

import pytest

from isotune.tracking import network
from isotune.tracking.network import reachable
from tests.helpers.network import closed_port_url


@pytest.fixture
def listening_url():
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def test_a_listening_port_is_reachable(listening_url):
    assert reachable(listening_url)


@pytest.mark.parametrize(
    "url", ["closed port", "https://no-such-host.invalid", "https://127.0.0.1:notaport", "ftp://x"]
)
def test_a_closed_port_or_unknown_name_is_not_reachable_within_the_timeout(url):
    url = closed_port_url() if url == "closed port" else url
    start = time.monotonic()
    assert not reachable(url, timeout=2.0)
    assert time.monotonic() - start < 2.5


def test_a_hanging_attempt_counts_as_unreachable_once_the_timeout_passes(monkeypatch):
    def hang(*args, **kwargs):  # a resolver or a firewall that never answers
        time.sleep(10)

    monkeypatch.setattr(network.socket, "create_connection", hang)
    start = time.monotonic()
    assert not reachable("https://example.org", timeout=0.5)
    assert time.monotonic() - start < 2


def test_behind_a_proxy_the_proxy_is_what_must_answer(monkeypatch, listening_url):
    unreachable = closed_port_url("https")
    monkeypatch.setenv("HTTPS_PROXY", listening_url)
    assert reachable(unreachable)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert not reachable(unreachable)

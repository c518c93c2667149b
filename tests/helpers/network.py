"""Local addresses with known answers, so tests of unreachable servers need no network."""

from __future__ import annotations

import socket


def closed_port_url(scheme: str = "http") -> str:
    """The URL of a local port that nothing listens on: the OS hands it out, then it is closed,
    so a connection is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"{scheme}://127.0.0.1:{port}"

"""Whether a server can be reached, answered within a few seconds: wandb and huggingface_hub retry
an unreachable one for minutes, printing every retry, where a run could go offline at once.
"""

from __future__ import annotations

import socket
import threading
import urllib.request
from urllib.parse import urlsplit

DEFAULT_PORTS = {"https": 443, "http": 80}


def reachable(url: str, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to ``url``'s host and port (443 for https, 80 for http, or the port
    the URL names) opens within ``timeout`` seconds, through the proxy configured for the URL where
    there is one (``HTTPS_PROXY``, ``HTTP_PROXY``, ``NO_PROXY``). Name resolution counts towards the
    deadline: ``getaddrinfo`` takes no timeout and can block for tens of seconds, so the attempt
    runs in a daemon thread left behind when the deadline passes."""
    parts = urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and parts.hostname and not urllib.request.proxy_bypass(parts.hostname):
        parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    try:
        address = (parts.hostname, parts.port or DEFAULT_PORTS[parts.scheme])
    except (KeyError, ValueError):  # no scheme we know, or a port that is not a number
        return False
    if not address[0]:
        return False
    connected = threading.Event()

    def connect() -> None:
        try:
            with socket.create_connection(address, timeout=timeout):
                connected.set()
        except OSError:
            pass

    attempt = threading.Thread(target=connect, name=f"reachable {url}", daemon=True)
    attempt.start()
    attempt.join(timeout)
    return connected.is_set()

"""A free TCP port on the loopback interface, for a server this process is about to start.

The embedded servers choose one on their first start and keep it across
restarts, so their clients' addresses stay valid; tests use it for servers
they start themselves.
"""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

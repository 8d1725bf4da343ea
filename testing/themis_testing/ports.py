"""Ports for servers a test starts, chosen where no outgoing connection can take them.

A port found free by binding to port 0 comes from the kernel's ephemeral range, the same range
outgoing connections take their source ports from: between the test choosing it and the server
binding it, any connection on the machine may take it (a shard then exits with "address
already in use"). Ports below that range are only ever taken by a bind.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: How far below the ephemeral range ports are chosen.
SPAN = 12_000


class PortPicker:
    """Hands out ports below the ephemeral range, never the same one twice in one process."""

    def __init__(self, ephemeral_low: int | None = None, rng: random.Random | None = None) -> None:
        self.low = ephemeral_low if ephemeral_low is not None else _ephemeral_low()
        self.rng = rng or random.Random()
        self.given: set[int] = set()

    def __call__(self) -> int:
        first = max(1024, self.low - SPAN)
        for _ in range(500):
            port = self.rng.randrange(first, self.low)
            if port not in self.given and _bindable(port):
                self.given.add(port)
                return port
        with socket.socket() as s:  # the range below is full: the old way
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


#: The test session's picker.
free_port = PortPicker()

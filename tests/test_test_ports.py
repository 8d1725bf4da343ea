"""Spec: the ports tests start servers on are chosen below the kernel's ephemeral range, so no
outgoing connection on the machine can take one between its choice and the server's bind (a
shard then exited with "address already in use" in CI)."""

from __future__ import annotations

import random
import socket

from themis_testing.ports import SPAN, PortPicker


def test_ports_come_from_below_the_ephemeral_range_never_twice_and_bindable() -> None:
    pick = PortPicker(ephemeral_low=32768, rng=random.Random(7))
    ports = [pick() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(32768 - SPAN <= p < 32768 for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))


def test_a_port_someone_listens_on_is_never_handed_out() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        pick = PortPicker(ephemeral_low=port + 1, rng=random.Random(1))
        pick.given.update(range(max(1024, port + 1 - SPAN), port))  # only the taken one is left
        assert pick() != port

"""What the parts of the cluster service see of each other: small read-only views.

The plan a shard runs changes at run time (the operator rewrites the plan file), so a part
never keeps a ``Topology`` or ``ClusterSettings`` of its own: it reads the current one from a
``TopologySource`` / ``SettingsSource`` each time. ``LivePlan`` is the one cell that holds
them; only the ``PlanWatcher`` swaps it. The LLM runtime starts after the cluster service is
built, hence ``RuntimeSlot``: parts read ``.runtime`` when they act, None until it is up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from ..settings import ClusterSettings
from .owners import Topology


class TopologySource(Protocol):
    @property
    def topology(self) -> Topology: ...


class SettingsSource(Protocol):
    @property
    def settings(self) -> ClusterSettings: ...


class RuntimeSource(Protocol):
    @property
    def runtime(self) -> Any: ...


class LivePlan:
    """The topology and settings in force now (a ``TopologySource`` and a ``SettingsSource``).

    ``next_change`` is resolved when a new topology is swapped in: a write waiting on an owner
    that the new plan fenced stops waiting for it."""

    def __init__(self, topology: Topology, settings: ClusterSettings) -> None:
        self._topology = topology
        self._next: asyncio.Future[None] | None = None
        self.settings = settings

    @property
    def topology(self) -> Topology:
        return self._topology

    @topology.setter
    def topology(self, topology: Topology) -> None:
        self._topology = topology
        woken, self._next = self._next, None
        if woken is not None and not woken.done():
            woken.set_result(None)

    def next_change(self) -> asyncio.Future[None]:
        """Resolved once the topology has been replaced: one future shared by every waiter of
        this topology (a write watches it beside its delivery; nothing to create per write)."""
        loop = asyncio.get_running_loop()
        if self._next is None or self._next.get_loop() is not loop:
            self._next = loop.create_future()
        return self._next

    def url(self, shard_id: str) -> str:
        """A member's base URL in the current plan (KeyError when it is not a member)."""
        return self.topology.url(shard_id)


class ChangingTopology(TopologySource, Protocol):
    def next_change(self) -> asyncio.Future[None]: ...


class InSyncWatch:
    """Calls ``on_fenced`` once a newer topology takes ``peer`` out of the in-sync set.

    A coordinated write watches each owner it waits for, so a watch is one done-callback on
    the plan's shared change future (re-armed on each change that leaves ``peer`` in sync):
    no task and no extra turn of the event loop per write. ``stop`` ends it."""

    __slots__ = ("_change", "_on_fenced", "_peer", "_source")

    def __init__(self, source: ChangingTopology, peer: str, on_fenced: Callable[[], None]) -> None:
        self._source = source
        self._peer = peer
        self._on_fenced = on_fenced
        self._change = source.next_change()
        self._change.add_done_callback(self._changed)

    def _changed(self, _: asyncio.Future[None]) -> None:
        if self._peer in self._source.topology.plan.out_of_sync:
            self._on_fenced()
            return
        self._change = self._source.next_change()
        self._change.add_done_callback(self._changed)

    def stop(self) -> None:
        self._change.remove_done_callback(self._changed)


class RuntimeSlot:
    """Holds the shard's LLM runtime once the app started it (None without an LLM)."""

    def __init__(self, runtime: Any = None) -> None:
        self.runtime = runtime

"""The nemesis: a seeded schedule of faults (pure) and the thread that injects them.

One fault at a time (a 3-shard RAID1 cluster tolerates one), each for a few seconds, with a
few seconds of calm between them:

* ``kill``: ``kill -9`` a shard, restart it after the fault's duration (same data directory);
* ``crash``: ``kill -9`` a shard for good (at most once a run; restarted only when the run
  heals): the plan authority fails its keys over and the rest of the run has two shards;
* ``pause``: ``SIGSTOP`` a shard, ``SIGCONT`` it after the duration;
* ``partition``: cut links of the :class:`~.proxy.Mesh` — one shard isolated, one pair split
  both ways (the third shard still sees both), or one direction only — by dropping or
  resetting.

No clock skew: versions order a key's writes, and the hybrid clock only breaks ties between
records of one version, which with fencing one coordinator mints (its clock never goes back).
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .proxy import Mesh, Mode

KINDS = ("kill", "pause", "partition", "crash")
SHAPES = ("isolate", "split_pair", "one_way")


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the start of the run
    kind: str
    target: str
    duration: float
    shape: str = ""  # partitions: which links
    mode: str = ""  # partitions: drop | reset
    pairs: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        what = f"{self.kind} {self.target}"
        if self.kind == "partition":
            what += f" {self.shape}/{self.mode} {sorted(self.pairs)}"
        return f"t={self.at:5.1f}s {what} for {self.duration:.1f}s"


def partition_pairs(
    shape: str, target: str, other: str, shards: Sequence[str]
) -> tuple[tuple[str, str], ...]:
    """The directed links a partition cuts."""
    if shape == "isolate":
        pairs = [(target, s) for s in shards if s != target] + [(s, target) for s in shards if s != target]
    elif shape == "split_pair":
        pairs = [(target, other), (other, target)]
    else:
        pairs = [(target, other)]
    return tuple(sorted(pairs))


def schedule(
    rng: random.Random,
    seconds: float,
    shards: Sequence[str],
    kinds: Sequence[str] = KINDS,
    gap: tuple[float, float] = (1.0, 4.0),
    duration: tuple[float, float] = (2.0, 6.0),
) -> list[Fault]:
    """Faults for a run of ``seconds``, each over before the run ends: the seed fixes them all."""
    faults: list[Fault] = []
    t = rng.uniform(*gap)
    alive = list(shards)
    while True:
        choices = [k for k in kinds if k != "crash" or len(alive) == len(shards)]
        if not choices:
            return faults
        kind = rng.choice(choices)
        target = rng.choice(alive)
        length = round(rng.uniform(*duration), 2)
        if t + length > seconds:
            return faults
        if kind == "crash":
            alive.remove(target)
        if kind == "partition":
            shape = rng.choice(SHAPES)
            other = rng.choice([s for s in shards if s != target])
            mode = rng.choice([Mode.DROP.value, Mode.RESET.value])
            pairs = partition_pairs(shape, target, other, shards)
            faults.append(Fault(round(t, 2), kind, target, length, shape, mode, pairs))
        else:
            faults.append(Fault(round(t, 2), kind, target, length))
        t += length + rng.uniform(*gap)


class Nemesis:
    """Injects a schedule against a ``LocalCluster`` and its mesh; heals before returning."""

    def __init__(self, cluster, mesh: Mesh, faults: list[Fault], say: Callable[[str], None] = print) -> None:
        self.cluster = cluster
        self.mesh = mesh
        self.faults = faults
        self.say = say
        self.injected: list[Fault] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)

    def _sleep_until(self, t: float) -> bool:
        """False when stopped first."""
        return not self._stop.wait(max(0.0, self._t0 + t - time.monotonic()))

    def _run(self) -> None:
        try:
            for fault in self.faults:
                if not self._sleep_until(fault.at):
                    break
                late = time.monotonic() - self._t0 - fault.at  # a restart may have run over
                self.say(f"nemesis: {fault.describe()}" + (f" ({late:.1f}s late)" if late > 0.5 else ""))
                self.injected.append(fault)
                self._inject(dataclasses.replace(fault, at=max(fault.at, fault.at + late)))
        except BaseException as exc:  # reported by the runner
            self.error = exc
        finally:
            self.mesh.heal()

    def _inject(self, fault: Fault) -> None:
        end = fault.at + fault.duration
        if fault.kind == "crash":  # for good: the run heals it at the end
            self.cluster.kill(fault.target)
            self._sleep_until(end)
        elif fault.kind == "kill":
            self.cluster.kill(fault.target)
            self._sleep_until(end)
            self.cluster.start(fault.target, wait=True)
        elif fault.kind == "pause":
            pid = self.cluster.procs[fault.target].pid
            os.kill(pid, signal.SIGSTOP)
            try:
                self._sleep_until(end)
            finally:
                os.kill(pid, signal.SIGCONT)
        else:
            self.mesh.cut(fault.pairs, Mode(fault.mode))
            try:
                self._sleep_until(end)
            finally:
                self.mesh.heal()

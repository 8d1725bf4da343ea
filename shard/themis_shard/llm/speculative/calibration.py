"""What verifying k draft tokens costs on this machine: measured once, then remembered.

The draft-length controller chooses k by tokens per second, E(k) / verify(k), where verify(k) is
one decode carrying k + 1 logits rows. That cost is not a line. llama.cpp multiplies the output
head (262k rows for Gemma 3, most of a small model's weights) by a batch's logits rows in blocks,
so on this machine's repacked Q8_0 kernels 4 rows cost about what 3 do, and 8 less than 7
(Gemma 3 270M, 2 threads, 1..9 rows: 21, 26, 30, 32, 48, 52, 56, 48, 65 ms). The controller's
prior line (27 ms + 11.5 ms a row) priced 4 rows at twice their cost, so prompt lookup drafted
1.4 tokens a round where 3 pay best.

The shape depends on the CPU, the llama.cpp build, the model and the thread count. So the engine
measures it on its own context before its first request, and the table is kept in the probe cache
under a key of all four. A later start on the same machine reads it back instead of measuring.
A greedy answer depends on the shapes of its verify batches (kernels round differently), so
reading the same table keeps a request's answer the same from one start to the next.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from ..artifacts import exclusive
from ..cpu_probe import (
    library_identity,
    machine_flags,
    machine_model,
    probe_cache_key,
    recall_json,
    remember_json,
)

log = logging.getLogger(__name__)

#: Timed decodes per row count; the fastest is kept (noise on a shared machine only adds time).
REPEATS = 3
#: Seconds are kept to 0.1 ms, so a table read back is the table that was written.
DECIMALS = 4

#: ``measure(extra_rows)``: seconds of one decode with ``extra_rows`` + 1 logits rows.
Measure = Callable[[int], float]


def summarise(samples: Sequence[Sequence[float]]) -> tuple[float, ...]:
    """Per k, the fastest of its timings, rounded; never below k = 0's (a verify with more rows
    cannot be cheaper than a plain decode: a lower reading is noise)."""
    fastest = [round(min(s), DECIMALS) for s in samples]
    return tuple(max(t, fastest[0]) for t in fastest)


def measure_table(measure: Measure, n_max: int, repeats: int = REPEATS) -> tuple[float, ...]:
    """verify(k) for k = 0..n_max: one untimed pass over every shape (llama.cpp builds a graph
    per shape on first use), then ``repeats`` timed passes over all of them, so a spell of
    load from elsewhere (another shard loading its model) falls on every k alike."""
    shapes = range(n_max + 1)
    for k in shapes:
        measure(k)
    samples: list[list[float]] = [[] for _ in shapes]
    for _ in range(repeats):
        for k in shapes:
            samples[k].append(measure(k))
    return summarise(samples)


def table_key(model: Path, n_threads: int, n_max: int, extra_buffers: bool) -> str:
    """What the table depends on: the machine, the llama.cpp build, the model file, the threads."""
    try:
        size = model.stat().st_size
    except OSError:
        size = -1
    return probe_cache_key(
        "verify-costs",
        library_identity(),
        ",".join(sorted(machine_flags())),
        machine_model(),
        model.name,
        size,
        n_threads,
        n_max,
        extra_buffers,
    )


class VerifyCostTable:
    """The verify-cost table of one (machine, build, model, threads), kept in ``cache_dir``
    (None: measured on every start)."""

    def __init__(self, cache_dir: Path | None, key: str) -> None:
        self.cache_dir = cache_dir
        self.key = key

    def get(self, measure: Measure, n_max: int) -> tuple[float, ...]:
        """The remembered table, else measured now (one process at a time per machine: shards
        starting together would slow each other's timings) and remembered."""
        if self.cache_dir is None:
            return measure_table(measure, n_max)
        found = self._recall(n_max)
        if found is not None:
            return found
        with exclusive(self.cache_dir / f"{self.key}.lock", "measuring verify costs"):
            found = self._recall(n_max)
            if found is not None:
                return found
            table = measure_table(measure, n_max)
            self._remember(table)
        log.info("verify costs, k = 0..%d extra rows (ms): %s", n_max, [round(t * 1e3, 1) for t in table])
        return table

    @property
    def _name(self) -> str:
        return f"verify-costs-{self.key}"

    def _recall(self, n_max: int) -> tuple[float, ...] | None:
        data = recall_json(self.cache_dir, self._name)  # type: ignore[arg-type]
        seconds = data.get("seconds") if isinstance(data, dict) else None
        if (
            not isinstance(seconds, list)
            or len(seconds) != n_max + 1
            or not all(isinstance(s, (int, float)) and s > 0 for s in seconds)
        ):
            return None
        return tuple(float(s) for s in seconds)

    def _remember(self, table: tuple[float, ...]) -> None:
        try:
            remember_json(self.cache_dir, self._name, {"seconds": list(table)})  # type: ignore[arg-type]
        except OSError as exc:  # a read-only cache: measured again next start
            log.warning("cannot keep the verify-cost table in %s: %s", self.cache_dir, exc)

"""Round-based simulation of push-pull gossip over the real ``GossipState`` merge code.

No network and no clocks: N states exchange SYN/ACK/PUSH payloads directly. Rounds are
synchronous and conservative — every reply in round r is computed from the states as they
were at the start of round r and all merges are applied at the end, so an update learned in
a round is never forwarded within that same round (as with real, concurrent exchanges).

Used by tests/cluster/test_gossip_convergence.py and handy for sizing fanout/interval:
``python -m tests.cluster.gossip_sim 1000 3`` (from the repository root).
"""

from __future__ import annotations

import math
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from themis_shard.cluster.membership.gossip_state import AdapterCapabilityAnnouncement, Delta, GossipState

NOW_WALL = 1_700_000_000.0


def expected_bound(n: int, fanout: int) -> int:
    """The convergence bound the gossip settings are sized for: ⌈log_f N⌉ + 2 rounds."""
    return math.ceil(math.log(n) / math.log(fanout) - 1e-12) + 2


def _shard_ids(n: int) -> list[str]:
    return [f"s{i}" for i in range(n)]


def _run_rounds(
    states: Sequence[GossipState], fanout: int, rng: random.Random, done, max_rounds: int, loss: float
) -> int:
    """Rounds until ``done(states)``; -1 if ``max_rounds`` pass first."""
    by_id = {s.self_id: s for s in states}
    ids = list(by_id)
    for rnd in range(1, max_rounds + 1):
        pending: list[tuple[GossipState, Delta]] = []
        for a in states:
            peers = rng.sample(
                [p for p in ids if p != a.self_id]
                if len(ids) <= 64
                else _sample_excluding(ids, a.self_id, fanout, rng),
                min(fanout, len(ids) - 1),
            )
            for peer in peers:
                if loss and rng.random() < loss:
                    continue  # the exchange was lost
                b = by_id[peer]
                digest = a.digest()
                pending.append((a, b.delta_for(digest)))  # ACK: B → A
                wants = b.wants_from(digest)
                if wants:
                    pending.append((b, a.entries_for(wants)))  # PUSH: A → B
        for target, delta in pending:
            target.merge(delta, now=float(rnd), now_wall=NOW_WALL)
        if done(states):
            return rnd
    return -1


def _sample_excluding(ids: list[str], me: str, k: int, rng: random.Random) -> list[str]:
    """k distinct ids other than ``me`` without copying a large list."""
    picked: set[str] = set()
    while len(picked) < min(k, len(ids) - 1):
        p = ids[rng.randrange(len(ids))]
        if p != me:
            picked.add(p)
    return list(picked)


def _cluster_with_shared_membership(n: int) -> list[GossipState]:
    """N states that already agree on membership (as after warm-up), each knowing only itself fresh."""
    ids = _shard_ids(n)
    template = GossipState.create(ids[0])
    for sid in ids[1:]:
        template.add_seed(sid, "", now=0.0)
    shared_versions = template.digest().members  # rebuilt, never mutated, by GossipState: safe to share
    states = []
    for sid in ids:
        s = GossipState(sid)
        s.members = dict(template.members)
        s._last_change = dict(template._last_change)
        s._members_fp = template._members_fp
        s._members_versions = dict(shared_versions)
        states.append(s)
    return states


def rounds_to_disseminate(
    n: int, fanout: int, rng: random.Random, *, loss: float = 0.0, max_rounds: int = 64
) -> int:
    """Rounds until an announcement made by one random shard is held by all N shards."""
    states = _cluster_with_shared_membership(n)
    origin = states[rng.randrange(n)]
    ann = AdapterCapabilityAnnouncement(
        shard_id=origin.self_id,
        adapter_id="legal-qa",
        domain="legal",
        accuracy_delta=0.9,
        performance_delta_p99_ms=12.0,
        training_samples=1000,
        federation_round=1,
        announced_at=NOW_WALL,
    )
    origin.announce(ann)
    key = ann.key
    return _run_rounds(
        states, fanout, rng, lambda ss: all(key in s.announcements for s in ss), max_rounds, loss
    )


def rounds_to_agree(
    n: int, fanout: int, rng: random.Random, *, loss: float = 0.0, max_rounds: int = 64
) -> int:
    """Rounds until N shards that each just beat their heartbeat all hold identical state.

    Every shard starts with the plan's members as seeds (version 0) and one fresh heartbeat and
    one announcement of its own — N concurrent updates, the full anti-entropy workload.
    """
    ids = _shard_ids(n)
    states = []
    for i, sid in enumerate(ids):
        s = GossipState.create(sid)
        for other in ids:
            s.add_seed(other, "", now=0.0)
        s.beat(now=0.0)
        s.announce(
            AdapterCapabilityAnnouncement(
                shard_id=sid,
                adapter_id=f"a{i}",
                domain="legal",
                accuracy_delta=0.5,
                performance_delta_p99_ms=1.0,
                federation_round=1,
                announced_at=NOW_WALL,
            )
        )
        states.append(s)

    def agreed(ss: Sequence[GossipState]) -> bool:
        first = ss[0].digest()
        return all(
            s.digest().members_fp == first.members_fp
            and s.digest().announcements_fp == first.announcements_fp
            for s in ss
        )

    return _run_rounds(states, fanout, rng, agreed, max_rounds, loss)


@dataclass(frozen=True)
class ConvergenceStats:
    n: int
    fanout: int
    trials: int
    mean_rounds: float
    max_rounds: int
    bound: int


def measure(
    n: int, fanout: int = 3, trials: int = 10, seed: int = 0, *, mode: str = "disseminate", loss: float = 0.0
) -> ConvergenceStats:
    rng = random.Random(seed)
    fn = rounds_to_disseminate if mode == "disseminate" else rounds_to_agree
    rounds = [fn(n, fanout, rng, loss=loss) for _ in range(trials)]
    if min(rounds) < 0:
        raise RuntimeError(f"gossip did not converge within the round limit at N={n}")
    return ConvergenceStats(
        n, fanout, trials, statistics.fmean(rounds), max(rounds), expected_bound(n, fanout)
    )


if __name__ == "__main__":  # pragma: no cover - a sizing aid
    n, f = (int(a) for a in sys.argv[1:3]) if len(sys.argv) >= 3 else (1000, 3)
    print(measure(n, f))

"""Spec: the engines of one host share its cores by demand — a lone busy engine computes on all
of them, each of k busy engines on cores // k (at least one); an idle, stopped or silent engine
frees its share; every engine of one shard counts as one."""

from __future__ import annotations

import pytest
from themis_shard.llm.host_cores import (
    HOST_SLOTS,
    QUIET_MS,
    STALE_MS,
    HostCores,
    create,
    open_for,
    share,
    slot_of,
)
from themis_shard.llm.settings import LLMSettings


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def host(tmp_path):
    path = tmp_path / "host-cores"
    create(path)
    clock = Clock()
    shards = [HostCores(path, slot, 4, clock_ms=clock) for slot in range(3)]
    yield shards, clock
    for s in shards:
        s.close()


def test_cores_are_split_among_the_engines_computing_at_least_one_each() -> None:
    assert [share(4, busy) for busy in (0, 1, 2, 3, 4, 8)] == [4, 4, 2, 1, 1, 1]


def test_a_lone_busy_engine_takes_every_core_and_company_shares_them(host) -> None:
    (a, b, c), clock = host
    a.mark("default", True)
    assert a.threads() == 4
    b.mark("default", True)
    assert a.threads() == b.threads() == 2
    c.mark("default", True)
    assert c.threads() == 1
    b.mark("default", False)
    c.mark("default", False)
    clock.ms += QUIET_MS
    assert a.threads() == 4


def test_an_engine_about_to_compute_counts_itself_before_it_marks(host) -> None:
    (a, b, _), _ = host
    b.mark("default", True)
    assert a.threads() == 2


def test_a_slot_not_stamped_for_a_while_is_idle_as_after_a_kill(host) -> None:
    (a, b, _), clock = host
    b.mark("default", True)  # and then killed: never marked idle
    clock.ms += STALE_MS - 1
    assert a.threads() == 2
    clock.ms += 2
    assert a.threads() == 4


def test_cores_are_lent_only_once_the_company_has_been_quiet_for_a_moment(host) -> None:
    """Between two requests an engine idles for a few milliseconds: its share is not lent out
    and taken back within one step."""
    (a, b, _), clock = host
    b.mark("default", True)
    b.mark("default", False)
    clock.ms += QUIET_MS - 1
    assert a.threads() == 2
    assert a.threads(starting=True) == 4  # but an engine taking up a request takes them at once
    b.mark("default", False)  # still idle: the time it went idle stands
    clock.ms += 1
    assert a.threads() == 4


def test_the_engines_of_one_shard_share_its_slot_busy_while_any_is(host) -> None:
    (a, b, _), clock = host
    a.mark("default", True)
    a.mark("other-model", True)
    a.mark("default", False)
    assert b.threads() == 2
    a.mark("other-model", False)
    clock.ms += QUIET_MS
    assert b.threads() == 4


def test_a_shard_gets_its_slot_from_its_number_or_none(tmp_path) -> None:
    assert slot_of("shard-0") == 0 and slot_of("shard-12") == 12
    assert slot_of(f"shard-{HOST_SLOTS}") is None and slot_of("edge") is None
    path = tmp_path / "host-cores"
    create(path)
    assert open_for(0, str(path), "shard-1") is None  # off
    assert open_for(2, str(path), "edge") is None  # no slot: fixed threads
    shared = open_for(2, str(path), "shard-1")
    assert shared is not None and shared.cores == 2
    shared.close()


def test_the_file_names_the_shards_whose_engines_share_the_host_from_start_to_close(tmp_path) -> None:
    path = tmp_path / "host-cores"
    create(path)
    one = HostCores(path, 1, 2)
    assert one.shards() == ["shard-1"]  # present before its engine ever worked
    three = HostCores(path, 3, 2)
    assert one.shards() == three.shards() == ["shard-1", "shard-3"]
    assert one.threads() == 2  # a shard that has only started takes no share of the cores
    three.close()
    assert one.shards() == ["shard-1"]
    one.close()


def test_a_file_that_is_not_a_host_cores_file_is_refused_by_name(tmp_path) -> None:
    path = tmp_path / "other"
    path.write_bytes(b"x")
    with pytest.raises(ValueError, match="not a host-cores file"):
        HostCores(path, 0, 2)


def test_sharing_cores_needs_the_file_setting() -> None:
    with pytest.raises(ValueError, match="THEMIS_LLM_HOST_CORES_FILE"):
        LLMSettings(host_cores=2)

"""Spec: the sums behind the CLI's progress (keys moved by a reshard, its estimated total) and
what the views render, captured with rich's recorder."""

from __future__ import annotations

import io

from rich.console import Console
from themis_core.plan import ClusterSpec, Member, build_plan
from themis_shard.cli_progress import RebuildView, ScaleView, StartupView, migration_summary, moved_fraction


def plan_of(n: int, previous=None, raid_mode: str = "raid1"):
    members = tuple(Member(shard_id=f"shard-{i}", url=f"http://127.0.0.1:{9000 + i}") for i in range(n))
    return build_plan(ClusterSpec(name="t", members=members, raid_mode=raid_mode), previous)


def test_adding_a_fourth_shard_moves_about_a_quarter_of_the_copies() -> None:
    three = plan_of(3)
    four = plan_of(4, three)
    assert 0.15 < moved_fraction(three, four) < 0.35
    assert moved_fraction(three, three) == 0.0


def test_migration_summary_counts_only_members_on_the_new_ring() -> None:
    statuses = {
        "a": {"migration": {"ring_version": 2, "state": "purged", "keys_received": 40}},
        "b": {"migration": {"ring_version": 2, "state": "migrating", "keys_received": 7}},
        "c": {"migration": {"ring_version": 1, "state": "purged", "keys_received": 99}},
        "d": None,
    }
    moved, states = migration_summary(statuses, 2)
    assert moved == 47
    assert states == {"a": "purged", "b": "migrating", "c": "behind", "d": "unreachable"}


def recorder() -> Console:
    return Console(record=True, width=160, file=io.StringIO())


def test_scale_view_shows_keys_moved_of_the_estimate_and_completes() -> None:
    console = recorder()
    with ScaleView(console, 100, "scale 3→4") as view:
        view.update(30, {"shard-3": "migrating"})
        view.update(120, {"shard-3": "purged"}, done=True)  # more than estimated: the total follows
    out = console.export_text()
    assert "scale 3→4" in out and "120/120 keys" in out and "shard-3=purged" in out


def test_startup_and_rebuild_views() -> None:
    console = recorder()
    with StartupView(console, [("shard-0", "http://a"), ("shard-1", "http://b")]) as view:
        view.mark("shard-0", "ready")
        view.mark("shard-1", "exited")
    out = console.export_text()
    assert "shard-0" in out and "ready" in out and "exited" in out
    console = recorder()
    with RebuildView(console, ["shard-2"]) as view:
        view.update("shard-2", {"stripes_total": 12, "stripes_done": 12, "rate_bytes_per_s": 3e6})
    out = console.export_text()
    assert "shard-2 rebuild" in out and "12/12 stripes 3.0 MB/s" in out

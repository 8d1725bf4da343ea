"""report(seen, decided, done) → status and events, as a pure function (the clock comes in)."""

import dataclasses

import pytest
from themis_operator.reconcile.act import Done
from themis_operator.reconcile.decide import Invalid, decide
from themis_operator.reconcile.observe import PriorStatus, StatefulSetState
from themis_operator.reconcile.report import report, report_invalid
from themis_operator.status import AdapterReport, ShardReport

from .worlds import adapter, after, context, empty, reports

NOW, LATER = "2030-01-01T00:00:00Z", "2030-01-01T00:05:00Z"
CREATED = (Done("StatefulSet", "demo", "created"),)


def reasons(outcome) -> list[str]:
    return [e.reason for e in outcome.events]


def conditions(outcome) -> dict[str, str]:
    return {c["type"]: c["status"] for c in outcome.status["conditions"]}


def running(ctx=None, **fields):
    """A cluster whose children exist as decided and whose pods are all ready."""
    ctx = ctx or context()
    snapshot = after(empty(), decide(ctx, empty()), ready=ctx.spec.shards, **fields)
    return ctx, snapshot, decide(ctx, snapshot)


def test_a_new_cluster_is_creating_and_says_what_it_created():
    ctx, snapshot = context(), empty(generation=1)
    outcome = report(ctx, snapshot, decide(ctx, snapshot), CREATED, now=NOW)
    assert reasons(outcome) == ["Created", "PlanCreated"]
    assert outcome.events[0].message == "created StatefulSet with 3 shards"
    assert outcome.status["phase"] == "Creating" and outcome.status["ready"] == "0/3"
    assert outcome.status["ringVersion"] == 1 and outcome.status["observedGeneration"] == 1
    assert conditions(outcome) == {"Ready": "False", "Progressing": "True", "Degraded": "False"}
    assert [s["id"] for s in outcome.status["shards"]] == ["demo-0", "demo-1", "demo-2"]
    assert outcome.built


def test_a_ready_cluster_that_changed_nothing_is_running_and_silent():
    ctx, snapshot, decision = running()
    outcome = report(ctx, snapshot, decision, (), now=NOW)
    assert outcome.events == []
    assert outcome.status["phase"] == "Running" and outcome.status["ready"] == "3/3"
    assert conditions(outcome) == {"Ready": "True", "Progressing": "False", "Degraded": "False"}
    assert "observedGeneration" not in outcome.status  # unknown generation: left out, not null


def test_growing_the_statefulset_is_reported_as_scaled_from_and_to():
    _, snapshot, _ = running()
    grown = context(shards=5)
    outcome = report(
        grown, snapshot, decide(grown, snapshot), (Done("StatefulSet", "demo", "updated"),), now=NOW
    )
    assert reasons(outcome) == ["Scaled", "RingChanged"]
    assert outcome.events[0].message == "StatefulSet replicas 3 → 5"
    assert outcome.events[1].message == "ring version 1 → 2: 3 → 5 shards in the ring"


def test_a_changed_pod_template_is_a_rolling_update_that_keeps_the_cluster_progressing():
    ctx, snapshot, decision = running()
    rolling = dataclasses.replace(
        snapshot, statefulset=StatefulSetState(replicas=3, ready=3, updated=1, rolling=True)
    )
    outcome = report(ctx, rolling, decision, (Done("StatefulSet", "demo", "updated"),), now=NOW)
    assert reasons(outcome) == ["RollingUpdate"]
    progressing = next(c for c in outcome.status["conditions"] if c["type"] == "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("True", "RollingUpdate")
    assert progressing["message"] == "rolling update: 1/3 shards on the new revision"
    assert outcome.status["phase"] == "Running"  # still serving: every shard is ready


def test_removing_a_child_turned_off_in_the_spec_is_an_event():
    ctx, snapshot, decision = running()
    outcome = report(ctx, snapshot, decision, (Done("ServiceMonitor", "demo", "removed"),), now=NOW)
    assert [e.message for e in outcome.events] == ["removed ServiceMonitor demo (turned off in spec)"]


def test_waiting_for_a_hand_off_is_scaling_and_announced_once():
    _, snapshot, _ = running(context(shards=5))
    three = context(shards=3)
    decision = decide(three, snapshot)
    outcome = report(three, snapshot, decision, (), now=NOW)
    assert outcome.status["phase"] == "Scaling" and outcome.status["replicas"] == 5
    assert outcome.status["message"] == "waiting for demo-3, demo-4 to hand off their data"
    assert "ScaleInWaiting" in reasons(outcome)
    roles = {s["id"]: s["role"] for s in outcome.status["shards"]}
    assert roles["demo-2"] == "member" and roles["demo-3"] == roles["demo-4"] == "leaving"
    again = dataclasses.replace(snapshot, prior=PriorStatus(phase="Scaling"))
    assert "ScaleInWaiting" not in reasons(report(three, again, decision, (), now=NOW))


def test_unreachable_members_degrade_the_cluster_with_one_warning_per_new_message():
    ctx, snapshot, decision = running(reports=reports(shards=3, down={"demo-1"}))
    outcome = report(ctx, snapshot, decision, (), now=NOW)
    assert outcome.status["phase"] == "Degraded" and outcome.status["message"] == "unreachable shards: demo-1"
    assert [(e.type, e.reason) for e in outcome.events] == [("Warning", "ShardsUnreachable")]
    said = PriorStatus(
        phase="Degraded", message=outcome.status["message"], conditions=tuple(outcome.status["conditions"])
    )
    assert report(ctx, dataclasses.replace(snapshot, prior=said), decision, (), now=LATER).events == []


def test_recovery_is_announced_when_every_member_answers_again():
    ctx, snapshot, decision = running(reports=reports(shards=3, down={"demo-1"}))
    degraded = report(ctx, snapshot, decision, (), now=NOW).status
    healed = dataclasses.replace(
        snapshot,
        reports=reports(shards=3),
        prior=PriorStatus(degraded["phase"], degraded["message"], tuple(degraded["conditions"])),
    )
    outcome = report(ctx, healed, decision, (), now=LATER)
    assert reasons(outcome) == ["Recovered"] and outcome.status["phase"] == "Running"


def test_conditions_keep_their_transition_time_while_their_status_holds():
    ctx, snapshot, decision = running()
    first = report(ctx, snapshot, decision, (), now=NOW).status["conditions"]
    later = dataclasses.replace(snapshot, prior=PriorStatus(conditions=tuple(first)))
    assert report(ctx, later, decision, (), now=LATER).status["conditions"] == first
    down = dataclasses.replace(later, reports=reports(shards=3, down={"demo-0"}))
    times = {
        c["type"]: c["lastTransitionTime"]
        for c in report(ctx, down, decision, (), now=LATER).status["conditions"]
    }
    assert times == {"Ready": LATER, "Progressing": NOW, "Degraded": LATER}


def test_an_invalid_spec_is_degraded_and_warns_only_when_the_reason_is_news():
    invalid = Invalid(
        "InvalidSpec", "raid5 needs at least 3 shards, spec.shards is 2: scaling below 3 is refused"
    )
    outcome = report_invalid(PriorStatus(), 4, invalid, now=NOW)
    assert outcome.status["phase"] == "Degraded" and outcome.status["observedGeneration"] == 4
    assert conditions(outcome) == {"Ready": "False", "Progressing": "False", "Degraded": "True"}
    assert [e.type for e in outcome.events] == ["Warning"] and not outcome.built
    said = PriorStatus("Degraded", invalid.message, tuple(outcome.status["conditions"]))
    assert report_invalid(said, 4, invalid, now=LATER).events == []


def test_an_adapter_is_placed_until_its_shards_report_it_loaded():
    ctx, snapshot, decision = running(
        adapters=(adapter(),), invalid_adapters={"broken": "invalid spec: domain"}
    )
    statuses = report(ctx, snapshot, decision, (), now=NOW).adapter_statuses
    placed = statuses["legal"]
    assert placed["phase"] == "Placed" and len(placed["placedShards"]) == 2
    assert [s["state"] for s in placed["shards"]] == ["pending", "pending"]
    assert placed["placed"] == ",".join(placed["placedShards"]) and placed["observedGeneration"] == 1
    assert statuses["broken"] == {
        "phase": "Degraded",
        "message": "invalid spec: domain",
        "placed": "",
        "placedShards": [],
        "loaded": "0/0",
    }

    entry = AdapterReport(name="legal", state="loaded", accuracy_delta=0.04, p99_delta_ms=12.0)
    loaded = {
        sid: ShardReport(
            id=sid, url="u", reachable=True, adapters=(entry,) if sid in placed["placedShards"] else ()
        )
        for sid in ("demo-0", "demo-1", "demo-2")
    }
    status = report(
        ctx, dataclasses.replace(snapshot, reports=loaded), decision, (), now=NOW
    ).adapter_statuses["legal"]
    assert status["phase"] == "Loaded" and status["loaded"] == "2/2"
    assert status["accuracyDelta"] == pytest.approx(0.04) and status["p99DeltaMs"] == pytest.approx(12.0)


def test_an_adapter_a_shard_refused_is_degraded_with_the_shards_reason():
    ctx, snapshot, decision = running(adapters=(adapter(),))
    placed = report(ctx, snapshot, decision, (), now=NOW).adapter_statuses["legal"]["placedShards"]
    first, second = placed
    reports = {
        first: ShardReport(
            id=first, url="u", reachable=True, adapters=(AdapterReport(name="legal", state="loaded"),)
        ),
        second: ShardReport(
            id=second,
            url="u",
            reachable=True,
            adapters=(AdapterReport(name="legal", state="failed", message="sha256 mismatch: got 00ff"),),
        ),
    }
    status = report(
        ctx, dataclasses.replace(snapshot, reports=reports), decision, (), now=NOW
    ).adapter_statuses["legal"]
    assert status["phase"] == "Degraded" and status["loaded"] == "1/2"
    assert status["message"] == f"{second}: sha256 mismatch: got 00ff"
    assert status["shards"][1] == {"id": second, "state": "failed", "message": "sha256 mismatch: got 00ff"}
    loaded = next(c for c in status["conditions"] if c["type"] == "Loaded")
    assert (loaded["status"], loaded["reason"]) == ("False", "LoadFailed")

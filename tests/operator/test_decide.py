"""decide(spec, snapshot) → Decision: what a reconcile changes, as a pure function."""

import dataclasses

from themis_operator.builders.children import Ref, all_child_refs
from themis_operator.reconcile.decide import Delete, Invalid, Patch, admit, decide

from .worlds import NAME, SERVICE_MONITOR, adapter, after, context, empty, kinds, reports


def test_a_new_cluster_creates_every_child_secrets_and_plan_before_the_statefulset():
    decision = decide(context(tls={"enabled": True}), empty())
    assert kinds(decision) == [
        ("Create", "Secret", "demo-gossip"),
        ("Create", "Secret", "demo-ca"),
        ("Create", "Secret", "demo-tls"),
        ("Create", "Secret", "demo-api-keys"),
        ("Create", "ConfigMap", "demo-plan"),
        ("Create", "Service", "demo-headless"),
        ("Create", "Service", "demo"),
        ("Create", "StatefulSet", "demo"),
        ("Create", "PodDisruptionBudget", "demo"),
    ]
    assert decision.replicas == 3 and decision.plan.ring_version == 1 and decision.waiting == ()


def test_every_child_decide_builds_is_one_observe_reads():
    ctx = context(tls={"enabled": True}, monitoring={"serviceMonitor": True})
    built = {
        Ref(a.obj["apiVersion"], a.obj["kind"], a.obj["metadata"]["name"])
        for a in decide(ctx, empty()).actions
    }
    assert built == set(all_child_refs(NAME))


def test_children_that_already_are_as_decided_need_no_action():
    ctx = context(tls={"enabled": True})
    first = empty()
    assert decide(ctx, after(first, decide(ctx, first))).actions == ()


def test_once_key_material_exists_the_same_snapshot_gives_the_same_decision():
    ctx = context()
    snapshot = after(empty(), decide(ctx, empty()))
    assert decide(ctx, snapshot) == decide(ctx, snapshot)


def test_a_spec_change_patches_only_the_children_it_touches_and_keeps_the_ring():
    snapshot = after(empty(), decide(context(), empty()))
    decision = decide(context(image="themis:2"), snapshot)
    assert kinds(decision) == [("Patch", "StatefulSet", "demo")]
    (patch,) = decision.actions
    assert isinstance(patch, Patch)
    assert patch.patch["spec"]["template"]["spec"]["containers"][0]["image"] == "themis:2"
    assert decision.plan.ring_version == 1


def test_a_child_turned_off_in_the_spec_is_deleted_only_while_it_exists():
    on = context(monitoring={"serviceMonitor": True})
    snapshot = after(empty(), decide(on, empty()))
    assert snapshot.child(SERVICE_MONITOR) is not None
    decision = decide(context(), snapshot)
    assert decision.actions == (Delete(SERVICE_MONITOR),)
    assert decide(context(), after(snapshot, decision)).actions == ()


def test_scale_out_grows_the_statefulset_and_bumps_the_ring_version():
    snapshot = after(empty(), decide(context(), empty()))
    decision = decide(context(shards=5), snapshot)
    assert decision.replicas == 5 and decision.plan.ring_version == 2 and decision.waiting == ()
    assert [m.shard_id for m in decision.plan.members][-1] == "demo-4"


def test_scale_in_keeps_the_pods_while_the_leaving_shards_drain_out_of_the_ring():
    five = after(empty(), decide(context(shards=5), empty()))
    decision = decide(context(shards=3), five)
    assert decision.replicas == 5 and decision.waiting == ("demo-3", "demo-4")
    assert decision.plan.ring_spec.shards == ("demo-0", "demo-1", "demo-2")
    assert decision.plan.draining == ("demo-3", "demo-4") and len(decision.plan.members) == 5
    assert decision.plan.ring_version == 2


def test_scale_in_waits_until_every_leaving_shard_reports_drained_for_this_ring():
    five = after(empty(), decide(context(shards=5), empty()))
    draining = after(five, decide(context(shards=3), five))
    three = context(shards=3)

    one_left = dataclasses.replace(
        draining, reports=reports(migration={"demo-3": "drained", "demo-4": "migrating"})
    )
    assert decide(three, one_left).waiting == ("demo-4",)
    assert decide(three, one_left).replicas == 5

    stale = reports(migration={"demo-3": "drained", "demo-4": "drained"}, ring_version=1)
    assert decide(three, dataclasses.replace(draining, reports=stale)).waiting == ("demo-3", "demo-4")

    done = dataclasses.replace(
        draining, reports=reports(migration={"demo-3": "drained", "demo-4": "drained"})
    )
    decision = decide(three, done)
    assert decision.replicas == 3 and decision.waiting == ()
    assert [m.shard_id for m in decision.plan.members] == ["demo-0", "demo-1", "demo-2"]
    assert decision.plan.draining == () and decision.plan.ring_version == 2  # same ring: no second resharding


def test_forcing_scale_in_shrinks_at_once_without_a_hand_off():
    five = after(empty(), decide(context(shards=5), empty()))
    decision = decide(context(shards=3), dataclasses.replace(five, force_scale_in=True))
    assert decision.replicas == 3 and decision.waiting == ()


def test_adapters_are_placed_on_ring_shards_only_never_on_draining_ones():
    five = after(empty(), decide(context(shards=5), empty()))
    decision = decide(context(shards=3), dataclasses.replace(five, adapters=(adapter(replicas=3),)))
    (placement,) = decision.placements
    assert set(placement.shards) == {"demo-0", "demo-1", "demo-2"}
    (planned,) = decision.plan.adapters
    assert planned.name == "legal" and planned.shards == placement.shards


def test_admit_turns_an_unbuildable_spec_into_the_reason_why():
    body = {"metadata": {"name": NAME}, "spec": {"shards": 2, "raidMode": "raid5"}}
    assert admit(body) == Invalid(
        "InvalidSpec", "raid5 needs at least 3 shards, spec.shards is 2: scaling below 3 is refused"
    )
    assert "invalid spec: shards" in admit({"metadata": {"name": NAME}, "spec": {"shards": "many"}}).message
    long = admit({"metadata": {"name": "x" * 41}, "spec": {"shards": 3}})
    assert isinstance(long, Invalid) and "at most 40 characters" in long.message
    ok = admit({"metadata": {"name": NAME, "namespace": "ns"}, "spec": {"shards": 3}})
    assert not isinstance(ok, Invalid) and (ok.name, ok.namespace, ok.spec.shards) == (NAME, "ns", 3)


def test_aliases_on_the_draft_or_embedding_model_are_refused_by_name():
    body = {
        "metadata": {"name": "demo"},
        "spec": {"shards": 3, "draftModel": {"source": "bundled", "alias": "d"}},
    }
    invalid = admit(body)
    assert isinstance(invalid, Invalid) and "spec.draftModel.alias is not used" in invalid.message

"""ThemisBackup, ThemisScheduledBackup and ``spec.bootstrap.fromBackup``: the CRDs accept the
examples and refuse malformed ones, a ThemisBackup runs the backup against the cluster's real
shard (in process) and reports Completed with its id and size — or Failed, saying why — a
schedule creates a ThemisBackup when its cron fires, and a bootstrapped cluster's shards get the
environment that restores the backup on first start."""

from __future__ import annotations

import base64
import copy
from contextlib import nullcontext
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from themis_core.cluster_backup.destinations import DirectoryDestination
from themis_core.plan import single_shard_plan
from themis_operator import API_VERSION, backups
from themis_operator.backup_jobs import run_backup, schedule_tick
from themis_operator.builders import ClusterContext
from themis_operator.builders.statefulset import build_statefulset
from themis_operator.cron import Schedule
from themis_operator.probe import ShardProber
from themis_shard.app import create_app
from themis_shard.backup.restore import fetch_backup
from themis_shard.llm.settings import LLMSettings
from themis_shard.settings import Settings
from themis_testing.fakekube import FakeKube
from themis_testing.validation import custom_resource_errors, load_example, validate_custom_resource

BACKUP = load_example("themisbackup.yaml")
SCHEDULED = load_example("themisscheduledbackup.yaml")
RESTORE = load_example("themiscluster-restore.yaml")


def test_the_examples_are_valid_and_the_schema_refuses_a_backup_without_a_destination() -> None:
    for example in (BACKUP, SCHEDULED, RESTORE):
        validate_custom_resource(example)
    broken = copy.deepcopy(BACKUP)
    del broken["spec"]["destination"]
    assert any("destination" in e for e in custom_resource_errors(broken))
    gs = copy.deepcopy(BACKUP)
    gs["spec"]["destination"]["url"] = "gs://bucket/x"
    assert any("does not match" in e for e in custom_resource_errors(gs))
    bad_id = copy.deepcopy(RESTORE)
    bad_id["spec"]["bootstrap"]["fromBackup"]["backupId"] = "Not An Id"
    assert any("does not match" in e for e in custom_resource_errors(bad_id))


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        ("30 2 * * *", "2026-12-03T02:30:00", "2026-12-04T02:30:00"),
        ("30 2 * * *", "2026-12-03T01:00:00", "2026-12-03T02:30:00"),
        ("*/15 * * * *", "2026-12-03T10:07:12", "2026-12-03T10:15:00"),
        ("0 0 * * 0", "2026-12-03T12:00:00", "2026-12-06T00:00:00"),  # the next Sunday
        ("0 6 1 * 1", "2026-12-03T12:00:00", "2026-12-07T06:00:00"),  # 1st of the month or a Monday
        ("@hourly", "2026-12-31T23:59:00", "2027-01-01T00:00:00"),
    ],
)
def test_cron_schedules_fire_at_the_next_matching_minute(expr: str, after: str, expected: str) -> None:
    at = Schedule.parse(expr).next_after(datetime.fromisoformat(after))
    assert at == datetime.fromisoformat(expected)


@pytest.mark.parametrize(("expr", "fragment"), [("* * *", "five fields"), ("61 * * * *", "outside 0-59")])
def test_a_bad_schedule_is_refused_by_name(expr: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        Schedule.parse(expr)


def ctx(**spec) -> ClusterContext:
    body = load_example("themiscluster.yaml")
    body["spec"].update(spec)
    body["metadata"].update(namespace="prod", uid="uid-1")
    return ClusterContext.from_body(body)


def scheduled_body(**status) -> dict:
    body = copy.deepcopy(SCHEDULED)
    body["metadata"].update(namespace="prod", uid="sched-uid", creationTimestamp="2026-12-03T00:00:00Z")
    body["status"] = status
    return body


def test_a_schedule_creates_an_owned_backup_when_it_fires_and_not_before() -> None:
    kube = FakeKube()
    early = schedule_tick(kube, scheduled_body(), datetime(2026, 12, 3, 2, 0, tzinfo=UTC))
    assert early == {"phase": "Active", "nextScheduleTime": "2026-12-03T02:30:00Z"}
    assert kube.kinds("prod") == []
    fired = schedule_tick(kube, scheduled_body(), datetime(2026, 12, 3, 2, 31, tzinfo=UTC))
    assert (
        fired["lastBackup"] == "demo-nightly-202612030231"
        and fired["nextScheduleTime"] == "2026-12-04T02:30:00Z"
    )
    child = kube.get(API_VERSION, "ThemisBackup", "prod", "demo-nightly-202612030231")
    assert child["spec"]["keep"] == 7 and child["spec"]["clusterRef"] == {"name": "demo"}
    assert child["metadata"]["ownerReferences"][0]["uid"] == "sched-uid"
    validate_custom_resource(child)
    again = schedule_tick(
        kube,
        scheduled_body(lastScheduleTime=fired["lastScheduleTime"]),
        datetime(2026, 12, 3, 2, 40, tzinfo=UTC),
    )
    assert "lastBackup" not in again
    suspended = scheduled_body()
    suspended["spec"]["suspend"] = True
    assert schedule_tick(kube, suspended, datetime(2026, 12, 9, tzinfo=UTC))["phase"] == "Suspended"


def test_a_bootstrapped_cluster_restores_on_first_start_with_the_destinations_credentials() -> None:
    sts = build_statefulset(ctx(bootstrap=RESTORE["spec"]["bootstrap"]), 2)
    env = {e["name"]: e for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["THEMIS_RESTORE_FROM"]["value"] == "s3://themis-backups/demo/themis-20261203t130000z-3fa2c1"
    assert env["AWS_ENDPOINT_URL"]["value"] == "http://minio.minio.svc:9000"
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "backup-s3",
        "key": "AWS_SECRET_ACCESS_KEY",
    }
    plain = build_statefulset(ctx(), 2)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert not any(e["name"] == "THEMIS_RESTORE_FROM" for e in plain)


@pytest.fixture
def shard(tmp_path):
    settings = Settings(shard_id="demo-0", data_dir=tmp_path / "demo-0", llm=LLMSettings(enabled=False))
    with TestClient(create_app(settings)) as client:
        client.put("/v1/collections/books", json={"dimension": 2})
        for i in range(30):
            assert (
                client.put(f"/v1/collections/books/documents/b{i}", json={"embedding": [i, 1.0]}).status_code
                == 200
            )
        yield client


def world(tmp_path, spec: dict) -> tuple[FakeKube, str]:
    kube = FakeKube()
    kube.add(
        {
            "apiVersion": API_VERSION,
            "kind": "ThemisCluster",
            "metadata": {"name": "demo", "namespace": "prod"},
            "spec": {"shards": 1, "raidMode": "raid0", "tls": {"enabled": False}, "auth": {"enabled": False}},
        }
    )
    plan = single_shard_plan("demo-0", "http://demo-0.test")
    kube.add(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "demo-plan", "namespace": "prod"},
            "data": {"plan.json": plan.to_json()},
        }
    )
    kube.add(
        {
            "apiVersion": API_VERSION,
            "kind": "ThemisBackup",
            "metadata": {"name": "b", "namespace": "prod"},
            "spec": spec,
        }
    )
    return kube, str(tmp_path / "backups")


def test_a_themisbackup_backs_up_the_clusters_shards_and_reports_its_id_and_size(shard, tmp_path) -> None:
    spec = {"clusterRef": {"name": "demo"}, "destination": {"url": str(tmp_path / "backups")}, "keep": 3}
    kube, where = world(tmp_path, spec)
    status = run_backup(
        kube,
        ShardProber(url_template="http://{shard_id}.test"),
        "prod",
        "b",
        backups.ThemisBackupSpec.model_validate(spec),
        client_factory=lambda **_: nullcontext(shard),
        report_every_s=0,
    )
    assert status["phase"] == "Completed", status
    assert status["shards"] == 1 and status["documents"] == 30 and status["progress"] == "100%"
    manifest = fetch_backup(DirectoryDestination(tmp_path / "backups"), status["backupId"], None)
    assert manifest.size == status["bytesTotal"] > 0 and status["location"] == f"{where}/{manifest.backup_id}"
    running = kube.get(API_VERSION, "ThemisBackup", "prod", "b")["status"]
    assert running["phase"] == "Running" and running["backupId"] == manifest.backup_id  # reported on the way


def test_a_themisbackup_of_a_missing_cluster_or_secret_fails_saying_why(tmp_path) -> None:
    spec = {"clusterRef": {"name": "nope"}, "destination": {"url": str(tmp_path / "backups")}}
    kube, _ = world(tmp_path, spec)
    status = run_backup(kube, ShardProber(), "prod", "b", backups.ThemisBackupSpec.model_validate(spec))
    assert status["phase"] == "Failed" and "ThemisCluster 'nope' not found in prod" in status["message"]
    s3 = {
        "clusterRef": {"name": "demo"},
        "destination": {"url": "s3://b/p", "credentialsSecret": {"name": "s3"}},
    }
    kube.add(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "s3", "namespace": "prod"},
            "data": {"AWS_ACCESS_KEY_ID": base64.b64encode(b"k").decode()},
        }
    )
    status = run_backup(kube, ShardProber(), "prod", "b", backups.ThemisBackupSpec.model_validate(s3))
    assert status["phase"] == "Failed" and "has no key AWS_SECRET_ACCESS_KEY" in status["message"]


def test_bootstrap_from_a_directory_is_refused_by_name() -> None:
    local = copy.deepcopy(RESTORE)
    local["spec"]["bootstrap"]["fromBackup"]["destination"] = {"url": "/backups"}
    assert any("does not match" in e for e in custom_resource_errors(local))
    with pytest.raises(ValueError, match="needs an s3:// destination"):
        backups.BootstrapSpec.model_validate(local["spec"]["bootstrap"])

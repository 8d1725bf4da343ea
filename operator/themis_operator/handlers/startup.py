"""Operator start-up: API client, shard prober and kopf settings go into ``memo``."""

from __future__ import annotations

import os

import kopf

from ..federation import Federator
from ..kube import ApiKube
from ..metrics import OperatorMetrics
from ..probe import ShardProber
from ..settings import OperatorSettings


def _api_client():
    """In-cluster config when running in a pod, else the kubeconfig ($KUBECONFIG honoured)."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
    return client.ApiClient()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    ours = OperatorSettings()
    memo.settings = ours
    memo.kube = ApiKube(_api_client())
    memo.prober = ShardProber(timeout_s=ours.probe_timeout_s, url_template=ours.shard_url_template)
    memo.metrics = OperatorMetrics()
    memo.federator = Federator(timeout_s=ours.federation_timeout_s)
    if ours.metrics_port:
        memo.metrics.serve(ours.metrics_port)
    settings.persistence.finalizer = "themisdb.io/operator"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="themisdb.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="themisdb.io")
    settings.watching.server_timeout = 300
    settings.execution.max_workers = 8
    # The status timer is synchronous (it probes shards over HTTP in a worker thread) and cannot
    # be cancelled mid-tick; a deletion waits for it to end. kopf re-checks only every 60 s by
    # default, which would keep a deleted cluster (and kubectl delete) hanging for a minute.
    settings.background.cancellation_polling = 1.0

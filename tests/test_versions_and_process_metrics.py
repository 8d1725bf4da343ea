"""Every command says its version, and /metrics carries the standard process and Python series."""

import subprocess
import sys
from importlib.metadata import version

import pytest
from prometheus_client import generate_latest
from themis_shard.metrics import ShardMetrics

VERSION = version("themis")


@pytest.mark.parametrize(
    ("main", "prog"),
    [
        ("themis_shard.local_cluster", "themis"),
        ("themis_shard.__main__", "themis-shard"),
        ("themis_operator.__main__", "themis-operator"),
    ],
)
def test_each_command_prints_the_one_version_from_pyproject(main, prog):
    code = f"from {main} import main; main(['--version'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{prog} {VERSION}"


def _series(metrics: ShardMetrics) -> set[str]:
    text = generate_latest(metrics.registry).decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if not line.startswith("#")}


def test_the_shard_registry_exports_process_and_python_collectors():
    names = _series(ShardMetrics("shard-0"))
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds"} <= names
    assert {"python_info", "python_gc_collections_total"} <= names


def test_collectors_live_on_each_shards_registry_not_the_global_one():
    """Two shards in one process (the tests do this) must not clash on duplicate series."""
    assert _series(ShardMetrics("a")) == _series(ShardMetrics("b"))

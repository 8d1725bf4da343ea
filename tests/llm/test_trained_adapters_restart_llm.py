"""A trained adapter outlives its shard process: after a restart (a new process over the same data
and weights directories, as a pod restart is) it is loaded again, same file, same domain; one
unloaded through the API stays unloaded."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager

import httpx
import pytest
from themis_shard.domains.sets import training_texts
from themis_testing.app_server import free_port

pytestmark = [pytest.mark.llm, pytest.mark.slow]


@contextmanager
def shard_process(data):
    port = free_port()
    env = {
        **os.environ,
        "THEMIS_LLM_N_CTX": "1024",
        "THEMIS_LLM_EMBEDDING_MODEL": "none",
        "THEMIS_LLM_ADAPTER_EVAL_ON_LOAD": "false",
        "OPENBLAS_NUM_THREADS": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "themis_shard",
        "--shard-id",
        "shard-0",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--data-dir",
        str(data),
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(cmd, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, "the shard exited during start-up"
            try:
                if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the shard did not become ready"
            time.sleep(0.5)
        with httpx.Client(base_url=url, timeout=1800) as client:
            yield client
    finally:
        proc.terminate()
        proc.wait(timeout=120)


def train(c: httpx.Client, name: str) -> dict:
    body = {
        "name": name,
        "domain": "legal",
        "collection": "legal",
        "steps": 1,
        "batch": 2,
        "max_tokens": 16,
        "evaluate": False,
    }
    r = c.post("/v1/adapters:train", json=body)
    assert r.status_code == 201, r.text
    return r.json()["adapter"]


def test_trained_adapters_are_reloaded_after_a_restart_unless_unloaded(tmp_path):
    with shard_process(tmp_path) as c:
        assert c.put("/v1/collections/legal", json={}).status_code == 200
        for i, text in enumerate(training_texts("legal")[:4]):
            assert c.put(f"/v1/collections/legal/documents/d{i}", json={"text": text}).status_code == 200
        kept = train(c, "legal-kept")
        train(c, "legal-dropped")
        assert c.delete("/v1/adapters/legal-dropped").status_code == 200

    with shard_process(tmp_path) as c:
        adapters = {a["name"]: a for a in c.get("/v1/adapters").json()["adapters"]}
        assert set(adapters) == {"legal-kept"}
        again = adapters["legal-kept"]
        assert (again["domain"], again["sha256"], again["path"]) == ("legal", kept["sha256"], kept["path"])
        r = c.post("/v1/infer", json={"prompt": "The lessee shall", "adapter": "legal-kept", "max_tokens": 2})
        assert r.status_code == 200, r.text

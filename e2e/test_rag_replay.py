"""Spec: answers tied to document versions across a real cluster (two real shard processes, raid0:
one owner per key, the real model and embedding model). Asked on shard-0 about a document only
shard-1 holds, the answer cites it at its version; after the document changed, a replay sent to
shard-0 reads that version from shard-1's history and reproduces the greedy answer bit for bit;
once the version is compacted away on shard-1, the replay is 410 ``version_compacted``."""

from __future__ import annotations

import pytest
from themis_client import ThemisClient, ThemisError
from themis_shard.cluster.placement.owners import Topology

pytestmark = [pytest.mark.e2e, pytest.mark.llm, pytest.mark.slow]

FACTS = {
    "paris": "Paris is the capital of France.",
    "tokyo": "Tokyo is the capital of Japan.",
    "kiwi": "The kiwi is a flightless bird from New Zealand.",
    "nile": "The Nile is the longest river in Africa.",
    "everest": "Mount Everest is the highest mountain on Earth.",
    "amazon": "The Amazon rainforest lies mostly in Brazil.",
}
GREEDY = {"k": 1, "max_tokens": 8, "temperature": 0}


def test_a_replay_on_one_shard_reads_the_cited_version_from_the_owner(local_cluster) -> None:
    pytest.importorskip("llama_cpp")
    cluster = local_cluster(2, raid_mode="raid0", llm=True, env={"THEMIS_DOCUMENT_HISTORY_VERSIONS": "1"})
    topo = Topology.of(cluster.plan, "shard-0")
    key = next(k for k in FACTS if topo.owners("facts", k) == ["shard-1"])
    with ThemisClient(cluster.url("shard-0"), timeout=300) as themis_db:
        themis_db.declare_collection("facts", embed_field="text")
        themis_db.batch("facts", {k: {"text": t} for k, t in FACTS.items()})

        first = themis_db.rag(FACTS[key], "facts", **GREEDY)
        [source] = first.sources
        assert (source.urn, source.version) == (f"urn:themis:facts:{key}", 1)
        assert first.replay is not None

        changed = {"text": "This document was rewritten and says something else entirely now."}
        themis_db.put("facts", key, changed)
        again = themis_db.rag_replay(first.replay)
        assert again.reproduced is True and again.answer == first.answer
        assert [s.version for s in again.sources] == [1]

        snapshot = themis_db.rag(FACTS[key], "facts", consistency="snapshot", **GREEDY)
        assert snapshot.snapshot_hlc is not None
        assert all(s.hlc is not None and s.hlc <= snapshot.snapshot_hlc for s in snapshot.sources)

        themis_db.put("facts", key, {"text": "A third version."})
        with pytest.raises(ThemisError) as gone:
            themis_db.rag_replay(first.replay)
    assert (gone.value.status, gone.value.code) == (410, "version_compacted")
    assert f"urn:themis:facts:{key}@1" in str(gone.value)

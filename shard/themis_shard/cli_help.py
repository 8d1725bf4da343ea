"""The ``themis`` command's one-line summaries, readable without the engine installed.

``themis --help`` must answer on a bare ``pip install themisdb`` (no httpx, rich or llama.cpp),
so the summaries live here, free of imports; the real parser (local_cluster.build_parser) uses the
same table, and a test keeps both in step.
"""

from __future__ import annotations

DESCRIPTION = "Run a local Themis cluster."

#: subcommand → its one-line help, in the order ``themis --help`` lists them
COMMANDS: dict[str, str] = {
    "up": "start a local cluster and wait until it is ready (restarts only shards that died)",
    "down": "stop the local cluster",
    "scale": "change the shard count of the running cluster (moves data online)",
    "status": "show the local cluster's shards",
    "demo": "load the sample corpus, ask one RAG question and run one AQL query",
    "raid": "RAID model-weight storage: status, verify, rebuild, ingest",
    "adapters": "LoRA adapters of the local cluster",
}


def brief_help(install_hint: str) -> str:
    """What ``themis --help`` prints when the engine extras are not installed."""
    width = max(map(len, COMMANDS))
    lines = [
        "usage: themis [--version] [--state-dir DIR] [--api-key KEY] COMMAND ...",
        "",
        DESCRIPTION,
        "",
        "commands:",
        *(f"  {name:<{width}}  {text}" for name, text in COMMANDS.items()),
        "",
        f"Every command needs the shard's engine: {install_hint}",
    ]
    return "\n".join(lines)

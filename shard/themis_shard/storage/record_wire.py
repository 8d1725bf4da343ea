"""Replicated records on the wire: the JSON form every shard-to-shard message uses for stamped
records (replication, hints, anti-entropy, hand-off, 2PC intents), stamps included so that every
copy is byte-identical."""

from __future__ import annotations

from typing import Any

from .documents import Replicated


def encode_items(items: list[Replicated]) -> list[dict[str, Any]]:
    """The wire (and hint) form of records: stamps included, so every copy is identical."""
    return [
        {
            "collection": i.collection,
            "key": i.key,
            "version": i.version,
            "document": i.document,
            "hlc": i.hlc,
            "origin": i.origin,
        }
        for i in items
    ]


def decode_items(raw: list[dict[str, Any]]) -> list[Replicated]:
    return [
        Replicated(
            i["collection"],
            i["key"],
            int(i["version"]),
            i.get("document"),
            int(i.get("hlc", 0)),
            str(i.get("origin", "")),
        )
        for i in raw
    ]

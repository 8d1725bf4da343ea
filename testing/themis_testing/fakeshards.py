"""A stand-in for shards' ``GET /v1/cluster/status``, for operator tests without shard pods.

One local HTTP server answers for every shard at ``/{namespace}/{shard_id}/v1/cluster/status``
(point the operator at it with ``THEMIS_OPERATOR_SHARD_URL_TEMPLATE=URL_TEMPLATE``). Shards
without an entry answer 503, as a shard that is down or not yet serving would.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeShards:
    def __init__(self) -> None:
        self.statuses: dict[tuple[str, str], dict] = {}
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = [p for p in self.path.split("/") if p]
                payload = None
                if len(parts) == 5 and parts[2:] == ["v1", "cluster", "status"]:
                    with owner._lock:
                        payload = owner.statuses.get((parts[0], parts[1]))
                body = json.dumps(payload or {"error": {"code": "unavailable", "message": "down"}}).encode()
                self.send_response(200 if payload else 503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url_template(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{{namespace}}/{{shard_id}}"

    def start(self) -> FakeShards:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def set(
        self,
        namespace: str,
        shard_id: str,
        *,
        ring_version: int = 1,
        migration: str = "idle",
        state: str = "up",
        adapters: list[dict] | None = None,
    ) -> None:
        with self._lock:
            self.statuses[(namespace, shard_id)] = {
                "shard_id": shard_id,
                "ring_version": ring_version,
                "members": [{"shard_id": shard_id, "url": "", "state": state}],
                "migration": {"state": migration, "ring_version": ring_version},
                "adapters": adapters or [],
            }

    def down(self, namespace: str, shard_id: str) -> None:
        with self._lock:
            self.statuses.pop((namespace, shard_id), None)

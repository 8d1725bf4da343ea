"""A small async Kubernetes API client (httpx): list, create, delete, merge-patch, status."""

from __future__ import annotations

from pathlib import Path

import httpx
import yaml

PATHS = {
    "statefulsets": "/apis/apps/v1",
    "pods": "/api/v1",
    "persistentvolumeclaims": "/api/v1",
    "configmaps": "/api/v1",
    "secrets": "/api/v1",
    "services": "/api/v1",
    "events": "/api/v1",
}


def server_of(kubeconfig: Path) -> str:
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
    return next(c for c in config["clusters"] if c["name"] == context["cluster"])["cluster"]["server"]


class ApiError(RuntimeError):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"{status}: {text[:300]}")
        self.status = status


class Api:
    def __init__(self, server: str) -> None:
        self.http = httpx.AsyncClient(base_url=server, timeout=10)

    async def close(self) -> None:
        await self.http.aclose()

    @staticmethod
    def _path(
        plural: str, namespace: str | None = None, name: str | None = None, sub: str | None = None
    ) -> str:
        path = PATHS[plural]
        if namespace:
            path += f"/namespaces/{namespace}"
        path += f"/{plural}"
        if name:
            path += f"/{name}"
        if sub:
            path += f"/{sub}"
        return path

    async def _call(self, method: str, path: str, **kw) -> dict:
        r = await self.http.request(method, path, **kw)
        if r.status_code >= 400:
            raise ApiError(r.status_code, r.text)
        return r.json()

    async def list(self, plural: str) -> list[dict]:
        return (await self._call("GET", self._path(plural)))["items"]

    async def create(self, plural: str, namespace: str, body: dict) -> dict:
        return await self._call("POST", self._path(plural, namespace), json=body)

    async def delete(self, plural: str, namespace: str, name: str) -> None:
        try:
            await self._call("DELETE", self._path(plural, namespace, name))
        except ApiError as e:
            if e.status != 404:
                raise

    async def patch(self, plural: str, namespace: str, name: str, body: dict, sub: str | None = None) -> dict:
        return await self._call(
            "PATCH",
            self._path(plural, namespace, name, sub),
            json=body,
            headers={"Content-Type": "application/merge-patch+json"},
        )

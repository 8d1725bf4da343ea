"""The Kubernetes API edge: a tiny generic client, and the merge patches that converge objects.

Reconcile logic talks to the ``Kube`` protocol only, so tests can hand it an in-memory fake
and the operator hands it :class:`ApiKube` (the official client's ApiClient, which follows
the usual kubeconfig / in-cluster configuration). All writes are JSON merge patches: the
operator owns the fields it sets and leaves everything else (server defaults, other
controllers' annotations) alone.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from . import API_VERSION

#: (apiVersion, kind) → plural; the operator only ever touches these.
PLURALS: dict[tuple[str, str], str] = {
    ("v1", "Secret"): "secrets",
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Service"): "services",
    ("v1", "Event"): "events",
    ("v1", "Pod"): "pods",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("apps/v1", "StatefulSet"): "statefulsets",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudgets",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitors",
    (API_VERSION, "ThemisCluster"): "themisclusters",
    (API_VERSION, "LoRAAdapter"): "loraadapters",
}

#: Fields that cannot change after creation (or that the server assigns); never patched.
IMMUTABLE_SPEC: dict[str, tuple[str, ...]] = {
    "StatefulSet": ("selector", "serviceName", "volumeClaimTemplates", "podManagementPolicy"),
    "Service": ("clusterIP", "clusterIPs"),
}


class KubeError(Exception):
    """Any other API error; kopf retries the handler."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status


class Conflict(KubeError):
    """The object exists or changed underneath us (409): the next reconcile will converge."""

    def __init__(self, body: str) -> None:
        super().__init__(409, body)


class Kube(Protocol):
    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict | None: ...
    def list(
        self, api_version: str, kind: str, namespace: str, label_selector: str | None = None
    ) -> list[dict]: ...
    def create(self, obj: dict) -> dict: ...
    def patch(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        patch: dict,
        subresource: str | None = None,
    ) -> dict: ...
    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool: ...


def resource_path(
    api_version: str, kind: str, namespace: str, name: str | None = None, subresource: str | None = None
) -> str:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = f"{base}/namespaces/{namespace}/{PLURALS[(api_version, kind)]}"
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


class ApiKube:
    """``Kube`` over ``kubernetes.client.ApiClient`` (configured by the caller)."""

    def __init__(self, api_client: Any | None = None) -> None:
        from kubernetes import client

        self._client = api_client or client.ApiClient()

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list | None = None,
        content_type: str = "application/json",
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        if hasattr(self._client, "param_serialize"):  # kubernetes >= 33 (openapi-generator 7)
            m, url, headers, payload, post = self._client.param_serialize(
                method=method,
                resource_path=path,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self._client.call_api(
                m, url, header_params=headers, body=payload, post_params=post, _request_timeout=30
            )
            response.read()
            status, data = response.status, response.data
        else:  # older clients raise ApiException for non-2xx answers
            from kubernetes.client.exceptions import ApiException

            try:
                response = self._client.call_api(
                    path,
                    method,
                    query_params=query or [],
                    body=body,
                    header_params=headers,
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _return_http_data_only=True,
                    _request_timeout=30,
                )
                status, data = 200, response.data
            except ApiException as e:
                status, data = e.status, (e.body or "").encode()
        if status == 404:
            return None
        if status == 409:
            raise Conflict(data.decode(errors="replace")[:500])
        if status >= 400:
            raise KubeError(status, data.decode(errors="replace")[:1000])
        return json.loads(data) if data else {}

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict | None:
        return self._call("GET", resource_path(api_version, kind, namespace, name))

    def list(
        self, api_version: str, kind: str, namespace: str, label_selector: str | None = None
    ) -> list[dict]:
        query = [("labelSelector", label_selector)] if label_selector else []
        result = self._call("GET", resource_path(api_version, kind, namespace), query=query)
        return list((result or {}).get("items") or [])

    def create(self, obj: dict) -> dict:
        meta = obj["metadata"]
        return self._call("POST", resource_path(obj["apiVersion"], obj["kind"], meta["namespace"]), body=obj)

    def patch(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        patch: dict,
        subresource: str | None = None,
    ) -> dict:
        return self._call(
            "PATCH",
            resource_path(api_version, kind, namespace, name, subresource),
            body=patch,
            content_type="application/merge-patch+json",
        )

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        return self._call("DELETE", resource_path(api_version, kind, namespace, name)) is not None


def is_subset(wanted: Any, actual: Any) -> bool:
    """True when every field of ``wanted`` already has that value in ``actual``."""
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(
            (v is None and actual.get(k) is None) or (k in actual and is_subset(v, actual[k]))
            for k, v in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(actual, list)
            and len(wanted) == len(actual)
            and all(is_subset(w, a) for w, a in zip(wanted, actual, strict=True))
        )
    return wanted == actual


def desired_patch(desired: dict) -> dict:
    """The merge patch that converges an existing object to ``desired``."""
    patch = {k: v for k, v in desired.items() if k not in ("apiVersion", "kind", "metadata")}
    meta = desired["metadata"]
    patch["metadata"] = {k: meta[k] for k in ("labels", "annotations", "ownerReferences") if k in meta}
    immutable = IMMUTABLE_SPEC.get(desired["kind"], ())
    if "spec" in patch and immutable:
        patch["spec"] = {k: v for k, v in patch["spec"].items() if k not in immutable}
    if desired["kind"] == "StatefulSet":
        pod = patch["spec"]["template"]["spec"]
        for optional in ("nodeSelector", "tolerations", "imagePullSecrets", "priorityClassName"):
            pod.setdefault(optional, None)  # removing them from the spec must remove them here
    return patch

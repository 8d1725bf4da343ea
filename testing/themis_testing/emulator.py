"""A Kubernetes API server for tests: kmock's ``KubernetesEmulator`` plus the shims it needs.

kmock serves discovery, parses requests and runs the HTTP server; the subclass below takes
over the object endpoints so that unmodified clients — ``kopf run``, ``kubectl``, the
official Python client — work against it. What it adds (see ARCHITECTURE.md §3):

* namespaces (GET/list) instead of 500s; core discovery answering ``groupVersion: v1``;
* ``resourceVersion``, ``uid``, ``generation``, ``creationTimestamp`` on every object, and
  409 on a stale ``resourceVersion`` (kopf's finalizer patches rely on it), PUT included;
* list responses with ``kind``/``resourceVersion`` and label/field selectors;
* watch streams as ``application/json`` lines, resumable from a ``resourceVersion``, with
  the initial-events-end bookmark that ``kubectl wait`` waits for;
* standard Status errors (``NotFound``, ``AlreadyExists``, ``Conflict``);
* CRDs: POSTing one registers its resource (kind, short names, status subresource, printer
  columns for ``kubectl get``); custom resources are defaulted and validated against the CRD's
  schema (unknown fields rejected, 422 ``Invalid`` as from a real API server), and the status
  subresource is isolated from the main resource;
* merge, JSON and (approximated as merge) strategic-merge patches.
* CRDs with several served versions share one store (the storage version's), as with
  ``conversion: None``: an object is the same whichever version asks.

* ``/openapi/v3`` (JSON, per group-version) and ``/openapi/v2`` (protobuf) from the built-in
  kinds' schemas and the installed CRDs' (``openapi.py``): plain ``kubectl apply`` validates
  (server-side: the documents say PATCH takes ``fieldValidation``) and ``kubectl explain`` works.

* the ``/scale`` subresource of CRDs that declare one (``kubectl scale``, HPAs): an
  ``autoscaling/v1`` Scale read from and written to the CRD's ``specReplicasPath``,
  ``statusReplicasPath`` and ``labelSelectorPath`` (GET, PUT, merge and JSON patches).

  StatefulSets and Deployments have it too (``.spec.replicas``, ``.status.replicas``).

Still absent, by design: garbage collection, validation of built-in kinds, protobuf (other
than the OpenAPI v2 document), server-side apply.

Longer than our usual 500 lines on purpose: nearly all of it is one class whose handlers share
one object store and its watch queues; split, a single request's path would span several files.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import datetime
import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp.web
import jsonpatch
import yaml
from kmock import KubernetesEmulator, ResourceInfo, Server, resource

from . import openapi
from .merge import merge_patch
from .validation import apply_defaults, error_path, structural_validator


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


BUILTINS = [
    Kind("", "v1", "namespaces", "Namespace", namespaced=False, status=True),
    Kind("", "v1", "configmaps", "ConfigMap"),
    Kind("", "v1", "secrets", "Secret"),
    Kind("", "v1", "services", "Service", status=True),
    Kind("", "v1", "pods", "Pod", status=True),
    Kind("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", status=True),
    Kind("", "v1", "events", "Event"),
    Kind("", "v1", "serviceaccounts", "ServiceAccount"),
    Kind("apps", "v1", "statefulsets", "StatefulSet", status=True),
    Kind("apps", "v1", "deployments", "Deployment", status=True),
    Kind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", status=True),
    Kind("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", status=True),
    Kind("events.k8s.io", "v1", "events", "Event"),
    Kind(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        namespaced=False,
        status=True,
    ),
]
_SHORT = {
    "configmaps": {"cm"},
    "services": {"svc"},
    "statefulsets": {"sts"},
    "poddisruptionbudgets": {"pdb"},
    "persistentvolumeclaims": {"pvc"},
    "namespaces": {"ns"},
    "customresourcedefinitions": {"crd", "crds"},
    "pods": {"po"},
    "horizontalpodautoscalers": {"hpa"},
    "serviceaccounts": {"sa"},
    "deployments": {"deploy"},
    "events": {"ev"},
}
_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def _age(obj: dict) -> str:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return "<unknown>"
    then = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    seconds = int((datetime.datetime.now(datetime.UTC) - then).total_seconds())
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m"


def _pod_status(pod: dict) -> str:
    status = pod.get("status") or {}
    for c in status.get("containerStatuses") or []:
        if waiting := (c.get("state") or {}).get("waiting"):
            return waiting.get("reason", "Waiting")
    return "Terminating" if pod["metadata"].get("deletionTimestamp") else status.get("phase", "Pending")


def _pod_ready(pod: dict) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len(pod.get("spec", {}).get("containers") or [])
    return f"{sum(1 for c in statuses if c.get('ready'))}/{total}"


def _hpa_targets(hpa: dict) -> str:
    """``current/target`` per metric, as ``kubectl get hpa`` prints them."""
    current = {
        m["pods"]["metric"]["name"]: m["pods"]["current"]["averageValue"]
        for m in (hpa.get("status") or {}).get("currentMetrics") or []
        if m.get("type") == "Pods"
    }
    return ", ".join(
        f"{current.get(m['pods']['metric']['name'], '<unknown>')}/{m['pods']['target'].get('averageValue')}"
        for m in hpa["spec"].get("metrics") or []
        if m.get("type") == "Pods"
    )


#: Server-side printing of built-in kinds (what kubectl shows; ``priority`` 1 = ``-o wide`` only).
BUILTIN_COLUMNS: dict[tuple[str, str, str], list[tuple[str, int, Any]]] = {
    ("", "v1", "pods"): [
        ("Ready", 0, _pod_ready),
        ("Status", 0, _pod_status),
        (
            "Restarts",
            0,
            lambda p: sum(
                c.get("restartCount", 0) for c in (p.get("status") or {}).get("containerStatuses") or []
            ),
        ),
        ("Age", 0, _age),
        ("IP", 1, lambda p: (p.get("status") or {}).get("podIP", "<none>")),
        ("Node", 1, lambda p: p.get("spec", {}).get("nodeName", "<none>")),
    ],
    ("apps", "v1", "statefulsets"): [
        (
            "Ready",
            0,
            lambda s: (
                f"{(s.get('status') or {}).get('readyReplicas', 0)}/{s.get('spec', {}).get('replicas', 1)}"
            ),
        ),
        ("Age", 0, _age),
    ],
    ("autoscaling", "v2", "horizontalpodautoscalers"): [
        ("Reference", 0, lambda h: "{kind}/{name}".format(**h["spec"]["scaleTargetRef"])),
        ("Targets", 0, _hpa_targets),
        ("MinPods", 0, lambda h: h["spec"].get("minReplicas", 1)),
        ("MaxPods", 0, lambda h: h["spec"]["maxReplicas"]),
        ("Replicas", 0, lambda h: (h.get("status") or {}).get("currentReplicas", 0)),
        ("Age", 0, _age),
    ],
    ("", "v1", "persistentvolumeclaims"): [
        ("Status", 0, lambda c: (c.get("status") or {}).get("phase", "Pending")),
        ("Capacity", 0, lambda c: ((c.get("status") or {}).get("capacity") or {}).get("storage", "")),
        ("Access Modes", 0, lambda c: ",".join(c.get("spec", {}).get("accessModes") or [])),
        ("Age", 0, _age),
    ],
}


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def response(self) -> aiohttp.web.Response:
        return aiohttp.web.json_response(
            {
                "apiVersion": "v1",
                "kind": "Status",
                "metadata": {},
                "status": "Failure",
                "code": self.code,
                "reason": self.reason,
                "message": self.message,
                "details": self.details,
            },
            status=self.code,
        )


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _matches(obj: dict, label_selector: str | None, field_selector: str | None) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (label_selector or "").split(",")):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term.strip() not in labels:
            return False
    for term in filter(None, (field_selector or "").split(",")):
        k, v = term.replace("==", "=").split("=", 1)
        node: Any = obj
        for part in k.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if str(node) != v:
            return False
    return True


class ThemisEmulator(KubernetesEmulator):
    """kmock's emulator with the object endpoints replaced by a stricter in-memory store."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.kinds: dict[tuple[str, str, str], Kind] = {}
        self.rv = 0
        self.log: list[tuple[int, tuple[str, str, str], dict]] = []  # (rv, resource key, event)
        self.watchers: list[tuple[tuple[str, str, str], str | None, asyncio.Queue]] = []
        self.namespaces: set[str] = {"default", "kube-system"}
        self.columns: dict[tuple[str, str, str], list[dict]] = {}  # CRD additionalPrinterColumns
        self.schemas: dict[tuple[str, str, str], dict] = {}  # CRD openAPIV3Schema per version
        # A CRD's other served versions → its storage version: one store, conversion None
        self.storage_of: dict[tuple[str, str, str], tuple[str, str, str]] = {}
        # subresources.scale per CRD version, and the built-in workloads' (spec/status.replicas)
        self.scales: dict[tuple[str, str, str], dict] = {
            ("apps", "v1", plural): {
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas",
            }
            for plural in ("statefulsets", "deployments")
        }
        for kind in BUILTINS:
            self.register(kind)

    # ---- registry & discovery -------------------------------------------------------------
    def register(
        self, kind: Kind, shortnames: set[str] | None = None, categories: set[str] | None = None
    ) -> None:
        self.kinds[(kind.group, kind.version, kind.plural)] = kind
        self.resources[resource(kind.group, kind.version, kind.plural)] = ResourceInfo(
            kind=kind.kind,
            singular=kind.kind.lower(),
            namespaced=kind.namespaced,
            verbs=set(_VERBS),
            shortnames=shortnames if shortnames is not None else _SHORT.get(kind.plural, set()),
            categories=categories or set(),
            subresources=({"status"} if kind.status else set())
            | ({"scale"} if (kind.group, kind.version, kind.plural) in self.scales else set()),
        )

    async def _serve_version(self, request):  # type: ignore[override]
        payload = await super()._serve_version(request)
        if request.resource is not None and request.resource.group == "":
            payload["groupVersion"] = request.resource.version  # kmock says "/v1"
        for entry in payload.get("resources", []):
            if "/" in entry["name"]:  # subresources carry no short names or categories
                entry.update(verbs=["get", "patch", "update"], shortNames=[], categories=[])
                if entry["name"].endswith("/scale"):
                    entry.update(kind="Scale", group="autoscaling", version="v1")
            else:
                entry.update(verbs=sorted(entry["verbs"]), shortNames=sorted(entry["shortNames"]))
        return payload

    # ---- object store (kmock's ObjectsArray, one history entry per write) ------------------
    def _key(self, kind: Kind, namespace: str | None, name: str) -> tuple:
        return (resource(kind.group, kind.version, kind.plural), namespace if kind.namespaced else None, name)

    def _get(self, kind: Kind, namespace: str | None, name: str) -> dict | None:
        key = self._key(kind, namespace, name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        return copy.deepcopy(self.objects[key].raw)

    def _items(self, kind: Kind, namespace: str | None) -> list[dict]:
        res = resource(kind.group, kind.version, kind.plural)
        return [
            copy.deepcopy(obj.raw)
            for (r, ns, _), obj in list(self.objects.items())
            if r == res and not obj.deleted and (namespace is None or ns == namespace)
        ]

    def _emit(self, kind: Kind, type_: str, obj: dict) -> None:
        key = (kind.group, kind.version, kind.plural)
        event = {"type": type_, "object": copy.deepcopy(obj)}
        self.log.append((int(obj["metadata"]["resourceVersion"]), key, event))
        for wkey, ns, queue in list(self.watchers):
            if wkey == key and (ns is None or ns == obj["metadata"].get("namespace")):
                queue.put_nowait(event)

    def _store(self, kind: Kind, obj: dict, type_: str) -> dict:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        key = self._key(kind, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if key in self.objects:
            self.objects[key].history.append(obj)
        else:
            self.objects[key] = obj
        self._emit(kind, type_, obj)
        return copy.deepcopy(obj)

    def _remove(self, kind: Kind, obj: dict) -> dict:
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[self._key(kind, obj["metadata"].get("namespace"), obj["metadata"]["name"])].delete()
        self._emit(kind, "DELETED", obj)
        return obj

    # ---- request routing -----------------------------------------------------------------
    async def __call__(self, raw_request):  # type: ignore[override]
        # kmock's request parser crashes on /api/v1/namespaces (no namespace after the word),
        # so namespaces are answered here, before it runs.
        parts = [p for p in raw_request.path.split("/") if p]
        if parts[:1] == ["openapi"]:
            return await self._serve_openapi(raw_request, parts[1:])
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) <= 4:
            return await self._serve_namespaces(raw_request, parts[3] if len(parts) == 4 else None)
        return await super().__call__(raw_request)

    # ---- OpenAPI documents (kubectl validation and explain) -----------------------------------
    def _openapi_inputs(self) -> tuple[list[openapi.Resource], list[tuple[openapi.GVK, dict]]]:
        resources = [(k.group, k.version, k.plural, k.kind, k.namespaced) for k in self.kinds.values()]
        crds = [
            ((g, v, self.kinds[(g, v, plural)].kind), schema)
            for (g, v, plural), schema in self.schemas.items()
        ]
        return resources, crds

    async def _serve_openapi(self, raw_request, rest: list[str]) -> aiohttp.web.StreamResponse:
        await raw_request.read()
        async with self._lock:
            resources, crds = self._openapi_inputs()
        if rest == ["v2"]:
            defs = openapi.definitions(crds, openapi.V2_REF)
            served = {(g, v, kind) for g, v, _, kind, _ in resources}
            roots = [n for n, s in defs.items() if set(openapi.gvks_of(s)) & served]
            body = openapi.v2_protobuf(openapi.closure(defs, roots, openapi.V2_REF))
            return aiohttp.web.Response(
                body=body, content_type="application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
            )
        if rest == ["v3"]:
            gvs = [(g, v) for g, v, *_ in resources]
            return self._json(openapi.v3_discovery(gvs, openapi.digest([resources, crds])))
        if rest[:1] == ["v3"] and len(rest) in (3, 4):
            group, version = (
                ("", rest[2]) if rest[1] == "api" else (rest[2], rest[3] if len(rest) == 4 else "")
            )
            if any((g, v) == (group, version) for g, v, *_ in resources):
                defs = openapi.definitions(crds, openapi.V3_REF)
                validated = [gvk for gvk, _ in crds]  # the emulator validates custom resources only
                return self._json(openapi.v3_document(group, version, resources, defs, validated))
        return ApiError(404, "NotFound", f"no OpenAPI document at /openapi/{'/'.join(rest)}").response()

    async def _serve_namespaces(self, raw_request, name: str | None) -> aiohttp.web.StreamResponse:
        await raw_request.read()
        if raw_request.method != "GET":
            return ApiError(405, "MethodNotAllowed", "namespaces are read-only in the emulator").response()
        try:
            if name is not None:
                return self._json(self._namespace(name))
            items = [self._namespace(n) for n in sorted(self.namespaces)]
        except ApiError as e:
            return e.response()
        if raw_request.query.get("watch") not in ("true", "1"):
            return self._json(
                {
                    "apiVersion": "v1",
                    "kind": "NamespaceList",
                    "metadata": {"resourceVersion": str(self.rv)},
                    "items": items,
                }
            )
        response = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(raw_request)
        if not raw_request.query.get("resourceVersion"):
            for item in items:
                await response.write(json.dumps({"type": "ADDED", "object": item}).encode() + b"\n")
        try:  # namespaces never change here: hold the stream open until the client's timeout
            await asyncio.sleep(float(raw_request.query.get("timeoutSeconds") or 1800))
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response

    def _parse(self, path: str) -> tuple[Kind, str | None, str | None, str | None] | None:
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        if not rest:
            return None  # discovery
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        plural, name, sub = rest[0], rest[1] if len(rest) > 1 else None, "/".join(rest[2:]) or None
        key = (group, version, plural)
        kind = self.kinds.get(self.storage_of.get(key, key))
        if kind is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({plural})")
        return kind, namespace, name, sub

    async def _handle(self, request):  # type: ignore[override]
        try:
            parsed = self._parse(request.url.path)
        except ApiError as e:
            return e.response()
        if parsed is None:
            return await super()._handle(request)
        kind, namespace, name, sub = parsed
        method = request.method.value if hasattr(request.method, "value") else str(request.method)
        params = dict(request.params)
        try:
            async with self._lock:
                if method == "GET" and params.get("watch") in ("true", "1"):
                    pass  # streamed below, outside the lock
                elif method == "GET" and name is None:
                    listing = self._list(kind, namespace, params)
                    return self._json(
                        self._table(kind, listing["items"]) if self._wants_table(request, kind) else listing
                    )
                elif method == "GET" and sub == "scale":
                    return self._json(self._scale(kind, self._fetch(kind, namespace, name)))
                elif method == "GET":
                    obj = self._fetch(kind, namespace, name)
                    return self._json(self._table(kind, [obj]) if self._wants_table(request, kind) else obj)
                elif method == "POST" and name is None:
                    return self._json(self._create(kind, namespace, request.data, params), 201)
                elif method == "PUT" and name:
                    return self._json(self._put(kind, namespace, name, sub, request.data))
                elif method == "PATCH" and name:
                    ctype = request.headers.get("Content-Type", "")
                    return self._json(self._patch(kind, namespace, name, sub, request.data, ctype))
                elif method == "DELETE" and name:
                    return self._json(self._delete(kind, namespace, name))
                else:
                    raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")
            return await self._watch(request, kind, namespace, params)
        except ApiError as e:
            return e.response()

    @staticmethod
    def _json(obj: dict, status: int = 200) -> aiohttp.web.Response:
        return aiohttp.web.json_response(obj, status=status)

    def _not_found(self, kind: Kind, name: str) -> ApiError:
        return ApiError(
            404,
            "NotFound",
            f'{kind.plural}.{kind.group or "core"} "{name}" not found',
            {"name": name, "kind": kind.plural, "group": kind.group},
        )

    # ---- verbs ---------------------------------------------------------------------------
    def _fetch(self, kind: Kind, namespace: str | None, name: str) -> dict:
        if kind.plural == "namespaces" and kind.group == "":
            return self._namespace(name)
        obj = self._get(kind, namespace, name)
        if obj is None:
            raise self._not_found(kind, name)
        return obj

    def _namespace(self, name: str) -> dict:
        if name not in self.namespaces:
            raise self._not_found(self.kinds[("", "v1", "namespaces")], name)
        return {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "uid": f"ns-{name}", "resourceVersion": "1"},
            "status": {"phase": "Active"},
        }

    def _wants_table(self, request, kind: Kind) -> bool:
        key = (kind.group, kind.version, kind.plural)
        return "as=Table" in request.headers.get("Accept", "") and (
            key in self.columns or key in BUILTIN_COLUMNS
        )

    def _builtin_table(self, kind: Kind, items: list[dict]) -> dict:
        columns = [
            ("Name", 0, lambda o: o["metadata"]["name"]),
            *BUILTIN_COLUMNS[(kind.group, kind.version, kind.plural)],
        ]
        return {
            "apiVersion": "meta.k8s.io/v1",
            "kind": "Table",
            "metadata": {"resourceVersion": str(self.rv)},
            "columnDefinitions": [
                {
                    "name": n,
                    "type": "string",
                    "format": "name" if n == "Name" else "",
                    "description": n,
                    "priority": p,
                }
                for n, p, _ in columns
            ],
            "rows": [
                {
                    "cells": [fn(o) for _, _, fn in columns],
                    "object": {
                        "apiVersion": "meta.k8s.io/v1",
                        "kind": "PartialObjectMetadata",
                        "metadata": o["metadata"],
                    },
                }
                for o in items
            ],
        }

    def _table(self, kind: Kind, items: list[dict]) -> dict:
        """Server-side printing (what ``kubectl get`` shows) from the CRD's printer columns."""
        if (kind.group, kind.version, kind.plural) not in self.columns:
            return self._builtin_table(kind, items)
        columns = [
            {
                "name": "Name",
                "type": "string",
                "format": "name",
                "description": "Name",
                "priority": 0,
                "jsonPath": ".metadata.name",
            }
        ]
        columns += [
            {
                "name": c["name"],
                "type": c.get("type", "string"),
                "format": c.get("format", ""),
                "description": c.get("description", ""),
                "priority": c.get("priority", 0),
                "jsonPath": c["jsonPath"],
            }
            for c in self.columns[(kind.group, kind.version, kind.plural)]
        ]

        def cell(obj: dict, column: dict) -> Any:
            node: Any = obj
            for part in column["jsonPath"].lstrip(".").split("."):
                node = node.get(part) if isinstance(node, dict) else None
            if column["type"] == "date" and isinstance(node, str):
                then = datetime.datetime.fromisoformat(node.replace("Z", "+00:00"))
                seconds = int((datetime.datetime.now(datetime.UTC) - then).total_seconds())
                return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m"
            return node

        return {
            "apiVersion": "meta.k8s.io/v1",
            "kind": "Table",
            "metadata": {"resourceVersion": str(self.rv)},
            "columnDefinitions": [{k: v for k, v in c.items() if k != "jsonPath"} for c in columns],
            "rows": [
                {
                    "cells": [cell(o, c) for c in columns],
                    "object": {
                        "apiVersion": "meta.k8s.io/v1",
                        "kind": "PartialObjectMetadata",
                        "metadata": o["metadata"],
                    },
                }
                for o in items
            ],
        }

    def _list(self, kind: Kind, namespace: str | None, params: dict) -> dict:
        if kind.plural == "namespaces" and kind.group == "":
            items = [self._namespace(n) for n in sorted(self.namespaces)]
        else:
            items = self._items(kind, namespace)
        items = [i for i in items if _matches(i, params.get("labelSelector"), params.get("fieldSelector"))]
        items.sort(key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]))
        return {
            "apiVersion": kind.api_version,
            "kind": f"{kind.kind}List",
            "metadata": {"resourceVersion": str(self.rv)},
            "items": items,
        }

    def _create(self, kind: Kind, namespace: str | None, body: Any, params: dict) -> dict:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if not meta.get("name"):
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        if kind.namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
            self.namespaces.add(meta["namespace"])
        if self._get(kind, meta.get("namespace"), meta["name"]) is not None:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{kind.plural} "{meta["name"]}" already exists',
                {"name": meta["name"], "kind": kind.plural, "group": kind.group},
            )
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        meta.update(uid=str(uuid.uuid4()), generation=1, creationTimestamp=_now())
        self._admit(kind, obj)
        if params.get("dryRun"):
            return obj
        if kind.plural == "customresourcedefinitions":
            self._register_crd(obj)
        return self._store(kind, obj, "ADDED")

    def _register_crd(self, crd: dict) -> None:
        spec, names = crd["spec"], crd["spec"]["names"]
        storage = next((v["name"] for v in spec.get("versions") or [] if v.get("storage")), None)
        for version in spec.get("versions") or []:
            if storage and version["name"] != storage:  # conversion None: the storage version's objects
                self.storage_of[(spec["group"], version["name"], names["plural"])] = (
                    spec["group"],
                    storage,
                    names["plural"],
                )
            self.columns[(spec["group"], version["name"], names["plural"])] = (
                version.get("additionalPrinterColumns") or []
            )
            if schema := (version.get("schema") or {}).get("openAPIV3Schema"):
                self.schemas[(spec["group"], version["name"], names["plural"])] = schema
            if scale := (version.get("subresources") or {}).get("scale"):
                self.scales[(spec["group"], version["name"], names["plural"])] = scale
            self.register(
                Kind(
                    spec["group"],
                    version["name"],
                    names["plural"],
                    names["kind"],
                    namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                    status="status" in (version.get("subresources") or {}),
                ),
                shortnames=set(names.get("shortNames") or []),
                categories=set(names.get("categories") or []),
            )
        crd["status"] = {
            "acceptedNames": names,
            "storedVersions": [v["name"] for v in spec.get("versions") or [] if v.get("storage")],
            "conditions": [
                {"type": t, "status": "True", "reason": r, "lastTransitionTime": _now(), "message": ""}
                for t, r in (("NamesAccepted", "NoConflicts"), ("Established", "InitialNamesAccepted"))
            ],
        }

    def _write(self, kind: Kind, old: dict, new: dict, sub: str | None, expected_rv: str | None) -> dict:
        """Common tail of PUT and PATCH: conflicts, status isolation, generation, finalizers."""
        if expected_rv and expected_rv != old["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {kind.plural} "{old["metadata"]["name"]}": '
                "the object has been modified; please apply your changes to the latest version",
            )
        if sub == "status":
            new = {**old, "status": new.get("status")}
            if new["status"] is None:
                del new["status"]
        elif sub:
            raise ApiError(404, "NotFound", f"subresource {sub} is not served by the emulator")
        elif kind.status:
            new = {k: v for k, v in new.items() if k != "status"}
            if "status" in old:
                new["status"] = old["status"]
        # Identity is the server's, whatever the client sent.
        for field in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp"):
            if field in old["metadata"]:
                new.setdefault("metadata", {})[field] = old["metadata"][field]
        strip = ("metadata", "status")
        if {k: v for k, v in new.items() if k not in strip} != {
            k: v for k, v in old.items() if k not in strip
        }:
            new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
        else:
            new["metadata"]["generation"] = old["metadata"].get("generation", 1)
        self._admit(kind, new)
        if new == {**old, "metadata": {**old["metadata"]}}:
            return old  # no-op writes do not bump resourceVersion (as on a real server)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            return self._remove(kind, new)
        return self._store(kind, new, "MODIFIED")

    def _admit(self, kind: Kind, obj: dict) -> None:
        """CRD schema defaulting and validation (strict: unknown fields are rejected)."""
        schema = self.schemas.get((kind.group, kind.version, kind.plural))
        if schema is None:
            return
        apply_defaults(schema, obj)
        errors = sorted(structural_validator(schema).iter_errors(obj), key=error_path)
        if errors:
            name = obj["metadata"].get("name")
            causes = [
                {"field": error_path(e), "message": e.message, "reason": "FieldValueInvalid"} for e in errors
            ]
            summary = ", ".join(f"{c['field']}: Invalid value: {c['message']}" for c in causes)
            raise ApiError(
                422,
                "Invalid",
                f'{kind.kind}.{kind.group} "{name}" is invalid: {summary}',
                {"name": name, "group": kind.group, "kind": kind.kind, "causes": causes},
            )

    # ---- the scale subresource (CRDs with subresources.scale) -------------------------------
    def _scale_paths(self, kind: Kind) -> dict:
        paths = self.scales.get((kind.group, kind.version, kind.plural))
        if paths is None:
            raise ApiError(404, "NotFound", f"{kind.plural} has no scale subresource")
        return paths

    @staticmethod
    def _at(obj: dict, path: str | None) -> Any:
        if not path:
            return None
        node: Any = obj
        for part in path.lstrip(".").split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return node

    def _scale(self, kind: Kind, obj: dict) -> dict:
        """The autoscaling/v1 Scale view of ``obj`` (replicas and selector from the CRD's paths)."""
        paths = self._scale_paths(kind)
        meta = obj["metadata"]
        status: dict = {"replicas": self._at(obj, paths.get("statusReplicasPath")) or 0}
        if selector := self._at(obj, paths.get("labelSelectorPath")):
            status["selector"] = selector
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {
                k: meta[k]
                for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if k in meta
            },
            "spec": {"replicas": self._at(obj, paths["specReplicasPath"]) or 0},
            "status": status,
        }

    def _write_scale(self, kind: Kind, old: dict, scale: Any) -> dict:
        replicas = (scale.get("spec") or {}).get("replicas") if isinstance(scale, dict) else None
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise ApiError(422, "Invalid", f"Scale.autoscaling: spec.replicas: Invalid value: {replicas!r}")
        new = copy.deepcopy(old)
        *parents, leaf = self._scale_paths(kind)["specReplicasPath"].lstrip(".").split(".")
        node = new
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = replicas
        expected = (scale.get("metadata") or {}).get("resourceVersion")
        return self._scale(kind, self._write(kind, old, new, None, expected))

    def _put(self, kind: Kind, namespace: str | None, name: str, sub: str | None, body: Any) -> dict:
        old = self._fetch(kind, namespace, name)
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        if sub == "scale":
            return self._write_scale(kind, old, body)
        expected = (body.get("metadata") or {}).get("resourceVersion")
        return self._write(kind, old, copy.deepcopy(body), sub, expected)

    def _patch(
        self, kind: Kind, namespace: str | None, name: str, sub: str | None, body: Any, ctype: str
    ) -> dict:
        old = self._fetch(kind, namespace, name)
        if sub == "scale":
            scale = self._scale(kind, old)
            if "json-patch" in ctype:
                try:
                    patched = jsonpatch.apply_patch(scale, body)
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                    raise ApiError(422, "Invalid", f"json patch failed: {e}") from e
            elif isinstance(body, dict):
                patched = merge_patch(scale, body)
            else:
                raise ApiError(400, "BadRequest", "the patch must be a JSON object")
            return self._write_scale(kind, old, patched)
        if "json-patch" in ctype:
            try:
                new = jsonpatch.apply_patch(old, body)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                raise ApiError(422, "Invalid", f"json patch failed: {e}") from e
            expected = None
        elif "apply-patch" in ctype:
            raise ApiError(415, "UnsupportedMediaType", "server-side apply is not emulated")
        else:  # merge-patch, and strategic-merge-patch approximated as a merge patch
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the patch must be a JSON object")
            expected = (body.get("metadata") or {}).get("resourceVersion")
            new = merge_patch(old, body)
        return self._write(kind, old, new, sub, expected)

    def _delete(self, kind: Kind, namespace: str | None, name: str) -> dict:
        obj = self._fetch(kind, namespace, name)
        if obj["metadata"].get("finalizers"):
            if not obj["metadata"].get("deletionTimestamp"):
                obj["metadata"]["deletionTimestamp"] = _now()
                return self._store(kind, obj, "MODIFIED")
            return obj
        return self._remove(kind, obj)

    async def _watch(
        self, request, kind: Kind, namespace: str | None, params: dict
    ) -> aiohttp.web.StreamResponse:
        key = (kind.group, kind.version, kind.plural)
        queue: asyncio.Queue = asyncio.Queue()
        labels, fields = params.get("labelSelector"), params.get("fieldSelector")
        async with self._lock:
            since = params.get("resourceVersion")
            if since and since not in ("0",) and since.isdigit():
                backlog = [
                    e
                    for rv, k, e in self.log
                    if k == key
                    and rv > int(since)
                    and (namespace is None or e["object"]["metadata"].get("namespace") == namespace)
                ]
                initial: list[dict] = []
            else:
                backlog = []
                initial = [{"type": "ADDED", "object": o} for o in self._items(kind, namespace)]
            self.watchers.append((key, namespace, queue))
        raw = request._raw_request
        response = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        timeout = float(params.get("timeoutSeconds") or 1800)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout

        async def send(event: dict) -> None:
            if event["type"] == "BOOKMARK" or _matches(event["object"], labels, fields):
                await response.write(json.dumps(event).encode() + b"\n")

        try:
            for event in initial + backlog:
                await send(event)
            if params.get("sendInitialEvents") == "true" or params.get("allowWatchBookmarks") == "true":
                await send(
                    {
                        "type": "BOOKMARK",
                        "object": {
                            "apiVersion": kind.api_version,
                            "kind": kind.kind,
                            "metadata": {
                                "resourceVersion": str(self.rv),
                                "annotations": {"k8s.io/initial-events-end": "true"},
                            },
                        },
                    }
                )
            while (left := deadline - loop.time()) > 0:
                try:
                    event = await asyncio.wait_for(queue.get(), timeout=min(left, 5.0))
                except TimeoutError:
                    continue
                await send(event)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.watchers[:] = [w for w in self.watchers if w[2] is not queue]
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    # ---- conveniences for tests ----------------------------------------------------------
    def snapshot(self, api_version: str, plural: str, namespace: str | None = None) -> list[dict]:
        group, _, version = api_version.rpartition("/")
        kind = self.kinds.get((group, version, plural))
        return self._items(kind, namespace) if kind else []


def kubeconfig(url: str, namespace: str = "default") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "emulator",
        "preferences": {},
        "clusters": [{"name": "emulator", "cluster": {"server": url}}],
        "users": [{"name": "emulator", "user": {"token": "emulator-token"}}],
        "contexts": [
            {
                "name": "emulator",
                "context": {"cluster": "emulator", "user": "emulator", "namespace": namespace},
            }
        ],
    }


class EmulatorThread:
    """Runs the emulator on 127.0.0.1 in a background thread with its own event loop."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.emulator: ThemisEmulator | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="k8s-emulator", daemon=True)
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # surfaced by start()
            self._error = e
            self._started.set()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with ThemisEmulator() as emulator, Server(emulator, port=self.port or None) as server:
            self.emulator, self.port = emulator, server.port
            self._started.set()
            await self._stop.wait()

    def start(self) -> EmulatorThread:
        self._thread.start()
        self._started.wait(10)
        if self._error or self.emulator is None:
            raise RuntimeError(f"the emulator did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        if self.loop and self._stop:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def call(self, fn, *args):
        """Run ``fn(emulator, *args)`` on the emulator's loop (thread-safe reads for assertions)."""

        async def run():
            async with self.emulator._lock:
                return fn(self.emulator, *args)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def objects(self, api_version: str, plural: str, namespace: str | None = None) -> list[dict]:
        return self.call(lambda e: e.snapshot(api_version, plural, namespace))

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        path.write_text(yaml.safe_dump(kubeconfig(self.url, namespace)))
        return path


@contextmanager
def running_emulator(port: int = 0) -> Iterator[EmulatorThread]:
    thread = EmulatorThread(port).start()
    try:
        yield thread
    finally:
        thread.stop()


def main(argv: list[str] | None = None) -> None:
    """``python -m themis_testing.emulator --port 8001 --kubeconfig /tmp/kubeconfig``."""
    parser = argparse.ArgumentParser(prog="themis-emulator")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--kubeconfig", type=Path)
    args = parser.parse_args(argv)
    with running_emulator(args.port) as server:
        if args.kubeconfig:
            server.write_kubeconfig(args.kubeconfig)
        print(f"Kubernetes emulator on {server.url}", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()

"""The emulator's OpenAPI documents: what ``kubectl apply`` (validation) and ``kubectl explain``
read from a real API server.

* ``/openapi/v3`` lists one document per group-version; each (``/openapi/v3/apis/G/V``) has the
  kinds' schemas under ``components.schemas`` with ``x-kubernetes-group-version-kind``, and the
  operations per resource. Only custom resources' PATCH takes the ``fieldValidation`` query
  parameter: kubectl then leaves their validation to the server (the emulator validates them
  strictly against the CRD schema) and validates built-in kinds itself against ``/openapi/v2``
  (the emulator does not validate those).
* ``/openapi/v2`` is the Swagger 2.0 document as protobuf (gnostic's ``openapi_v2.Document``, the
  only encoding kubectl accepts there): kubectl parses it before every apply.

Built-in kinds come from the Kubernetes schemas kubernetes-validate ships (JSON Schema, turned
back into OpenAPI here); custom kinds from the installed CRDs' ``openAPIV3Schema``.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

import yaml

KUBERNETES_VERSION = "1.32.0"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

GVK = tuple[str, str, str]  # (group, version, kind)


# ---- definitions ---------------------------------------------------------------------------------
def _openapi(node: object, ref_prefix: str) -> object:
    """JSON Schema (kubernetes-validate's) → OpenAPI: single types, ``$ref`` prefixes, int-or-string."""
    if isinstance(node, list):
        return [_openapi(n, ref_prefix) for n in node]
    if not isinstance(node, dict):
        return node
    if "oneOf" in node and {json.dumps(o.get("type")) for o in node["oneOf"]} >= {
        json.dumps(["string", "null"]),
        json.dumps(["integer", "null"]),
    }:
        rest = {k: v for k, v in node.items() if k != "oneOf"}
        return {**_openapi(rest, ref_prefix), "type": "string", "format": "int-or-string"}
    out: dict = {}
    for key, value in node.items():
        if key in ("$schema", "$id"):
            continue
        if key == "$ref" and isinstance(value, str):
            out[key] = ref_prefix + value.rsplit("/", 1)[-1]
        elif key == "type" and isinstance(value, list):
            types = [t for t in value if t != "null"]
            if types:
                out[key] = types[0]
        elif key in ("properties", "patternProperties") and isinstance(value, dict):
            out[key] = {k: _openapi(v, ref_prefix) for k, v in value.items()}
        else:
            out[key] = _openapi(value, ref_prefix)
    return out


@cache
def _builtin_raw() -> dict[str, dict]:
    import kubernetes_validate

    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    wanted = root / f"v{KUBERNETES_VERSION}-local" / "_definitions.json"
    if not wanted.exists():  # another kubernetes-validate release: its newest schemas
        wanted = sorted(root.glob("v*-local/_definitions.json"))[-1]
    return json.loads(wanted.read_text())["$defs"]


@cache
def builtin_definitions(ref_prefix: str) -> dict[str, dict]:
    """Every built-in definition (cached: read-only for callers)."""
    return {name: _openapi(schema, ref_prefix) for name, schema in _builtin_raw().items()}  # type: ignore[misc]


def crd_definition_name(group: str, version: str, kind: str) -> str:
    """``themisdb.io`` v1alpha1 ThemisCluster → ``io.themisdb.v1alpha1.ThemisCluster`` (as a real
    API server names it)."""
    return ".".join([*reversed(group.split(".")), version, kind])


def crd_definition(group: str, version: str, kind: str, schema: Mapping, ref_prefix: str) -> dict:
    out = json.loads(json.dumps(schema))
    props = out.setdefault("properties", {})
    props["metadata"] = {"$ref": ref_prefix + OBJECT_META, "description": "Standard object's metadata."}
    props.setdefault("apiVersion", {"type": "string"})
    props.setdefault("kind", {"type": "string"})
    out["x-kubernetes-group-version-kind"] = [{"group": group, "kind": kind, "version": version}]
    return out


def definitions(crds: Iterable[tuple[GVK, Mapping]], ref_prefix: str) -> dict[str, dict]:
    """Built-in definitions plus one per CRD version (its schema)."""
    defs = dict(builtin_definitions(ref_prefix))
    for (group, version, kind), schema in crds:
        defs[crd_definition_name(group, version, kind)] = crd_definition(
            group, version, kind, schema, ref_prefix
        )
    return defs


def gvks_of(schema: Mapping) -> list[GVK]:
    return [
        (g["group"], g["version"], g["kind"]) for g in schema.get("x-kubernetes-group-version-kind") or []
    ]


def closure(defs: Mapping[str, dict], roots: Iterable[str], ref_prefix: str) -> dict[str, dict]:
    """``roots`` and every definition they reach through ``$ref``."""
    seen: dict[str, dict] = {}
    todo = [r for r in roots if r in defs]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen[name] = defs[name]
        for ref in _refs(defs[name]):
            target = ref.removeprefix(ref_prefix)
            if target in defs and target not in seen:
                todo.append(target)
    return dict(sorted(seen.items()))


def _refs(node: object) -> Iterable[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


# ---- OpenAPI v3 ----------------------------------------------------------------------------------
V3_REF = "#/components/schemas/"

Resource = tuple[str, str, str, str, bool]  # (group, version, plural, kind, namespaced)


def gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def v3_document(
    group: str,
    version: str,
    resources: Iterable[Resource],
    defs: Mapping[str, dict],
    validated: Iterable[GVK] = (),
) -> dict:
    """One group-version's document: its kinds' schemas and, per resource, the operations kubectl
    inspects (PATCH takes ``fieldValidation`` for the ``validated`` kinds only)."""
    validated = set(validated)
    paths: dict[str, dict] = {}
    roots: list[str] = []
    by_gvk = {gvk: name for name, schema in defs.items() for gvk in gvks_of(schema)}
    for g, v, plural, kind, namespaced in resources:
        if (g, v) != (group, version):
            continue
        name = by_gvk.get((g, v, kind))
        if name is None:
            continue
        roots.append(name)
        base = "/" + gv_path(g, v) + ("/namespaces/{namespace}" if namespaced else "")
        gvk = {"group": g, "version": v, "kind": kind}
        ok = {
            "200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": V3_REF + name}}}}
        }
        params = ("dryRun", "fieldManager") + (("fieldValidation",) if (g, v, kind) in validated else ())
        query = [{"name": p, "in": "query", "schema": {"type": "string"}} for p in params]
        item = {
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
            "get": {
                "operationId": f"read{kind}",
                "responses": ok,
                "x-kubernetes-action": "get",
                "x-kubernetes-group-version-kind": gvk,
            },
            "put": {
                "operationId": f"replace{kind}",
                "parameters": query,
                "responses": ok,
                "x-kubernetes-action": "put",
                "x-kubernetes-group-version-kind": gvk,
            },
            "patch": {
                "operationId": f"patch{kind}",
                "parameters": query,
                "responses": ok,
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
            },
        }
        paths[f"{base}/{plural}/{{name}}"] = item
        paths[f"{base}/{plural}"] = {
            "post": {
                "operationId": f"create{kind}",
                "parameters": query,
                "responses": ok,
                "x-kubernetes-action": "post",
                "x-kubernetes-group-version-kind": gvk,
            },
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (Themis emulator)", "version": f"v{KUBERNETES_VERSION}"},
        "paths": paths,
        "components": {"schemas": closure(defs, roots, V3_REF)},
    }


def v3_discovery(group_versions: Iterable[tuple[str, str]], digest: str) -> dict:
    return {
        "paths": {
            gv_path(g, v): {"serverRelativeURL": f"/openapi/v3/{gv_path(g, v)}?hash={digest}"}
            for g, v in sorted(set(group_versions))
        }
    }


def digest(obj: object) -> str:
    return hashlib.sha512(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:128].upper()


# ---- OpenAPI v2 as protobuf (gnostic openapi_v2.Document) ----------------------------------------
V2_REF = "#/definitions/"


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _bytes(field: int, data: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _str(field: int, s: str) -> bytes:
    return _bytes(field, s.encode()) if s else b""


def _int(field: int, n: int) -> bytes:
    return _varint(field << 3) + _varint(n)


def _bool(field: int, b: bool) -> bytes:
    return _int(field, 1) if b else b""


def _double(field: int, x: float) -> bytes:
    return _varint(field << 3 | 1) + struct.pack("<d", float(x))


def _named_any(name: str, value: object) -> bytes:
    """NamedAny{name=1, value=2: Any{yaml=2}}: vendor extensions travel as YAML."""
    return _str(1, name) + _bytes(2, _str(2, yaml.safe_dump(value, default_flow_style=False)))


def _schema(s: Mapping) -> bytes:
    """openapi_v2.Schema: the fields kubectl's models read (refs, types, properties, items, maps,
    required, descriptions, formats, bounds and vendor extensions)."""
    out = _str(1, s.get("$ref", "")) + _str(2, s.get("format", "")) + _str(4, s.get("description", ""))
    for field, key in ((7, "maximum"), (9, "minimum")):
        if isinstance(s.get(key), int | float) and not isinstance(s.get(key), bool):
            out += _double(field, s[key])
    for field, key in ((11, "maxLength"), (12, "minLength"), (14, "maxItems"), (15, "minItems")):
        if isinstance(s.get(key), int) and not isinstance(s.get(key), bool):
            out += _int(field, s[key])
    out += _str(13, s.get("pattern", ""))
    for name in s.get("required") or []:
        out += _str(19, name)
    extra = s.get("additionalProperties")
    if isinstance(extra, dict):
        out += _bytes(21, _bytes(1, _schema(extra)))
    elif isinstance(extra, bool):
        out += _bytes(21, _bool(2, extra) or _int(2, 0))
    if isinstance(s.get("type"), str):
        out += _bytes(22, _str(1, s["type"]))
    if isinstance(s.get("items"), dict):
        out += _bytes(23, _bytes(1, _schema(s["items"])))
    if isinstance(s.get("properties"), dict):
        props = b"".join(_bytes(1, _str(1, k) + _bytes(2, _schema(v))) for k, v in s["properties"].items())
        out += _bytes(25, props)
    for key, value in s.items():
        if key.startswith("x-"):
            out += _bytes(31, _named_any(key, value))
    return out


def v2_protobuf(defs: Mapping[str, dict]) -> bytes:
    """Document{swagger=1, info=2, paths=8, definitions=9}."""
    info = _str(1, "Kubernetes (Themis emulator)") + _str(2, f"v{KUBERNETES_VERSION}")
    definitions = b"".join(_bytes(1, _str(1, name) + _bytes(2, _schema(s))) for name, s in defs.items())
    return _str(1, "2.0") + _bytes(2, info) + _bytes(8, b"") + _bytes(9, definitions)

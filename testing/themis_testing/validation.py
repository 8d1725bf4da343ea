"""Validation used by the tests: built manifests via kubernetes-validate, CRs via the CRD schema.

The emulator validates nothing, so these are the checks a real API server would make:
built-in kinds against the published OpenAPI of each supported Kubernetes version (strict:
unknown fields fail), custom resources against the CRD's openAPIV3Schema with unknown fields
rejected as ``kubectl``'s default server-side strict field validation would.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path

import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "crds"
EXAMPLES_DIR = REPO / "examples"
#: Oldest and newest Kubernetes versions we support.
KUBERNETES_VERSIONS = ("1.29", "1.37")
#: Kinds kubernetes-validate knows (others come from CRDs, e.g. ServiceMonitor).
_BUILTIN_GROUPS = {
    "v1",
    "apps/v1",
    "policy/v1",
    "batch/v1",
    "rbac.authorization.k8s.io/v1",
    "apiextensions.k8s.io/v1",
}


def load_crds() -> dict[str, dict]:
    """Kind → CRD document, read from crds/."""
    crds = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                crds[doc["spec"]["names"]["kind"]] = doc
    return crds


def _strict(schema: dict) -> dict:
    """Add ``additionalProperties: false`` wherever a structural schema lists its properties."""
    schema = copy.deepcopy(schema)

    def walk(node: dict) -> None:
        if not isinstance(node, dict):
            return
        if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            node.setdefault("additionalProperties", False)
        for child in (node.get("properties") or {}).values():
            walk(child)
        if isinstance(node.get("items"), dict):
            walk(node["items"])
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"])

    walk(schema)
    # metadata is validated by the API server itself, not the CRD schema.
    schema.setdefault("properties", {})["metadata"] = {"type": "object"}
    return schema


def structural_validator(schema: dict) -> jsonschema.Draft4Validator:
    """A validator for one CRD version's openAPIV3Schema (OpenAPI 3.0 ≈ JSON Schema draft 4)."""
    return jsonschema.Draft4Validator(_strict(schema), format_checker=jsonschema.FormatChecker())


def apply_defaults(schema: dict, value: object) -> None:
    """Fill in ``default``s in place, as the API server does before validation and storage."""
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key == "metadata":
                continue
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                apply_defaults(sub, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(schema["items"], item)


def error_path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "<root>"


@cache
def _validator(kind: str) -> jsonschema.Draft4Validator:
    crd = load_crds()[kind]
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    return structural_validator(version["schema"]["openAPIV3Schema"])


def validate_custom_resource(obj: dict) -> None:
    """Raise ``jsonschema.ValidationError`` when the API server would reject ``obj``."""
    _validator(obj["kind"]).validate(obj)


def custom_resource_errors(obj: dict) -> list[str]:
    return [e.message for e in _validator(obj["kind"]).iter_errors(obj)]


def validate_manifest(obj: dict, versions: tuple[str, ...] = KUBERNETES_VERSIONS) -> None:
    """Strictly validate a built-in manifest for every supported Kubernetes version."""
    import kubernetes_validate

    if obj["apiVersion"] not in _BUILTIN_GROUPS:
        raise ValueError(f"{obj['apiVersion']} {obj['kind']} is not a built-in kind")
    for version in versions:
        kubernetes_validate.validate(obj, version, strict=True)


def load_example(name: str) -> dict:
    return yaml.safe_load((EXAMPLES_DIR / name).read_text())


def schema_defaults(kind: str) -> dict:
    """The ``default`` of every top-level spec field (to compare with the pydantic models)."""
    crd = load_crds()[kind]
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]

    def defaults(node: dict) -> object:
        if node.get("type") == "object" and "properties" in node:
            # an object none of whose fields has a default has none itself
            found = {k: d for k, v in node["properties"].items() if (d := defaults(v)) is not None}
            return found or None
        return node.get("default")

    return defaults(spec)  # type: ignore[return-value]

"""Spec: /openapi.json documents the statuses a shard really answers, each error in the standard
``{"error": {"code", "message"}}`` shape, and never FastAPI's 422 (validation errors are 400)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from themis_core.access_policy import Role
from themis_core.api_keys import entry_for, new_key
from themis_shard.api.openapi import ERRORS
from themis_shard.app import create_app
from themis_shard.auth.settings import AuthSettings
from themis_shard.llm.settings import LLMSettings
from themis_shard.settings import Settings

METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}
ERROR_REF = {"$ref": "#/components/schemas/Error"}


def schema_of(tmp_path: Path, **overrides) -> dict:
    """The schema of a shard with an engine (its routes exist without loading the model)."""
    settings = Settings(data_dir=tmp_path / "shard", llm=LLMSettings(enabled=True), **overrides)
    return create_app(settings).openapi()


def operations(schema: dict):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield method.upper(), path, operation


def error_schema(operation: dict, status: int) -> dict:
    return operation["responses"][str(status)]["content"]["application/json"]["schema"]


def test_the_status_table_names_exactly_the_public_operations(tmp_path: Path) -> None:
    documented = {(method, path) for method, path, _ in operations(schema_of(tmp_path))}
    assert documented == set(ERRORS)
    assert not any(path.startswith("/internal") for _, path in documented)


def test_no_operation_documents_422_and_every_validated_one_documents_400(tmp_path: Path) -> None:
    schema = schema_of(tmp_path)
    for _, _, operation in operations(schema):
        assert "422" not in operation["responses"]
        if "requestBody" in operation or operation.get("parameters"):
            assert error_schema(operation, 400) == ERROR_REF
        if "requestBody" in operation:
            assert error_schema(operation, 413) == ERROR_REF  # the body limit, on every route
    assert "HTTPValidationError" not in schema["components"]["schemas"]


def test_the_error_schema_is_the_body_the_server_answers(tmp_path: Path, client: TestClient) -> None:
    error = schema_of(tmp_path)["components"]["schemas"]["Error"]
    assert error["required"] == ["error"]
    detail = schema_of(tmp_path)["components"]["schemas"]["ErrorDetail"]
    assert set(detail["required"]) == {"code", "message"}
    r = client.put("/v1/collections/books/documents/dune", json=[1, 2])
    assert r.status_code == 400 and set(r.json()["error"]) == {"code", "message"}


def test_document_routes_document_not_found_conflict_and_unavailable(tmp_path: Path) -> None:
    paths = schema_of(tmp_path)["paths"]
    document = paths["/v1/collections/{collection}/documents/{key}"]
    assert {"200", "400", "404", "503"} <= set(document["get"]["responses"])
    assert {"200", "400", "404", "409", "413", "503"} <= set(document["put"]["responses"])
    assert error_schema(document["put"], 409) == ERROR_REF
    assert {"409", "413"} <= set(paths["/v1/transactions"]["post"]["responses"])


def test_inference_routes_document_overload_and_their_streams(tmp_path: Path) -> None:
    paths = schema_of(tmp_path)["paths"]
    for path in ("/v1/infer", "/v1/completions", "/v1/chat/completions", "/v1/rag"):
        responses = paths[path]["post"]["responses"]
        assert {"429", "503"} <= set(responses)
        assert "text/event-stream" in responses["200"]["content"]
    assert "application/x-ndjson" in paths["/v1/infer:batch"]["post"]["responses"]["200"]["content"]


def test_routed_inference_says_which_shard_answered(tmp_path: Path) -> None:
    schema = schema_of(tmp_path)
    for path in ("/v1/infer", "/v1/completions", "/v1/chat/completions"):
        assert "X-Themis-Shard" in schema["paths"][path]["post"]["responses"]["200"]["headers"]
    bodies = schema["components"]["schemas"]
    for name in ("InferBody", "CompletionBody", "ChatBody"):  # the router's own field is not offered
        assert "prompt" in bodies[name]["properties"] or "messages" in bodies[name]["properties"]
        assert "resume" not in bodies[name]["properties"]


def test_health_routes_say_what_they_answer(tmp_path: Path) -> None:
    paths = schema_of(tmp_path)["paths"]
    assert set(paths["/metrics"]["get"]["responses"]["200"]["content"]) == {"text/plain"}
    ready = paths["/ready"]["get"]["responses"]
    assert ready["503"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Readiness"}
    assert set(paths["/health"]["get"]["responses"]) == {"200"}


@pytest.mark.parametrize("auth", [False, True])
def test_governed_routes_document_401_and_403_only_with_keys_on(tmp_path: Path, auth: bool) -> None:
    keys = AuthSettings(enabled=True, keys=entry_for(new_key(), Role.admin).line())
    paths = schema_of(tmp_path, **({"auth": keys} if auth else {}))["paths"]
    responses = paths["/v1/collections"]["get"]["responses"]
    assert ({"401", "403"} <= set(responses)) is auth
    assert "401" not in paths["/health"]["get"]["responses"]

"""AQL errors: every way a query can be wrong is a 4xx with a stable code, never a 500."""

from __future__ import annotations

from ..errors import BadRequest


class AqlSyntaxError(BadRequest):
    """The text does not parse; the message names line, column and what was expected."""

    code = "aql_syntax_error"

    def __init__(self, message: str, line: int, column: int, expected: list[str]) -> None:
        super().__init__(message)
        self.line = line
        self.column = column
        self.expected = expected


def semantic(message: str, code: str = "aql_semantic_error") -> BadRequest:
    return BadRequest(message, code=code)


def type_error(message: str) -> BadRequest:
    return BadRequest(message, code="aql_type_error")


def missing_bind(name: str) -> BadRequest:
    return BadRequest(
        f"bind parameter @{name} is used but not given in bind_vars", code="aql_missing_bind_var"
    )


def unknown_collection(name: str) -> BadRequest:
    return BadRequest(f"collection {name!r} does not exist", code="aql_unknown_collection")


def limit_exceeded(message: str, code: str) -> BadRequest:
    return BadRequest(message, code=code)

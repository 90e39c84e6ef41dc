"""Metadata filters: ``year >= 2020 and source in ["pubmed"]`` to a parameterised SQL condition over declared fields.

The syntax is a small part of Python's expression grammar (comparisons, ``in``/``not in`` lists, ``and``/``or``/
``not``, parentheses), parsed with ``ast`` and translated node by node, so nothing is evaluated and every value reaches
SQLite as a bound parameter. Fields must be declared filterable when the store is made: each has a typed column.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from embedkit.errors import EmbedkitError

FIELD_TYPES = {"int": "INTEGER", "real": "REAL", "text": "TEXT"}
MAX_LENGTH = 10_000  # characters of one filter expression
FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_COMPARE = {ast.Eq: "=", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def check_fields(fields: Any, flag: str = "--fields") -> dict[str, str]:
    """Declared filterable fields ``{name: int|real|text}``, names usable as SQL column suffixes."""
    if not isinstance(fields, dict):
        raise EmbedkitError("filterable fields are a mapping of name to int, real or text", field=flag)
    for name, kind in fields.items():
        if not isinstance(name, str) or not FIELD_NAME.match(name):
            raise EmbedkitError(f"field name {name!r} must be a letter or _ then letters, digits or _", field=flag)
        if kind not in FIELD_TYPES:
            raise EmbedkitError(f"field {name!r} has type {kind!r}; use int, real or text", field=flag)
    return dict(fields)


def parse_fields(text: str, flag: str = "--fields") -> dict[str, str]:
    """``year:int,source:text`` (the command line's form) to a fields mapping."""
    fields: dict[str, str] = {}
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        name, _, kind = part.partition(":")
        if name in fields:
            raise EmbedkitError(f"field {name!r} is declared twice", field=flag)
        fields[name.strip()] = kind.strip() or "text"
    return check_fields(fields, flag)


def check_value(value: Any, kind: str, where: str, field: str | None = None) -> Any:
    """A metadata value for a field of type ``kind`` (``None``: absent); a wrong type is refused, never coerced."""
    if value is None:
        return None
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "real": isinstance(value, (int, float)) and not isinstance(value, bool) and value == value,
        "text": isinstance(value, str),
    }[kind]
    if not ok:
        raise EmbedkitError(f"{where}: {value!r} is not {'an' if kind == 'int' else 'a'} {kind}", field=field)
    if kind == "int" and not -(2**63) <= value < 2**63:
        message = f"{where}: {float(value):.6g} is outside the 64-bit integers an int field stores"
        raise EmbedkitError(message, field=field)
    return float(value) if kind == "real" else value


def compile_filter(expression: str, fields: dict[str, str], flag: str = "--filter") -> tuple[str, list[Any]]:
    """``(sql, parameters)`` for a filter expression over ``fields``; one line naming ``flag`` when it is wrong."""
    if not isinstance(expression, str) or not expression.strip():
        raise EmbedkitError("an empty filter; give a condition such as 'year >= 2020'", field=flag)
    if len(expression) > MAX_LENGTH:
        raise EmbedkitError(f"holds {len(expression)} characters; at most {MAX_LENGTH}", field=flag)
    if "\0" in expression:  # Python's parser: a ValueError on some 3.11 releases, a SyntaxError on others
        raise EmbedkitError(f"a NUL character at column {expression.index(chr(0)) + 1}", field=flag)
    try:
        tree = ast.parse(expression.strip(), mode="eval")
        params: list[Any] = []
        return _node(tree.body, fields, params, flag), params
    except SyntaxError as err:
        raise EmbedkitError(f"not a filter expression ({err.msg} at column {err.offset})", field=flag) from None
    except (RecursionError, MemoryError):
        raise EmbedkitError("nested too deeply", field=flag) from None


def _node(node: ast.AST, fields: dict[str, str], params: list[Any], flag: str) -> str:
    if isinstance(node, ast.BoolOp):
        joiner = " AND " if isinstance(node.op, ast.And) else " OR "
        return "(" + joiner.join(_node(value, fields, params, flag) for value in node.values) + ")"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return f"(NOT {_node(node.operand, fields, params, flag)})"
    if isinstance(node, ast.Compare):
        parts, left = [], node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            parts.append(_compare(left, op, right, fields, params, flag))
            left = right
        return "(" + " AND ".join(parts) + ")"
    raise EmbedkitError(f"'{ast.unparse(node)}' is not a condition (use ==, <, in, and, or, not)", field=flag)


def _compare(left: ast.AST, op: ast.cmpop, right: ast.AST, fields: dict, params: list, flag: str) -> str:
    if isinstance(right, ast.Name) and not isinstance(left, ast.Name) and type(op) in _COMPARE:
        flipped = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE}.get(type(op), type(op))
        left, op, right = right, flipped(), left  # 2020 <= year is year >= 2020
    if not isinstance(left, ast.Name):
        raise EmbedkitError(f"'{ast.unparse(left)}' is not a field name", field=flag)
    name = left.id
    if name not in fields:
        declared = ", ".join(sorted(fields)) or "none"
        raise EmbedkitError(f"'{name}' is not a filterable field (declared: {declared})", field=flag)
    column, kind = f'"f_{name}"', fields[name]
    if isinstance(op, (ast.In, ast.NotIn)):
        if not isinstance(right, (ast.List, ast.Tuple, ast.Set)) or not right.elts:
            raise EmbedkitError(f"'{name} in ...' needs a non-empty list such as [1, 2]", field=flag)
        values = [_constant(element, name, kind, flag) for element in right.elts]
        params.extend(values)
        negated = "NOT " if isinstance(op, ast.NotIn) else ""
        return f"{column} {negated}IN ({', '.join('?' * len(values))})"
    if type(op) not in _COMPARE:
        raise EmbedkitError(f"'{name} is ...' is not a comparison; use == or !=", field=flag)
    params.append(_constant(right, name, kind, flag))
    return f"{column} {_COMPARE[type(op)]} ?"


def _constant(node: ast.AST, name: str, kind: str, flag: str) -> Any:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        node = ast.Constant(-node.operand.value) if isinstance(node.operand.value, (int, float)) else node
    if not isinstance(node, ast.Constant) or node.value is None:
        raise EmbedkitError(f"'{ast.unparse(node)}' is not a value to compare '{name}' with", field=flag)
    value = node.value
    if kind == "real" and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind == "int" and isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        return check_value(value, kind, f"'{name}'")
    except EmbedkitError as err:
        raise EmbedkitError(str(err), field=flag) from None

"""The variables a template version declares, as a JSON Schema, and the check of a request.

A template version names every variable it uses and its shape in the catalog (see
docs/templates.md, "Variables"):

    [template.variables]
    order_id = "text"
    total = "number"
    ships_on = { type = "date", optional = true }
    lines = { type = "list", of = "text" }
    items = { type = "list", fields = { name = "text", qty = "number" } }

`schema_of` turns that into a JSON Schema (draft 2020-12), stored on the version and served
to apps (`GET /v1/templates/{key}`); `refusals` checks a request's variables against it and
says, for each problem, which variable, what shape it must have and what is wrong, without
quoting the value (a value may be personal data).

Each property carries its shape in words (`description`), so the schema explains itself and
a refusal is worded from the schema alone, whichever version wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

SCALARS = ("text", "number", "date")
"""Shapes of one value; a list holds these or objects whose fields are these."""

_ISO_DATE = (
    r"^\d{4}-\d{2}-\d{2}"
    r"([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$"
)
_SCALAR_SCHEMAS: dict[str, dict[str, Any]] = {
    # A number prints as written, so a text variable takes one (`order_id = 77`): what
    # rendered before versions declared their variables still does.
    "text": {"type": ["string", "number"], "description": "text"},
    "number": {"type": "number", "description": "a number"},
    "date": {
        "type": "string",
        "pattern": _ISO_DATE,
        "description": "a date (ISO 8601, e.g. 2026-12-08 or 2026-12-08T18:30:00Z)",
    },
}
_OPTIONS = frozenset({"type", "optional", "of", "fields"})


class DeclarationError(ValueError):
    """A variable's declaration is not one of the shapes a catalog can declare."""


def _scalar(spec: object, where: str) -> tuple[dict[str, Any], bool]:
    """A scalar shape (`"text"` or `{ type = "text", optional = true }`) and if required."""
    name: object
    optional: object
    if isinstance(spec, str):
        name, optional = spec, False
    elif isinstance(spec, Mapping) and set(spec) <= {"type", "optional"}:
        name, optional = spec.get("type"), spec.get("optional", False)
    else:
        raise DeclarationError(
            f"{where}: must be one of {', '.join(SCALARS)}, or {{ type = ..., optional = true }}"
        )
    if name not in SCALARS:
        raise DeclarationError(f"{where}: unknown shape {name!r} (one of {', '.join(SCALARS)})")
    if not isinstance(optional, bool):
        raise DeclarationError(f"{where}: 'optional' must be true or false")
    return dict(_SCALAR_SCHEMAS[str(name)]), not optional


def _variable(spec: object, where: str) -> tuple[dict[str, Any], bool]:
    """One variable's schema and whether it is required."""
    if not (isinstance(spec, Mapping) and spec.get("type") == "list"):
        return _scalar(spec, where)
    unknown = set(spec) - _OPTIONS
    if unknown:
        raise DeclarationError(f"{where}: unknown option(s) {sorted(unknown)}")
    optional = spec.get("optional", False)
    if not isinstance(optional, bool):
        raise DeclarationError(f"{where}: 'optional' must be true or false")
    if ("of" in spec) == ("fields" in spec):
        raise DeclarationError(
            f"{where}: a list declares either 'of' (a shape) or 'fields' (its objects' fields)"
        )
    if "of" in spec:
        item, _ = _scalar(spec["of"], f"{where}.of")
        described = f"a list of {item['description']}"
        return {"type": "array", "items": item, "description": described}, not optional
    fields = spec["fields"]
    if not isinstance(fields, Mapping) or not fields:
        raise DeclarationError(f"{where}.fields: must name at least one field")
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, field in fields.items():
        properties[name], needed = _scalar(field, f"{where}.fields.{name}")
        if needed:
            required.append(name)
    described = f"a list of objects with fields {', '.join(properties)}"
    item = {"type": "object", "properties": properties, "required": required}
    return {"type": "array", "items": item, "description": described}, not optional


def schema_of(declarations: Mapping[str, object]) -> dict[str, Any]:
    """The JSON Schema of a template version's variables, from its catalog declarations.

    Variables the template does not declare are allowed in a request (an app may send one
    set of variables to every channel's template) and ignored by it.

    Raises:
        DeclarationError: A declaration is not a known shape; the message names it
            (``variables.items.fields.qty: unknown shape 'int'``).
    """
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, spec in declarations.items():
        properties[name], needed = _variable(spec, f"variables.{name}")
        if needed:
            required.append(name)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": properties,
        "required": required,
    }


def declared(schema: Mapping[str, Any]) -> list[str]:
    """The variables a schema declares, in declaration order."""
    return list(schema.get("properties", {}))


def _kind(value: object) -> str:
    """What a value is, in words, never the value itself."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list | tuple):
        return "a list"
    return "an object"


def _absent(error: ValidationError) -> str:
    """The property a `required` error is about (jsonschema reports one per property)."""
    return next(
        n for n in error.validator_value if error.message == f"{n!r} is a required property"
    )


def _refusal(error: ValidationError, schema: Mapping[str, Any]) -> tuple[str, str]:
    """The variable an error is about and the sentence that refuses it."""
    path = list(error.absolute_path)
    name = str(path[0])
    shape = schema["properties"][name]["description"]
    head = f"variable {name!r} must be {shape}"
    if error.validator == "pattern":
        return name, f"{head}; {_where(path)} is text that is not one"
    if len(path) == 1:
        return name, f"{head}; it is {_kind(error.instance)}"
    index = path[1]
    if len(path) == 2 and error.validator == "required":
        return name, f"{head}; item {index} lacks {_absent(error)!r}"
    if len(path) == 2:
        return name, f"{head}; item {index} is {_kind(error.instance)}"
    field = path[2]
    return name, f"{head}; item {index}'s {field!r} is {_kind(error.instance)}"


def _where(path: list[Any]) -> str:
    """`it`, `item 2` or `item 2's 'qty'`: where in a variable a problem is."""
    if len(path) == 1:
        return "it"
    return f"item {path[1]}" + (f"'s {path[2]!r}" if len(path) > 2 else "")


def refusals(schema: Mapping[str, Any], variables: Mapping[str, object]) -> list[str]:
    """Why `variables` do not fit `schema`: one sentence per problem, none when they fit.

    Every sentence names the variable and the shape it must have, without quoting the value
    (``variable 'items' must be a list of objects with fields name, qty; item 0 lacks
    'qty'``); the absent required ones come first, in one sentence (``needs starts_at
    (text), hold_until (text), missing from the variables``).
    """
    validator = Draft202012Validator(schema)
    order = {name: i for i, name in enumerate(declared(schema))}
    absent: list[str] = []
    found: list[tuple[str, str]] = []
    for error in validator.iter_errors(dict(variables)):
        if not error.absolute_path:  # only `required` applies to the whole request
            absent.append(_absent(error))
        else:
            found.append(_refusal(error, schema))
    out = []
    if absent:
        absent.sort(key=lambda n: order[n])
        shapes = ", ".join(f"{n} ({schema['properties'][n]['description']})" for n in absent)
        out.append(f"needs {shapes}, missing from the variables")
    found.sort(key=lambda f: (order.get(f[0], len(order)), f[1]))
    return out + [text for _, text in found]


_SAMPLES: dict[str, object] = {"text": "text", "number": 1, "date": "2026-12-08"}


def _sample_of(prop: Mapping[str, Any], name: str) -> object:
    if prop.get("type") == "array":
        item = prop.get("items", {})
        if item.get("type") == "object":
            return [{field: _sample_of(spec, field) for field, spec in item["properties"].items()}]
        return [_sample_of(item, name)]
    if prop.get("type") == "number":
        return _SAMPLES["number"]
    if "pattern" in prop:
        return _SAMPLES["date"]
    return name  # a text variable's sample is its own name: the preview shows where it lands


def sample(schema: Mapping[str, Any]) -> dict[str, object]:
    """Sample variables that fit `schema`: what a reviewer edits to preview a version.

    Every declared variable is included, optional ones too, so a preview shows every branch
    that prints them. A text variable's sample is its name, a number 1, a date 2026-12-08,
    a list one item.
    """
    return {name: _sample_of(prop, name) for name, prop in schema.get("properties", {}).items()}

"""The API's contract as a client generator reads it: operation ids, tags, servers, the
headers and statuses the server sends, and the same document in OpenAPI 3.0.

Each thing is derived in one place, from what a route already declares, so a route added
later is described without anyone remembering to: its operation id is its function's name
in camelCase (`create_intent` -> `createIntent`, `operation_id`), its tag is its audience,
read from the access it declares (`audience`), and the headers and statuses that follow
from how the app works (the body limit, Idempotency-Key) are added to every operation
they apply to (`declare_what_the_server_sends`). docs/api.md, "The contract".

Why a 3.0 copy: several Go and Java generators read 3.1 only in part. No converter on the
package index fits (the one there fetches a schema from the network when it runs and
writes a file into the working directory), and FastAPI's documents use few 3.1 forms, so
`as_openapi_30` rewrites those few; `tests/api/test_openapi_contract.py` validates its
output as 3.0.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from api.auth import app_routes, route_access
from domain.principals import Access, Role

OPENAPI_30_URL = "/openapi-3.0.json"
"""Where the 3.0 copy of `/openapi.json` is served."""

TAGS: dict[str, str] = {
    "intents": "For apps (role `app`): record an intent, read and list the intents the "
    "app recorded. People's roles read every app's.",
    "consents": "For apps: a recipient's consent, recorded with its source and evidence.",
    "attachments": "For apps: a file an email intent carries, uploaded before the intent.",
    "templates": "For apps and people: the templates, with the variables each version takes "
    "(a JSON Schema), and the policy versions. Admins import new versions.",
    "operations": "For support and operators (roles `viewer`, `operator`): find an intent "
    "by its recipient, cancel, approve a resend, settle an ambiguous attempt, consent and "
    "suppression records.",
    "administration": "For admins: principals and their tokens, erasure of a recipient.",
    "provider-webhooks": "For SMS and email providers: delivery receipts, inbound "
    "messages and events, each authenticated by the provider's signature.",
    "recipients": "For recipients: the one-click unsubscribe link (RFC 8058).",
    "health": "For monitoring: liveness, readiness and metrics (no token).",
}
"""Every tag an operation may carry, by audience, in the order the document lists them."""

HTTP_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


def operation_id(route: APIRoute) -> str:
    """The route function's name in camelCase: FastAPI's `generate_unique_id_function`
    for every route of the app (its default is `create_intent_v1_intents_post`)."""
    head, *rest = route.name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def audience(access: Access | None, declared: str | None) -> str | None:
    """The tag of an operation: the one its router declares when an app may call it
    (`intents`, `consents`, ...) or when it takes no token (webhooks, health);
    `administration` for admins' routes, `operations` for the rest (people's roles)."""
    if access is None or Role.APP.may(access):
        return declared
    if access is Access.ADMINISTER:
        return "administration"
    return "operations"


LOCATION = {
    "description": "Where the created resource is read.",
    "schema": {"type": "string"},
}
REPLAYED = {
    "description": "`true` when this is the stored answer to an earlier request with the "
    "same Idempotency-Key and body (nothing was done again).",
    "schema": {"type": "string", "enum": ["true"]},
}
RETRY_AFTER = {
    "description": "Seconds to wait before trying again.",
    "schema": {"type": "integer"},
}
PROBLEM = {"application/json": {"schema": {"$ref": "#/components/schemas/Problem"}}}


def declare_what_the_server_sends(doc: dict[str, Any], max_body_bytes: int) -> None:
    """Add, on every operation they apply to: 413 where a body is read (the app's body
    limit, `api.app.BodyLimit`); with an Idempotency-Key parameter, `Idempotent-Replayed`
    on its 2xx answers and the 409 with `Retry-After` of a request still in flight."""
    for operations in doc.get("paths", {}).values():
        for method, op in operations.items():
            if method not in HTTP_METHODS:
                continue
            responses = op.setdefault("responses", {})
            if "requestBody" in op:
                responses.setdefault(
                    "413",
                    {
                        "description": f"The body is larger than the limit "
                        f"({max_body_bytes} bytes unless the operation says otherwise).",
                        "content": copy.deepcopy(PROBLEM),
                    },
                )
            keyed = any(
                p.get("in") == "header" and p.get("name", "").lower() == "idempotency-key"
                for p in op.get("parameters", [])
            )
            if not keyed:
                continue
            for status, answer in responses.items():
                if status.startswith("2"):
                    answer.setdefault("headers", {})["Idempotent-Replayed"] = dict(REPLAYED)
            in_flight = responses.setdefault(
                "409",
                {
                    "description": "A request with the same Idempotency-Key is still running.",
                    "content": copy.deepcopy(PROBLEM),
                },
            )
            in_flight.setdefault("headers", {})["Retry-After"] = dict(RETRY_AFTER)


def tag_by_audience(doc: dict[str, Any], app: FastAPI) -> None:
    """One tag per operation (`audience`), and the document's list of tags with their
    descriptions. An operation whose tag is not in `TAGS` is left as declared (the
    contract test names it)."""
    for method, path, route in app_routes(app):
        op = doc.get("paths", {}).get(path, {}).get(method.lower())
        if op is None:
            continue
        declared = (op.get("tags") or [None])[0]
        tag = audience(route_access(route), declared)
        if tag is not None:
            op["tags"] = [tag]
    used = {
        tag for ops in doc.get("paths", {}).values() for op in ops.values() for tag in op["tags"]
    }
    doc["tags"] = [
        {"name": name, "description": text} for name, text in TAGS.items() if name in used
    ]


def with_server(doc: dict[str, Any], request: Request) -> dict[str, Any]:
    """The document with a `servers` entry: the origin it was fetched from, which is the
    API's address as the caller reaches it (through a trusted proxy, the proxy's).
    Not HERALD_PUBLIC_BASE_URL: that is the public ingress, which serves no app route."""
    origin = f"{request.url.scheme}://{request.url.netloc}"
    root = request.scope.get("root_path", "").rstrip("/")
    return {**doc, "servers": [{"url": origin + root, "description": "This Herald API."}]}


def serve_documents(app: FastAPI) -> None:
    """Serve `/openapi.json` (3.1) and `/openapi-3.0.json`, each with its `servers`."""
    url = app.openapi_url
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) != url]
    converted: dict[str, Any] = {}

    async def openapi(request: Request) -> JSONResponse:
        return JSONResponse(with_server(app.openapi(), request))

    async def openapi_30(request: Request) -> JSONResponse:
        if not converted:
            converted.update(as_openapi_30(app.openapi()))
        return JSONResponse(with_server(converted, request))

    app.add_route(str(url), openapi, include_in_schema=False)
    app.add_route(OPENAPI_30_URL, openapi_30, include_in_schema=False)


# --- OpenAPI 3.1 -> 3.0 ---------------------------------------------------------------

SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
SCHEMA_MAPS = ("properties", "patternProperties", "$defs")
SCHEMA_ONE = ("items", "additionalProperties", "not", "contains")


def _schema_30(schema: Any) -> Any:
    """One JSON Schema (2020-12, as OpenAPI 3.1 has it) as OpenAPI 3.0's schema object:
    `anyOf: [X, {type: null}]` -> X with `nullable`, a `type` list -> one type with
    `nullable`, `const` -> a one-value `enum`, `examples` -> `example`, numeric exclusive
    bounds -> boolean ones, `contentMediaType` -> `format: binary`, and a `$ref` with
    siblings wrapped in `allOf` (3.0 ignores a `$ref`'s siblings)."""
    if not isinstance(schema, dict):
        return schema
    out = {key: value for key, value in schema.items()}
    for key in SCHEMA_LISTS:
        if key in out:
            out[key] = [_schema_30(s) for s in out[key]]
    for key in SCHEMA_MAPS:
        if key in out:
            out[key] = {name: _schema_30(s) for name, s in out[key].items()}
    for key in SCHEMA_ONE:
        if isinstance(out.get(key), dict):
            out[key] = _schema_30(out[key])
    if isinstance(out.get("type"), list):
        types = [t for t in out["type"] if t != "null"]
        if len(types) < len(out["type"]):
            out["nullable"] = True
        if len(types) == 1:
            out["type"] = types[0]
        else:
            del out["type"]
            out["anyOf"] = [{"type": t} for t in types]
    elif out.get("type") == "null":
        del out["type"]
        out["nullable"] = True
    for key in ("anyOf", "oneOf"):
        branches = out.get(key)
        if not branches:
            continue
        rest = [b for b in branches if b != {"type": "null"} and b != {"nullable": True}]
        if len(rest) == len(branches):
            continue
        out["nullable"] = True
        if len(rest) == 1 and "$ref" in rest[0]:
            del out[key]
            out["allOf"] = rest
        elif len(rest) == 1:
            del out[key]
            out = {**rest[0], **out}
        else:
            out[key] = rest
    if "const" in out:
        out["enum"] = [out.pop("const")]
    if isinstance(out.get("examples"), list):
        examples = out.pop("examples")
        if examples:
            out.setdefault("example", examples[0])
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(out.get(bound), int | float) and not isinstance(out[bound], bool):
            out[limit] = out[bound]
            out[bound] = True
    if "contentMediaType" in out:
        out.pop("contentMediaType")
        out["format"] = "byte" if out.pop("contentEncoding", None) == "base64" else "binary"
    if "$ref" in out and len(out) > 1:
        ref = out.pop("$ref")
        out["allOf"] = [{"$ref": ref}, *out.get("allOf", [])]
    return out


def _content_30(content: dict[str, Any]) -> dict[str, Any]:
    return {
        media: {**body, "schema": _schema_30(body["schema"])} if "schema" in body else body
        for media, body in content.items()
    }


def _with_schema_30(part: dict[str, Any]) -> dict[str, Any]:
    """A parameter, header, request body or response, its schemas converted."""
    out = dict(part)
    if "schema" in out:
        out["schema"] = _schema_30(out["schema"])
    if "content" in out:
        out["content"] = _content_30(out["content"])
    if "headers" in out:
        out["headers"] = {name: _with_schema_30(h) for name, h in out["headers"].items()}
    return out


def as_openapi_30(doc: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI 3.1 document `doc` as OpenAPI 3.0.3 (a new document; `doc` is kept)."""
    out = copy.deepcopy(doc)
    out["openapi"] = "3.0.3"
    out.pop("jsonSchemaDialect", None)
    out.pop("webhooks", None)
    out.get("info", {}).pop("summary", None)
    out.get("info", {}).get("license", {}).pop("identifier", None)
    for operations in out.get("paths", {}).values():
        for method, op in operations.items():
            if method == "parameters":
                operations[method] = [_with_schema_30(p) for p in op]
                continue
            if method not in HTTP_METHODS:
                continue
            op["parameters"] = [_with_schema_30(p) for p in op.get("parameters", [])]
            if not op["parameters"]:
                del op["parameters"]
            if "requestBody" in op:
                op["requestBody"] = _with_schema_30(op["requestBody"])
            op["responses"] = {s: _with_schema_30(r) for s, r in op["responses"].items()}
    components = out.get("components", {})
    if "schemas" in components:
        components["schemas"] = {n: _schema_30(s) for n, s in components["schemas"].items()}
    for kind in ("parameters", "headers", "requestBodies", "responses"):
        if kind in components:
            components[kind] = {n: _with_schema_30(p) for n, p in components[kind].items()}
    return out


def install_contract(app: FastAPI, *, max_body_bytes: int) -> None:
    """Tag by audience and declare what the server sends, once, over whatever the app's
    document is by then (call it after every router is included), and serve it."""
    generate = app.openapi
    done: list[dict[str, Any]] = []

    def openapi() -> dict[str, Any]:
        if not done:
            doc = generate()
            tag_by_audience(doc, app)
            declare_what_the_server_sends(doc, max_body_bytes)
            done.append(doc)
        return done[0]

    app.openapi = openapi  # type: ignore[method-assign]
    serve_documents(app)

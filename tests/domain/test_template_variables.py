"""A template version's declared variables: the catalog's declarations become a JSON Schema,
a request is checked against it, and every refusal names the variable and its shape."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.template_variables import DeclarationError, refusals, sample, schema_of
from domain.templates import TemplateError, known_locale, parse_catalog

ORDER = schema_of(
    {
        "order_id": "text",
        "total": "number",
        "items": {"type": "list", "fields": {"name": "text", "qty": "number"}},
        "tags": {"type": "list", "of": "text", "optional": True},
        "ships_on": {"type": "date", "optional": True},
    }
)
GOOD = {"order_id": "o-77", "total": 84.9, "items": [{"name": "Poster", "qty": 2}]}


def test_a_list_of_objects_lacking_a_field_is_refused_naming_the_variable_and_its_shape():
    items = [{"name": "Poster"}]
    assert refusals(ORDER, {**GOOD, "items": items}) == [
        "variable 'items' must be a list of objects with fields name, qty; item 0 lacks 'qty'"
    ]


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"total": "84.90"}, "variable 'total' must be a number; it is text"),
        ({"total": True}, "variable 'total' must be a number; it is true or false"),
        ({"order_id": None}, "variable 'order_id' must be text; it is null"),
        ({"order_id": {"n": 77}}, "variable 'order_id' must be text; it is an object"),
        ({"items": "Poster"}, "must be a list of objects with fields name, qty; it is text"),
        ({"items": [["Poster", 2]]}, "with fields name, qty; item 0 is a list"),
        ({"items": [{"name": "P", "qty": "2"}]}, "with fields name, qty; item 0's 'qty' is text"),
        ({"tags": ["a", None]}, "variable 'tags' must be a list of text; item 1 is null"),
        ({"ships_on": "next Tuesday"}, "variable 'ships_on' must be a date (ISO 8601"),
    ],
)
def test_every_refusal_names_the_variable_the_shape_and_what_is_wrong(
    change: dict[str, Any], refusal: str
) -> None:
    found = refusals(ORDER, {**GOOD, **change})
    assert len(found) == 1 and refusal in found[0], found
    # The value itself is never quoted (it may be personal data).
    assert "next Tuesday" not in found[0] and "Poster" not in found[0]


def test_absent_required_variables_are_named_together_with_their_shapes():
    assert refusals(ORDER, {"total": 1}) == [
        "needs order_id (text), items (a list of objects with fields name, qty), "
        "missing from the variables"
    ]


def test_optional_and_undeclared_variables_are_accepted():
    assert refusals(ORDER, {**GOOD, "coupon": "X", "ships_on": "2026-12-08T18:30:00Z"}) == []
    assert refusals(ORDER, {**GOOD, "order_id": 77}) == []  # a number prints as text


@pytest.mark.parametrize(
    ("declarations", "problem"),
    [
        ({"a": "int"}, "variables.a: unknown shape 'int'"),
        ({"a": {"type": "list"}}, "variables.a: a list declares either 'of'"),
        ({"a": {"type": "list", "fields": {"q": "float"}}}, "variables.a.fields.q"),
        ({"a": {"type": "text", "optional": "yes"}}, "'optional' must be true or false"),
        ({"a": {"type": "list", "of": "text", "colour": 1}}, "unknown option(s) ['colour']"),
    ],
)
def test_a_declaration_that_is_no_known_shape_is_refused(
    declarations: dict[str, Any], problem: str
) -> None:
    with pytest.raises(DeclarationError) as refused:
        schema_of(declarations)
    assert problem in str(refused.value)


SCALAR = st.sampled_from(["text", "number", "date"])
NAMES = st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True)
DECLARATION = st.one_of(
    SCALAR,
    st.fixed_dictionaries({"type": SCALAR, "optional": st.booleans()}),
    st.fixed_dictionaries({"type": st.just("list"), "of": SCALAR}),
    st.fixed_dictionaries(
        {"type": st.just("list"), "fields": st.dictionaries(NAMES, SCALAR, min_size=1)}
    ),
)
VALUE_OF = {"text": st.text(max_size=5), "number": st.integers(), "date": st.just("2026-12-08")}


def _shape(spec: Any) -> str:
    return spec if isinstance(spec, str) else spec["type"]


@st.composite
def declared_and_fitting(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    declarations = draw(st.dictionaries(NAMES, DECLARATION, min_size=1, max_size=5))
    variables: dict[str, Any] = {}
    for name, spec in declarations.items():
        if _shape(spec) != "list":
            variables[name] = draw(VALUE_OF[_shape(spec)])
        elif "of" in spec:
            variables[name] = draw(st.lists(VALUE_OF[spec["of"]], max_size=3))
        else:
            item = st.fixed_dictionaries({f: VALUE_OF[s] for f, s in spec["fields"].items()})
            variables[name] = draw(st.lists(item, min_size=1, max_size=3))
    return declarations, variables


@given(declared_and_fitting())
def test_variables_of_the_declared_shapes_fit(case: tuple[dict[str, Any], dict[str, Any]]):
    declarations, variables = case
    assert refusals(schema_of(declarations), variables) == []


@given(declared_and_fitting(), st.data())
def test_a_variable_of_another_shape_is_refused_naming_it(
    case: tuple[dict[str, Any], dict[str, Any]], data: st.DataObject
) -> None:
    declarations, variables = case
    name = data.draw(st.sampled_from(sorted(declarations)))
    # An object fits none of the shapes a variable can have.
    found = refusals(schema_of(declarations), {**variables, name: {"x": 1}})
    assert len(found) == 1 and found[0].startswith(f"variable {name!r} must be "), found


@given(declared_and_fitting(), st.data())
def test_a_required_variable_left_out_is_named(
    case: tuple[dict[str, Any], dict[str, Any]], data: st.DataObject
) -> None:
    declarations, variables = case
    name = data.draw(st.sampled_from(sorted(declarations)))
    found = refusals(schema_of(declarations), {k: v for k, v in variables.items() if k != name})
    optional = isinstance(declarations[name], dict) and declarations[name].get("optional")
    assert found == ([] if optional else [found[0]])
    if not optional:
        assert found[0].startswith(f"needs {name} (")


# --------------------------------------------------------------------------- the catalog

ENTRY = '[[template]]\nkey = "a"\nversion = 1\nchannel = "sms"\nlocale = "en"\n'


def test_a_catalog_entry_stores_its_declarations_as_a_json_schema():
    (version,) = parse_catalog(
        ENTRY + 'body = "{{ n }} {{ who }}"\n\n[template.variables]\nn = "number"\nwho = "text"\n'
    )
    assert version.schema is not None
    assert version.schema["required"] == ["n", "who"]
    assert version.schema["properties"]["n"]["type"] == "number"


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        # A template uses a variable it does not declare: the body's line.
        (ENTRY + 'body = "Hi {{ who }}"\n', 6, "undeclared variable(s) 'who'"),
        # A channel or locale Herald does not know.
        (ENTRY.replace('"sms"', '"fax"') + 'body = "x"\n', 4, "unknown channel 'fax'"),
        (ENTRY.replace('"en"', '"klingon"') + 'body = "x"\n', 5, "unknown locale 'klingon'"),
        # A syntax error on the body's third line, in a multi-line string opened on line 6.
        (ENTRY + 'body = """\none\ntwo\n{{ x\n"""\n', 9, "syntax error"),
        (ENTRY + 'body = "x"\n[template.variables]\nn = "int"\n', 7, "unknown shape 'int'"),
        ("\n\n" + ENTRY + 'body = "x"\ncolour = "red"\n', 9, "unknown field(s) ['colour']"),
        ('[[template]]\nkey = "a"\nversion = \n', 3, "not valid TOML"),
        (ENTRY.replace('"a"', '"an order"') + 'body = "x"\n', 2, "'key' is 1 to 80 letters"),
    ],
)
def test_a_catalog_refusal_names_the_line_and_the_reason(text: str, line: int, reason: str):
    with pytest.raises(TemplateError) as refused:
        parse_catalog(text)
    assert reason in str(refused.value)
    assert refused.value.line == line


@pytest.mark.parametrize("tag", ["en", "fr-CA", "fr", "zh-Hant-TW", "es-419", "pt-br"])
def test_known_locales(tag: str) -> None:
    assert known_locale(tag)


@pytest.mark.parametrize("tag", ["english", "xx", "fr_FR", "", "c", "en-", "fr-CAN-x"])
def test_unknown_locales(tag: str) -> None:
    assert not known_locale(tag)


def test_every_packaged_template_declares_every_variable_it_uses():
    import templates

    for version in templates.load_packaged():
        assert version.schema is not None, version.key


def test_the_sample_a_preview_starts_from_fits_its_own_schema():
    schema = schema_of(
        {
            "order_id": "text",
            "total": "number",
            "ships_on": {"type": "date", "optional": True},
            "tags": {"type": "list", "of": "text"},
            "lines": {"type": "list", "fields": {"name": "text", "qty": "number"}},
        }
    )
    made = sample(schema)
    assert made == {
        "order_id": "order_id",
        "total": 1,
        "ships_on": "2026-12-08",
        "tags": ["tags"],
        "lines": [{"name": "name", "qty": 1}],
    }
    assert refusals(schema, made) == []

"""Label and field selector parsing, rendering, translation and matching."""

from __future__ import annotations

import pytest

from shared.api import errors, selectors
from shared.api.selectors import Requirement


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()),
        ("  ", ()),
        ("app=web", (Requirement("app", "=", ("web",)),)),
        ("app==web", (Requirement("app", "=", ("web",)),)),
        ("app!=web", (Requirement("app", "!=", ("web",)),)),
        ("app=", (Requirement("app", "=", ("",)),)),
        ("tier in (b, a)", (Requirement("tier", "in", ("a", "b")),)),
        ("tier notin (a)", (Requirement("tier", "notin", ("a",)),)),
        ("tier", (Requirement("tier", "exists"),)),
        ("!tier", (Requirement("tier", "!"),)),
        ("example.com/team=x", (Requirement("example.com/team", "=", ("x",)),)),
        (
            "z=1, a in (x,y),!m",
            (
                Requirement("a", "in", ("x", "y")),
                Requirement("m", "!"),
                Requirement("z", "=", ("1",)),
            ),
        ),
    ],
)
def test_parse(text: str, expected: tuple[Requirement, ...]) -> None:
    assert selectors.parse_label_selector(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a in ()", (Requirement("a", "in", ("",)),)),
        ("a in (,)", (Requirement("a", "in", ("",)),)),
        ("x in (foo,,baz)", (Requirement("x", "in", ("", "baz", "foo")),)),
        ("in in (in, notin)", (Requirement("in", "in", ("in", "notin")),)),
        ("a>1", (Requirement("a", ">", ("1",)),)),
        ("a < 01", (Requirement("a", "<", ("01",)),)),
    ],
)
def test_parse_what_kube_apiserver_reads(text: str, expected: tuple[Requirement, ...]) -> None:
    """Selectors a simpler reading would refuse; a CRD's list accepts each (tests/contract/test_list.py)."""
    assert selectors.parse_label_selector(text) == expected


# The messages a CRD's list gave for the same selectors (kube-apiserver v1.35.4; the contract tier compares them).
_KEY_RULE = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
             "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
             "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
_VALUE_RULE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
               "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
               "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("app=web=x", "found '=', expected: ',' or 'end of string'"),
        ("a in (x", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("a in x", "unable to parse requirement: found 'x' expected: '('"),
        ("=x", "found '=', expected: !, identifier, or 'end of string'"),
        ("a,", "found '', expected: identifier after ','"),
        ("a,,b", "found ',', expected: identifier after ','"),
        ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("!a=b", "found '=', expected: ',' or 'end of string'"),
        ("!!x", "unable to parse requirement: found '!', expected: identifier"),
        ("-bad=x", f'unable to parse requirement: <nil>: Invalid value: "-bad": {_KEY_RULE}'),
        ("a=-bad", f'unable to parse requirement: values[0][a]: Invalid value: "-bad": {_VALUE_RULE}'),
        ("a" * 64, f'unable to parse requirement: <nil>: Invalid value: "{"a" * 64}": name part must be no more '
                   "than 63 bytes"),
        ("a<b", "unable to parse requirement: values[0]: Invalid value: \"b\": for 'Gt', 'Lt' operators, the value "
                "must be an integer"),
        ("a>x_1", "unable to parse requirement: values[0]: Invalid value: \"x_1\": for 'Gt', 'Lt' operators, the "
                  "value must be an integer"),
        ("a>-1", f'unable to parse requirement: values[0][a]: Invalid value: "-1": {_VALUE_RULE}'),
        ("a in (-b,-c)", f'unable to parse requirement: [values[0][a]: Invalid value: "-b": {_VALUE_RULE}, '
                         f'values[1][a]: Invalid value: "-c": {_VALUE_RULE}]'),
    ],
)
def test_parse_rejects_in_kube_apiservers_words(text: str, message: str) -> None:
    with pytest.raises(errors.ApiError) as err:
        selectors.parse_label_selector(text)
    assert err.value.code == 400
    assert err.value.message == message


def test_render_round_trips() -> None:
    text = "tier in (b,a),app!=web,!gone,has,x=,y==1"
    parsed = selectors.parse_label_selector(text)
    rendered = selectors.render(parsed)
    assert rendered == "app!=web,!gone,has,tier in (a,b),x=,y=1"
    assert selectors.parse_label_selector(rendered) == parsed


def test_translate_keys() -> None:
    translated = selectors.translate_keys("app=web,!gone,example.com/x in (a)", lambda k: f"apps.cozystack.io-{k}")
    assert selectors.render(translated) == (
        "apps.cozystack.io-app=web,apps.cozystack.io-example.com/x in (a),!apps.cozystack.io-gone"
    )
    # Already parsed selectors are accepted too.
    assert selectors.translate_keys(selectors.parse_label_selector("a=b"), str.upper) == (
        Requirement("A", "=", ("b",)),
    )


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("app=web", {"app": "web"}, True),
        ("app=web", {"app": "db"}, False),
        ("app=web", {}, False),
        ("app!=web", {}, True),
        ("app!=web", {"app": "web"}, False),
        ("app in (a,b)", {"app": "b"}, True),
        ("app in (a,b)", {}, False),
        ("app notin (a,b)", {}, True),
        ("app notin (a,b)", {"app": "a"}, False),
        ("app", {"app": ""}, True),
        ("app", {}, False),
        ("!app", {}, True),
        ("!app", {"app": "x"}, False),
        ("a=1,b=2", {"a": "1", "b": "2"}, True),
        ("a=1,b=2", {"a": "1", "b": "3"}, False),
        ("", {"anything": "x"}, True),
        ("rank>5", {"rank": "10"}, True),
        ("rank>5", {"rank": "007"}, True),
        ("rank>5", {"rank": "5"}, False),
        ("rank>5", {"rank": "x"}, False),
        ("rank>5", {}, False),
        ("rank<5", {"rank": "1_0"}, False),
        ("rank<5", {"rank": "3"}, True),
        ("rank<5", {"rank": "99999999999999999999"}, False),
    ],
)
def test_matches(text: str, labels: dict[str, str], expected: bool) -> None:
    assert selectors.matches(selectors.parse_label_selector(text), labels) is expected


def test_matches_single_requirement_and_none_labels() -> None:
    assert selectors.matches(Requirement("a", "exists"), {"a": "1"})
    assert not selectors.matches(Requirement("a", "exists"), None)
    assert selectors.matches(Requirement("a", "!"), None)


def test_field_selector() -> None:
    assert selectors.parse_field_selector("") == ()
    assert selectors.parse_field_selector("metadata.name=x,metadata.namespace!=y") == (
        ("metadata.name", "=", "x"),
        ("metadata.namespace", "!=", "y"),
    )
    assert selectors.parse_field_selector("metadata.name==a\\,b") == (("metadata.name", "=", "a,b"),)
    # Empty terms are skipped and nothing is trimmed, as kube-apiserver reads a custom resource's field selector.
    assert selectors.parse_field_selector(",metadata.name=a,,metadata.namespace= b,") == (
        ("metadata.name", "=", "a"), ("metadata.namespace", "=", " b"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("spec.x=1", "field label not supported: spec.x"),
        ("status.phase!=Running", "field label not supported: status.phase"),
        ("metadata.name", "invalid selector: 'metadata.name'; can't understand 'metadata.name'"),
        ("metadata.name=a=b", "invalid field selector: unescaped character in value: 61"),
        ("metadata.name=a\\", "invalid field selector: invalid escape sequence: \\"),
        (" metadata.name=a", "field label not supported:  metadata.name"),
        # Every term is parsed before any field is checked, in sorted order (kube-apiserver's).
        ("spec.x=1,metadata.name=a\\q", "invalid field selector: invalid escape sequence: \\q"),
    ],
)
def test_field_selector_rejects(text: str, message: str) -> None:
    with pytest.raises(errors.ApiError) as err:
        selectors.parse_field_selector(text)
    assert err.value.code == 400
    assert err.value.message == message


def test_field_matches_and_render() -> None:
    obj = {"metadata": {"name": "a", "namespace": "ns"}}
    assert selectors.field_matches(selectors.parse_field_selector("metadata.name=a"), obj)
    assert not selectors.field_matches(selectors.parse_field_selector("metadata.name!=a"), obj)
    assert not selectors.field_matches(selectors.parse_field_selector("metadata.namespace=other"), obj)
    assert selectors.render_field_selector([("metadata.name", "=", "a,b")]) == "metadata.name=a\\,b"

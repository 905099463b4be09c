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
    "text",
    [
        "app=web=x",
        "a in ()",
        "a in (x",
        "a in x",
        "=x",
        "a,",
        "a b",
        "!a=b",
        "a>1",
        "-bad=x",
        "a=-bad",
        "Foo.com/x=y",
        "a=" + "x" * 64,
        "a" * 64,
    ],
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(errors.ApiError) as err:
        selectors.parse_label_selector(text)
    assert err.value.code == 400
    assert err.value.message.startswith("unable to parse requirement")


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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("spec.x=1", "field label not supported: spec.x"),
        ("status.phase!=Running", "field label not supported: status.phase"),
        ("metadata.name", "invalid selector"),
        ("metadata.name=a=b", "invalid field selector value"),
        ("metadata.name=a,,metadata.namespace=b", "empty requirement"),
    ],
)
def test_field_selector_rejects(text: str, message: str) -> None:
    with pytest.raises(errors.ApiError) as err:
        selectors.parse_field_selector(text)
    assert err.value.code == 400
    assert message in err.value.message


def test_field_matches_and_render() -> None:
    obj = {"metadata": {"name": "a", "namespace": "ns"}}
    assert selectors.field_matches(selectors.parse_field_selector("metadata.name=a"), obj)
    assert not selectors.field_matches(selectors.parse_field_selector("metadata.name!=a"), obj)
    assert not selectors.field_matches(selectors.parse_field_selector("metadata.namespace=other"), obj)
    assert selectors.render_field_selector([("metadata.name", "=", "a,b")]) == "metadata.name=a\\,b"

"""Label and field selectors against apimachinery's documented semantics (labels.Parse, fields.ParseSelector,
metav1.LabelSelectorAsSelector). Expected values are written from the Kubernetes "Labels and Selectors" and
"Field Selectors" concept pages and the labels.Parse grammar, not from the implementation's output."""

from __future__ import annotations

import pytest

from cluster.selectors import SelectorError, parse_field_selector, parse_label_selector, selector_from_dict

pytestmark = pytest.mark.unit

PROD = {"environment": "production", "tier": "frontend"}
DEV = {"environment": "dev", "tier": "frontend"}
BARE: dict[str, str] = {}


def matches(selector: str, labels: dict[str, str]) -> bool:
    return parse_label_selector(selector).matches(labels)


# --- equality-based -----------------------------------------------------------------------------------


@pytest.mark.parametrize("selector", ["environment=production", "environment==production"])
def test_equality_requires_key_and_value(selector: str) -> None:
    assert matches(selector, PROD)
    assert not matches(selector, DEV)
    assert not matches(selector, BARE)


def test_inequality_matches_other_values_and_absent_key() -> None:
    assert not matches("environment!=production", PROD)
    assert matches("environment!=production", DEV)
    assert matches("environment!=production", BARE)  # documented: resources without the key are selected


def test_equality_with_empty_value() -> None:
    assert matches("environment=", {"environment": ""})
    assert not matches("environment=", BARE)
    assert not matches("environment=", PROD)


def test_comma_is_and() -> None:
    assert matches("environment=production,tier=frontend", PROD)
    assert not matches("environment=production,tier=backend", PROD)


# --- set-based ------------------------------------------------------------------------------------------


def test_in_and_notin() -> None:
    assert matches("environment in (production, qa)", PROD)
    assert not matches("environment in (production, qa)", DEV)
    assert not matches("environment in (production, qa)", BARE)
    assert matches("tier notin (frontend,backend)", {"tier": "cache"})
    assert not matches("tier notin (frontend,backend)", PROD)
    assert matches("tier notin (frontend,backend)", BARE)  # absent key satisfies notin


def test_commas_inside_parentheses_belong_to_the_set() -> None:
    sel = parse_label_selector("environment in (production,qa),tier notin (backend)")
    assert [(r.key, r.operator, r.values) for r in sel.requirements] == [
        ("environment", "in", ("production", "qa")),
        ("tier", "notin", ("backend",)),
    ]
    assert sel.matches(PROD)


def test_existence_and_non_existence() -> None:
    assert matches("partition", {"partition": "a"})
    assert matches("partition", {"partition": ""})
    assert not matches("partition", PROD)
    assert matches("!partition", PROD)
    assert not matches("!partition", {"partition": "a"})


def test_grammar_example_from_labels_parse() -> None:
    # labels.Parse documents "x in (foo,,baz),y,z notin ()" as valid; empty entries are the value "".
    sel = parse_label_selector("x in (foo,,baz),y,z notin ()")
    assert sel.matches({"x": "", "y": "1"})
    assert sel.matches({"x": "baz", "y": "1", "z": "q"})
    assert not sel.matches({"x": "bar", "y": "1"})
    assert not sel.matches({"x": "foo"})  # y must exist
    assert not sel.matches({"x": "foo", "y": "1", "z": ""})  # notin () excludes ""


def test_in_keyword_is_a_value_inside_parentheses() -> None:
    assert matches("mode in (in,notin)", {"mode": "in"})


def test_whitespace_is_tolerated() -> None:
    sel = parse_label_selector("  environment  =  production ,\ttier in(frontend) , !canary ")
    assert sel.matches(PROD)
    assert not sel.matches({**PROD, "canary": "true"})


def test_prefixed_keys() -> None:
    assert matches("app.kubernetes.io/name=web", {"app.kubernetes.io/name": "web"})
    assert matches("kubenexus.io/gang notin (a)", BARE)


def test_greater_and_less_than_compare_integers() -> None:
    assert matches("replicas>2", {"replicas": "3"})
    assert not matches("replicas>2", {"replicas": "2"})
    assert matches("replicas<2", {"replicas": "1"})
    assert not matches("replicas<2", {"replicas": "x"})
    assert not matches("replicas<2", BARE)


def test_empty_selector_matches_everything() -> None:
    for text in ("", "   "):
        sel = parse_label_selector(text)
        assert sel.empty()
        assert sel.matches(PROD)
        assert sel.matches(BARE)


@pytest.mark.parametrize(
    "text",
    [
        "environment=production,",  # trailing comma
        ",environment",
        "environment in (production",  # unclosed set
        "environment in production",  # set needs parentheses
        "environment notin",
        "environment production",  # two identifiers
        "=production",
        "environment=a=b",
        "environment=(a)",
        "environment in (a b)",
        "!environment=production",  # ! only negates existence
        "environment>=1",
        "replicas>a",  # gt/lt need an integer
        "-bad-key=x",  # key must start with an alphanumeric
        "Example.com/key=x",  # prefix must be a lowercase DNS subdomain
        "a/b/c=x",
        "/key=x",
        "key=" + "v" * 64,  # values are at most 63 characters
        "k" * 64,  # name part at most 63 characters
        "key=bad value",
        "key=bad_",
    ],
)
def test_invalid_label_selectors_are_rejected(text: str) -> None:
    with pytest.raises(SelectorError):
        parse_label_selector(text)


def test_selector_error_is_a_value_error_with_message() -> None:
    with pytest.raises(ValueError, match="unable to parse requirement"):
        parse_label_selector("environment in production")


# --- structured metav1.LabelSelector --------------------------------------------------------------------


def test_structured_selector_match_labels_and_expressions() -> None:
    sel = selector_from_dict(
        {
            "matchLabels": {"tier": "frontend"},
            "matchExpressions": [
                {"key": "environment", "operator": "In", "values": ["production", "qa"]},
                {"key": "track", "operator": "NotIn", "values": ["canary"]},
                {"key": "team", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        }
    )
    assert sel.matches({**PROD, "team": "a"})
    assert sel.matches({**PROD, "team": "a", "track": "stable"})
    assert not sel.matches({**PROD, "team": "a", "track": "canary"})
    assert not sel.matches(PROD)  # team missing
    assert not sel.matches({**PROD, "team": "a", "legacy": "1"})
    assert not sel.matches({**DEV, "team": "a"})


@pytest.mark.parametrize("sel", [None, {}, {"matchLabels": {}, "matchExpressions": []}])
def test_empty_or_unset_structured_selector_matches_everything(sel: dict | None) -> None:
    assert selector_from_dict(sel).matches(PROD)
    assert selector_from_dict(sel).matches({})


@pytest.mark.parametrize(
    "sel",
    [
        {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
        {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
        {"matchLabels": {"bad key": "x"}},
    ],
)
def test_invalid_structured_selectors_are_rejected(sel: dict) -> None:
    with pytest.raises(SelectorError):
        selector_from_dict(sel)


# --- field selectors --------------------------------------------------------------------------------------

POD_FIELDS = ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase")
SCHEDULED = {"metadata": {"name": "a", "namespace": "ns"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}
PENDING = {"metadata": {"name": "b", "namespace": "ns"}, "spec": {}, "status": {"phase": "Pending"}}


def fields(text: str) -> list[str]:
    sel = parse_field_selector(text, POD_FIELDS)
    return [p["metadata"]["name"] for p in (SCHEDULED, PENDING) if sel.matches(p)]


def test_field_equality_and_inequality() -> None:
    assert fields("metadata.name=a") == ["a"]
    assert fields("metadata.name==a") == ["a"]
    assert fields("metadata.name!=a") == ["b"]
    assert fields("status.phase=Running,metadata.namespace=ns") == ["a"]
    assert fields("status.phase!=Running,status.phase!=Succeeded") == ["b"]


def test_missing_field_compares_as_empty_string() -> None:
    assert fields("spec.nodeName=") == ["b"]  # unscheduled pods
    assert fields("spec.nodeName!=") == ["a"]


def test_empty_field_selector_matches_everything() -> None:
    assert fields("") == ["a", "b"]
    assert parse_field_selector("", POD_FIELDS).empty()


def test_unsupported_field_is_rejected_like_the_apiserver() -> None:
    with pytest.raises(SelectorError, match=r"^field label not supported: spec\.restartPolicy$"):
        parse_field_selector("spec.restartPolicy=Always", POD_FIELDS)


def test_field_values_use_backslash_escapes() -> None:
    sel = parse_field_selector(r"metadata.name=a\,b\=c", POD_FIELDS)
    assert sel.matches({"metadata": {"name": "a,b=c"}})
    assert not sel.matches({"metadata": {"name": "a"}})


@pytest.mark.parametrize("text", ["metadata.name", "metadata.name=a=b", r"metadata.name=a\x", "metadata.name=a\\"])
def test_invalid_field_selectors_are_rejected(text: str) -> None:
    with pytest.raises(SelectorError):
        parse_field_selector(text, POD_FIELDS)


def test_field_selector_does_not_trim_whitespace() -> None:
    # fields.ParseSelector splits on the operator without trimming: "metadata.name " is not a known field.
    with pytest.raises(SelectorError, match="field label not supported"):
        parse_field_selector("metadata.name = a", POD_FIELDS)


def test_boolean_fields_compare_as_lowercase_strings() -> None:
    sel = parse_field_selector("spec.hostNetwork=true", ("spec.hostNetwork",))
    assert sel.matches({"spec": {"hostNetwork": True}})
    assert not sel.matches({"spec": {"hostNetwork": False}})

import pytest
from kubesim.api import cel
from kubesim.api.cel import UNSUPPORTED_RULES, check_rule, compile_rule, unsupported_rules_in

from .conftest import load_crds


def rule(text: str, **extra) -> cel.CompiledRule:
    return compile_rule({"rule": text, **extra})


def test_every_rule_in_the_shipped_crds_compiles():
    """All ~80 rules of Kueue/Volcano/KAI compile; anything else must be listed."""
    found = []
    total = 0
    for crd in load_crds().values():
        for version in crd["spec"]["versions"]:
            total += len(list(cel.iter_rules(version["schema"]["openAPIV3Schema"])))
        found.extend(unsupported_rules_in(crd))
    assert total >= 40
    listed = {item["rule"] for item in UNSUPPORTED_RULES}
    assert [item for item in found if item["rule"] not in listed] == []


def test_unsupported_rules_are_reported():
    crd = {
        "spec": {
            "names": {"kind": "Thing"},
            "versions": [
                {
                    "name": "v1",
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "x-kubernetes-validations": [{"rule": "self.x =="}],
                                }
                            },
                        }
                    },
                }
            ],
        }
    }
    [item] = unsupported_rules_in(crd)
    assert item["kind"] == "Thing"
    assert item["path"] == ".spec"
    assert "Syntax error" in item["error"]


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("quantity('1Gi').isGreaterThan(quantity('1G'))", {}),
        ("quantity('1').compareTo(quantity('1000m')) == 0", {}),
        ("quantity('100m').isLessThan(quantity('1'))", {}),
        ("quantity('1.5').add(quantity('500m')) == quantity('2')", {}),
        ("quantity('2').sub(quantity('500m')).isGreaterThan(quantity('1'))", {}),
        ("quantity('-1').sign() == -1", {}),
        ("quantity('8').isInteger() && quantity('8').asInteger() == 8", {}),
        ("quantity('1500m').asApproximateFloat() == 1.5", {}),
        ("isQuantity('100Gi') && !isQuantity('100GB')", {}),
        ("quantity(self.q).isGreaterThan(quantity('0'))", {"q": "4"}),
        ("[1, 2, 3].isSorted() && ![3, 1].isSorted()", {}),
        ("[1, 2, 3].sum() == 6 && [4, 2].min() == 2 && [4, 2].max() == 4", {}),
        ("['a', 'b'].indexOf('b') == 1 && 'abc'.indexOf('c') == 2", {}),
        ("'abcab'.lastIndexOf('ab') == 3", {}),
        ("'a1b22'.find('[0-9]+') == '1' && 'a1b22'.findAll('[0-9]+') == ['1', '22']", {}),
        ("'Hello'.lowerAscii() == 'hello' && 'a,b'.split(',') == ['a', 'b']", {}),
        ("self.name.matches('^[a-z]+$') && self.name.startsWith('gp')", {"name": "gpu"}),
        ("self.items.all(i, i > 0) && self.items.exists_one(i, i == 2)", {"items": [1, 2]}),
        (
            "self.items.map(i, i * 2) == [2, 4] && self.items.filter(i, i > 1) == [2]",
            {"items": [1, 2]},
        ),
        ("has(self.a) && !has(self.b)", {"a": 1}),
        ("math.abs(-2) == 2", {}),
    ],
)
def test_kubernetes_library_functions(expression, value):
    assert check_rule(rule(expression), value) == (True, None)


def test_failure_messages():
    assert check_rule(rule("self.x > 1"), {"x": 0}) == (False, "failed rule: self.x > 1")
    assert check_rule(rule("self.x > 1", message="x too small"), {"x": 0}) == (
        False,
        "x too small",
    )
    expression = rule("self.x > 1", message="m", messageExpression="'x is ' + string(self.x)")
    assert check_rule(expression, {"x": 0}) == (False, "x is 0")


def test_runtime_errors_are_worded_as_the_api_server():
    passed, detail = check_rule(rule("self.missing == 1"), {})
    assert not passed
    assert detail == "no such key: missing evaluating rule: self.missing == 1"
    passed, detail = check_rule(rule("self.a + 'x' == 'y'"), {"a": 1})
    assert detail.startswith("'no such overload': call arguments did not match")


def test_transition_rules_need_old_self():
    immutable = rule("self == oldSelf", message="field is immutable")
    assert immutable.transition
    assert check_rule(immutable, "a", "a") == (True, None)
    assert check_rule(immutable, "b", "a") == (False, "field is immutable")
    optional = rule("!oldSelf.hasValue() || self >= oldSelf.value()", optionalOldSelf=True)
    assert check_rule(optional, 1) == (True, None)
    assert check_rule(optional, 1, 2)[0] is False


def test_access_paths_narrow_what_is_converted():
    paths = cel.access_paths("has(self.spec.a) && self.status.conditions.exists(c, c.x)")
    assert paths["self"] == {"spec": {"a": True}, "status": {"conditions": True}}
    assert cel.access_paths("self == oldSelf") == {"self": True, "oldSelf": True}
    assert cel.access_paths("size(self) > 0")["self"] is True
    assert cel.trim({"spec": {"a": 1, "b": 2}, "x": 3}, {"spec": {"a": True}}) == {"spec": {"a": 1}}


def test_measured_chains_only_pass_their_length():
    paths = cel.access_paths("size(self.spec.podSets) == 2 && self.items.size() > 0")
    assert paths["self"] == {"spec": {"podSets": cel.SIZE_ONLY}, "items": cel.SIZE_ONLY}
    trimmed = cel.trim(
        {"spec": {"podSets": [{"big": 1}, {"big": 2}]}, "items": {"a": 1}}, paths["self"]
    )
    assert trimmed == {"spec": {"podSets": [None, None]}, "items": {"a": None}}
    # used both measured and read: the whole value
    both = cel.access_paths("size(self.a) == 1 && self.a[0] == 2")
    assert both["self"] == {"a": True}
    measured = rule("size(self.spec.podSets) == size(self.status.ps)", message="mismatch")
    value = {"spec": {"podSets": [{"x": 1}]}, "status": {"ps": [{"y": 1}, {"y": 2}]}}
    assert check_rule(measured, value) == (False, "mismatch")

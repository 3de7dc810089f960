"""CompiledSchema: defaulting, pruning and validation with the API server's causes."""

import copy

import pytest
from kubesim.api.schema import CompiledSchema

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

THING = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["size"],
            "x-kubernetes-validations": [
                {"rule": "self.size <= 10", "message": "size is at most 10"},
                {
                    "rule": "!has(self.mode) || self.mode != 'B' || has(self.name)",
                    "fieldPath": ".name",
                    "reason": "FieldValueRequired",
                    "message": "name is needed in mode B",
                },
                {"rule": "self.size == oldSelf.size", "message": "size is immutable"},
            ],
            "properties": {
                "size": {"type": "integer", "minimum": 0},
                "ratio": {"type": "number", "maximum": 1, "exclusiveMaximum": True},
                "name": {"type": "string", "maxLength": 5, "minLength": 2, "pattern": "^[a-z]+$"},
                "mode": {"type": "string", "enum": ["A", "B"], "default": "A"},
                "when": {"type": "string", "format": "date-time"},
                "enabled": {"type": "boolean"},
                "quota": {
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                    "x-kubernetes-int-or-string": True,
                    "pattern": QUANTITY_PATTERN,
                },
                "note": {"type": "string", "nullable": True},
                "tags": {
                    "type": "array",
                    "maxItems": 3,
                    "minItems": 1,
                    "items": {"type": "string"},
                    "x-kubernetes-list-type": "set",
                },
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "port": {"type": "integer", "default": 80},
                            "protocol": {"type": "string", "default": "TCP"},
                        },
                        "x-kubernetes-validations": [{"rule": "self.port > 0"}],
                    },
                },
                "labels": {
                    "type": "object",
                    "maxProperties": 2,
                    "additionalProperties": {"type": "string", "maxLength": 3},
                },
                "nested": {
                    "type": "object",
                    "default": {},
                    "properties": {"level": {"type": "integer", "default": 1}},
                },
                "free": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {"known": {"type": "integer"}},
                },
                "template": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "properties": {
                        "spec": {"type": "object", "properties": {"x": {"type": "string"}}}
                    },
                },
            },
        },
    },
}


@pytest.fixture(scope="module")
def thing():
    return CompiledSchema(THING)


def admit(schema, obj, old=None):
    """The API server's order: defaults, pruning, validation."""
    obj = copy.deepcopy(obj)
    schema.apply_defaults(obj)
    schema.prune(obj)
    return obj, schema.validate(obj, old)


def obj_with(**spec):
    return {
        "apiVersion": "example.com/v1",
        "kind": "Thing",
        "metadata": {"name": "t"},
        "spec": {"size": 1, **spec},
    }


def test_defaults_are_applied_nested_in_items_and_defaulted_objects(thing):
    out, causes = admit(thing, obj_with(ports=[{"name": "http"}, {"name": "x", "port": 9}]))
    assert causes == []
    assert out["spec"]["mode"] == "A"
    assert out["spec"]["nested"] == {"level": 1}
    assert out["spec"]["ports"] == [
        {"name": "http", "port": 80, "protocol": "TCP"},
        {"name": "x", "port": 9, "protocol": "TCP"},
    ]


def test_non_nullable_nulls_are_dropped_or_defaulted(thing):
    out, causes = admit(thing, obj_with(mode=None, name=None, note=None))
    assert causes == []
    assert out["spec"]["mode"] == "A"
    assert "name" not in out["spec"]
    assert out["spec"]["note"] is None  # nullable keeps its null


def test_pruning_drops_unknown_fields_and_reports_them(thing):
    obj = obj_with(
        bogus=1,
        free={"known": 1, "extra": {"a": 1}},
        template={
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"x": "y", "z": 1},
            "other": 2,
        },
    )
    obj["status"] = {"phase": "x"}
    obj["metadata"]["labels"] = {"a": "b"}
    pruned = thing.prune(obj)
    assert sorted(pruned) == ["spec.bogus", "spec.template.other", "spec.template.spec.z", "status"]
    assert obj["spec"]["free"] == {"known": 1, "extra": {"a": 1}}
    assert obj["spec"]["template"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"x": "y"},
    }
    assert obj["metadata"] == {"name": "t", "labels": {"a": "b"}}
    assert obj["apiVersion"] == "example.com/v1"


PATTERN_MSG = "spec.name in body should match '^[a-z]+$'"


@pytest.mark.parametrize(
    ("spec", "cause"),
    [
        (
            {"size": "3"},
            (
                "FieldValueTypeInvalid",
                "spec.size",
                'Invalid value: "string": spec.size in body must be of type integer: "string"',
            ),
        ),
        (
            {"size": True},
            (
                "FieldValueTypeInvalid",
                "spec.size",
                'Invalid value: "boolean": spec.size in body must be of type integer: "boolean"',
            ),
        ),
        (
            {"size": -1},
            (
                "FieldValueInvalid",
                "spec.size",
                "Invalid value: -1: spec.size in body should be greater than or equal to 0",
            ),
        ),
        (
            {"ratio": 1},
            (
                "FieldValueInvalid",
                "spec.ratio",
                "Invalid value: 1: spec.ratio in body should be less than 1",
            ),
        ),
        (
            {"name": "abcdef"},
            ("FieldValueTooLong", "spec.name", "Too long: may not be more than 5 bytes"),
        ),
        (
            {"name": "a"},
            (
                "FieldValueInvalid",
                "spec.name",
                'Invalid value: "a": spec.name in body should be at least 2 chars long',
            ),
        ),
        ({"name": "AB"}, ("FieldValueInvalid", "spec.name", f'Invalid value: "AB": {PATTERN_MSG}')),
        (
            {"mode": "C"},
            (
                "FieldValueNotSupported",
                "spec.mode",
                'Unsupported value: "C": supported values: "A", "B"',
            ),
        ),
        (
            {"when": "yesterday"},
            (
                "FieldValueTypeInvalid",
                "spec.when",
                'Invalid value: "yesterday": spec.when in body must be of type '
                'date-time: "yesterday"',
            ),
        ),
        (
            {"quota": True},
            (
                "FieldValueTypeInvalid",
                "spec.quota",
                'Invalid value: "boolean": spec.quota in body must be of type '
                'integer,string: "boolean"',
            ),
        ),
        (
            {"tags": ["a", "b", "c", "d"]},
            ("FieldValueTooMany", "spec.tags", "Too many: 4: must have at most 3 items"),
        ),
        (
            {"tags": []},
            (
                "FieldValueInvalid",
                "spec.tags",
                "Invalid value: 0: spec.tags in body should have at least 1 items",
            ),
        ),
        ({"tags": ["a", "a"]}, ("FieldValueDuplicate", "spec.tags[1]", 'Duplicate value: "a"')),
        (
            {"ports": [{"name": "a"}, {"name": "a", "port": 2}]},
            ("FieldValueDuplicate", "spec.ports[1]", 'Duplicate value: {"name":"a"}'),
        ),
        ({"ports": [{"port": 1}]}, ("FieldValueRequired", "spec.ports[0].name", "Required value")),
        (
            {"labels": {"a": "b", "c": "d", "e": "f"}},
            ("FieldValueTooMany", "spec.labels", "Too many: 3: must have at most 2 items"),
        ),
        (
            {"labels": {"key": "long"}},
            ("FieldValueTooLong", "spec.labels[key]", "Too long: may not be more than 3 bytes"),
        ),
        (
            {"enabled": "yes"},
            (
                "FieldValueTypeInvalid",
                "spec.enabled",
                'Invalid value: "string": spec.enabled in body must be of type boolean: "string"',
            ),
        ),
    ],
)
def test_openapi_value_validation(thing, spec, cause):
    _, causes = admit(thing, obj_with(**spec))
    reason, field, message = cause
    assert {"reason": reason, "field": field, "message": message} in causes


def test_required_field(thing):
    _, causes = admit(
        thing,
        {"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": {}},
    )
    assert causes[0] == {
        "reason": "FieldValueRequired",
        "field": "spec.size",
        "message": "Required value",
    }
    # a blocking error stops CEL, as the API server does
    assert causes[-1]["field"] == "<nil>"
    assert "some validation rules were not checked" in causes[-1]["message"]


def test_quantity_int_or_string_accepts_ints_and_quantities(thing):
    for quota in (4, "4", "100Gi", "1.5", "500m", "1e3"):
        assert admit(thing, obj_with(quota=quota))[1] == []
    _, causes = admit(thing, obj_with(quota="lots"))
    assert causes[0]["field"] == "spec.quota"
    assert causes[0]["message"].startswith('Invalid value: "lots": spec.quota in body should match')


def test_cel_rules_with_message_field_path_and_reason(thing):
    _, causes = admit(thing, obj_with(size=11))
    assert causes == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec",
            "message": 'Invalid value: "object": size is at most 10',
        }
    ]
    _, causes = admit(thing, obj_with(mode="B"))
    assert causes == [
        {
            "reason": "FieldValueRequired",
            "field": "spec.name",
            "message": "Required value: name is needed in mode B",
        }
    ]
    _, causes = admit(thing, obj_with(ports=[{"name": "a", "port": 0}]))
    assert causes == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec.ports[0]",
            "message": 'Invalid value: "object": failed rule: self.port > 0',
        }
    ]


def test_transition_rules_run_only_on_update(thing):
    old, causes = admit(thing, obj_with(size=1))
    assert causes == []
    new = copy.deepcopy(old)
    new["spec"]["size"] = 2
    assert thing.validate(new) == []
    assert thing.validate(new, old) == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec",
            "message": 'Invalid value: "object": size is immutable',
        }
    ]


def test_unchanged_invalid_values_are_ratcheted_on_update(thing):
    stored = obj_with(name="INVALID")
    assert thing.validate(stored) != []
    update = copy.deepcopy(stored)
    update["spec"]["enabled"] = True
    assert thing.validate(update, stored) == []
    update["spec"]["name"] = "STILLBAD"
    # too long and not matching the pattern; the length error blocks the CEL rules
    assert [c["field"] for c in thing.validate(update, stored)] == [
        "spec.name",
        "spec.name",
        "<nil>",
    ]


def test_map_list_items_correlate_by_key_for_transition_rules():
    schema = CompiledSchema(
        {
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "items": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {
                                "type": "object",
                                "properties": {
                                    "name": {"type": "string"},
                                    "value": {
                                        "type": "string",
                                        "x-kubernetes-validations": [
                                            {"rule": "self == oldSelf", "message": "immutable"}
                                        ],
                                    },
                                },
                            },
                        }
                    },
                }
            },
        }
    )
    old = {"spec": {"items": [{"name": "a", "value": "1"}, {"name": "b", "value": "2"}]}}
    reordered = {
        "spec": {
            "items": [
                {"name": "b", "value": "2"},
                {"name": "a", "value": "1"},
                {"name": "c", "value": "3"},
            ]
        }
    }
    assert schema.validate(reordered, old) == []
    changed = {"spec": {"items": [{"name": "b", "value": "9"}]}}
    assert schema.validate(changed, old) == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec.items[0].value",
            "message": 'Invalid value: "string": immutable',
        }
    ]


def test_go_inline_flags_in_patterns_are_supported():
    schema = CompiledSchema(
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "pattern": "^(?i)[a-z]([-a-z0-9]*[a-z0-9])?$"}
            },
        }
    )
    assert schema.bad_patterns == []
    assert schema.validate({"name": "MyCheck"}) == []
    assert schema.validate({"name": "-x"})[0]["field"] == "name"

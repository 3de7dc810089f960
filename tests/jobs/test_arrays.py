"""jobs/arrays.py: the request's shape, the grid order, each element's env and name."""

import pytest

from jobs.arrays import shape as arrays


def parse(array=None, sweep=None, parallelism=None, limit=100):
    return arrays.parse_array_request(
        array=array, sweep=sweep, parallelism=parallelism, limit=limit
    )


def test_an_array_defaults_to_all_elements_at_once_and_caps_parallelism_at_its_count():
    spec, errors = parse(array={"count": 5})
    assert errors == {}
    assert (spec.count, spec.parallelism, spec.grid) == (5, 5, {})
    spec, _ = parse(array={"count": 3, "parallelism": 10})
    assert spec.parallelism == 3


def test_a_sweep_is_the_cartesian_product_last_parameter_fastest():
    spec, errors = parse(sweep={"lr": [0.1, 0.01], "batch": [32, 64]}, parallelism=2)
    assert errors == {}
    assert (spec.count, spec.parallelism) == (4, 2)
    assert arrays.element_params(spec) == [
        {"lr": 0.1, "batch": 32},
        {"lr": 0.1, "batch": 64},
        {"lr": 0.01, "batch": 32},
        {"lr": 0.01, "batch": 64},
    ]


@pytest.mark.parametrize(
    ("kwargs", "field", "needle"),
    [
        ({"array": {"count": 101}}, "array", "limit of 100 elements"),
        ({"array": {"count": 0}}, "array", "from 1 to 100"),
        ({"array": {"count": True}}, "array", "whole number"),
        ({"array": {"count": 2, "parallelism": 0}}, "array", "parallelism"),
        ({"array": {"count": 2, "size": 3}}, "array", "Unknown key(s) size"),
        ({"array": [3]}, "array", "Expected an object"),
        ({"array": {"count": 2}, "parallelism": 1}, "parallelism", "array.parallelism"),
        ({"sweep": {}}, "sweep", "non-empty grid"),
        ({"sweep": {"lr": []}}, "sweep", "sweep.lr must be a non-empty list"),
        ({"sweep": {"lr": 0.1}}, "sweep", "sweep.lr must be a non-empty list"),
        ({"sweep": {"lr": [[0.1]]}}, "sweep", "strings, numbers or booleans"),
        ({"sweep": {"lr": [0.1, 0.1]}}, "sweep", "twice"),
        ({"sweep": {"lr": [float("inf")]}}, "sweep", "strings, numbers or booleans"),
        ({"parallelism": 2}, "parallelism", "goes with a sweep"),
        ({"sweep": {"9lr": [1]}}, "sweep", "not a parameter name"),
        ({"sweep": {"lr": [1], "LR": [2]}}, "sweep", "differ only in case"),
        (
            {"sweep": {"a": list(range(10)), "b": list(range(11))}},
            "sweep",
            "10 × 11 = 110 elements, over this project's limit of 100",
        ),
        ({"array": {"count": 2}, "sweep": {"lr": [1]}}, "sweep", "not both"),
        ({"sweep": {"lr": [1, 2]}, "parallelism": -1}, "parallelism", "whole number"),
    ],
)
def test_bad_requests_name_the_field_and_the_reason(kwargs, field, needle):
    spec, errors = parse(**kwargs)
    assert spec is None
    assert needle in " ".join(errors[field]), errors


def test_each_element_gets_its_index_count_and_parameters_as_env():
    assert arrays.element_env(3, 4, {"lr": 0.01, "batch": 64, "opt": "adam", "amp": True}) == {
        "ARRAY_INDEX": "3",
        "ARRAY_COUNT": "4",
        "SWEEP_LR": "0.01",
        "SWEEP_BATCH": "64",
        "SWEEP_OPT": "adam",
        "SWEEP_AMP": "true",
    }
    assert arrays.reserved_env_clashes({"ARRAY_INDEX": "1", "SWEEP_X": "2", "EPOCHS": "3"}) == [
        "ARRAY_INDEX",
        "SWEEP_X",
    ]


def test_element_names_fit_the_job_name_limit():
    assert arrays.element_name("lr-sweep", 12) == "lr-sweep-12"
    assert arrays.longest_array_name(1000) == 40 - 1 - 3
    assert arrays.longest_array_name(1) == 38

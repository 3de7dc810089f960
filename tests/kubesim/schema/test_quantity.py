from fractions import Fraction

import pytest
from kubesim.api.quantity import Quantity, QuantityError, canonical, is_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", "1"),
        ("1.5", "1500m"),
        ("0.1", "100m"),
        (".5", "500m"),
        ("5.", "5"),
        ("1000", "1k"),
        ("1200", "1200"),
        ("1000m", "1"),
        ("1024Ki", "1Mi"),
        ("1536Mi", "1536Mi"),
        ("2Gi", "2Gi"),
        ("512", "512"),
        ("1e3", "1e3"),
        ("12e6", "12e6"),
        ("1E", "1E"),
        ("5n", "5n"),
        ("0.0000000001", "1n"),  # finer than nano rounds up
        ("-1", "-1"),
        ("-1.5Gi", "-1536Mi"),
        ("1.5Ki", "1536"),
        ("0.5Ki", "512"),
        ("0", "0"),
        ("0Gi", "0"),
        ("+3", "3"),
        (8, "8"),
    ],
)
def test_canonical_form(text, expected):
    assert canonical(text) == expected


@pytest.mark.parametrize(
    "text", ["", "abc", "1.2.3", "1Gb", "1 Gi", "Gi", "--1", "1e", "0x10", " 1"]
)
def test_invalid_quantities(text):
    assert not is_quantity(text)
    with pytest.raises(QuantityError, match="quantities must match the regular expression"):
        parse_quantity(text)


@pytest.mark.parametrize("value", [True, None, [1], {"a": 1}])
def test_non_string_values_are_not_quantities(value):
    assert not is_quantity(value)


def test_exact_values_and_comparison():
    assert Quantity.parse("1Gi").value == 2**30
    assert Quantity.parse("1500m").value == Fraction(3, 2)
    assert Quantity.parse("1Gi") > Quantity.parse("1G")
    assert Quantity.parse("1") == Quantity.parse("1000m")
    assert Quantity.parse("1k") == "1000"
    assert Quantity.parse("2").compare("3") == -1
    assert Quantity.parse("1") != "abc"
    assert sorted(Quantity.parse(q) for q in ["1Gi", "100Mi", "1G"]) == [
        Quantity.parse("100Mi"),
        Quantity.parse("1G"),
        Quantity.parse("1Gi"),
    ]


def test_integer_helpers():
    assert Quantity.parse("8").is_integer()
    assert not Quantity.parse("500m").is_integer()
    assert Quantity.parse("500m").milli_value() == 500
    assert Quantity.parse("1.2").as_int() == 2  # Value() rounds up
    assert (Quantity.parse("1") + Quantity.parse("500m")).milli_value() == 1500
    assert str(Quantity.parse("2Gi") * 3) == "6Gi"
    assert (-Quantity.parse("1")).sign() == -1

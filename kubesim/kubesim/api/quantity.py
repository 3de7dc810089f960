"""Kubernetes resource quantities (k8s.io/apimachinery/pkg/api/resource) in pure Python.

A quantity is a decimal number with an optional suffix: binary SI (Ki, Mi, Gi, Ti, Pi, Ei),
decimal SI (n, u, m, "", k, M, G, T, P, E) or a decimal exponent (1e3, 5E-3).  Values are
kept exactly (``fractions.Fraction``); like the real type, precision finer than 1n is
rounded up (away from zero).  ``str(q)`` gives the canonical form the API server writes back
("1.5" -> "1500m", "1024Ki" -> "1Mi", "1000" -> "1k").
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

_QUANTITY_RE = re.compile(
    r"^(?P<sign>[+-])?(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<bin>[KMGTPE]i)|(?P<dec>[numkMGTPE])|[eE](?P<exp>[+-]?[0-9]+))?$"
)

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_BY_EXP = {v: k for k, v in _DECIMAL.items()}
_BINARY_BY_EXP = {v: k for k, v in _BINARY.items()}
_NANO = Fraction(1, 10**9)

BINARY_SI = "BinarySI"
DECIMAL_SI = "DecimalSI"
DECIMAL_EXPONENT = "DecimalExponent"


class QuantityError(ValueError):
    """The text is not a valid quantity."""


def _round_up_to_nano(value: Fraction) -> Fraction:
    scaled = value / _NANO
    if scaled.denominator == 1:
        return value
    magnitude = math.ceil(abs(scaled))
    return Fraction(magnitude if scaled > 0 else -magnitude) * _NANO


@functools.total_ordering
class Quantity:
    """An exact quantity plus the format it was written in (used for the canonical form)."""

    __slots__ = ("format", "value")

    def __init__(self, value: Fraction | int, fmt: str = DECIMAL_SI):
        self.value = _round_up_to_nano(Fraction(value))
        self.format = fmt

    @classmethod
    def parse(cls, text: str | int | float | Quantity) -> Quantity:
        if isinstance(text, Quantity):
            return text
        if isinstance(text, bool):
            raise QuantityError(f"quantities must match the regular expression: {text!r}")
        if isinstance(text, int):
            return cls(text)
        if isinstance(text, float):
            if not math.isfinite(text):
                raise QuantityError("quantity must be finite")
            return cls(Fraction(text))
        if not isinstance(text, str):
            raise QuantityError("quantity must be a string or a number")
        match = _QUANTITY_RE.match(text)
        if not match:
            raise QuantityError(
                "quantities must match the regular expression "
                "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            )
        number = Fraction(match["num"])
        if match["sign"] == "-":
            number = -number
        if match["bin"]:
            return cls(number * (2 ** _BINARY[match["bin"]]), BINARY_SI)
        if match["exp"] is not None:
            exponent = int(match["exp"])
            if abs(exponent) > 1000:
                raise QuantityError("quantity exponent is out of range")
            return cls(number * Fraction(10) ** exponent, DECIMAL_EXPONENT)
        return cls(number * Fraction(10) ** _DECIMAL[match["dec"] or ""], DECIMAL_SI)

    # -- comparisons and arithmetic -------------------------------------------------------
    def _other(self, other) -> Fraction:
        if isinstance(other, Quantity):
            return other.value
        if isinstance(other, (int, str, float)) and not isinstance(other, bool):
            try:
                return Quantity.parse(other).value
            except QuantityError:
                return NotImplemented
        return NotImplemented

    def __eq__(self, other) -> bool:
        value = self._other(other)
        return value is not NotImplemented and self.value == value

    def __lt__(self, other) -> bool:
        value = self._other(other)
        if value is NotImplemented:
            return NotImplemented
        return self.value < value

    def __hash__(self) -> int:
        return hash(self.value)

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.value + other.value, self.format)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.value - other.value, self.format)

    def __neg__(self) -> Quantity:
        return Quantity(-self.value, self.format)

    def __mul__(self, factor: int) -> Quantity:
        return Quantity(self.value * factor, self.format)

    __rmul__ = __mul__

    def compare(self, other: Quantity | str | int) -> int:
        value = self._other(other)
        return (self.value > value) - (self.value < value)

    def sign(self) -> int:
        return (self.value > 0) - (self.value < 0)

    def is_integer(self) -> bool:
        return self.value.denominator == 1

    def as_int(self) -> int:
        """Whole value, rounded up like Quantity.Value()."""
        return math.ceil(self.value)

    def milli_value(self) -> int:
        """Value * 1000, rounded up like Quantity.MilliValue()."""
        return math.ceil(self.value * 1000)

    def as_float(self) -> float:
        return float(self.value)

    # -- canonical form -------------------------------------------------------------------
    def __str__(self) -> str:
        if self.value == 0:
            return "0"
        fmt = self.format
        if fmt == BINARY_SI:
            if -1024 < self.value < 1024 or self.value.denominator != 1:
                fmt = DECIMAL_SI
            else:
                mantissa = int(self.value)
                exponent = 0
                while exponent < 60 and mantissa % 1024 == 0:
                    mantissa //= 1024
                    exponent += 10
                return f"{mantissa}{_BINARY_BY_EXP.get(exponent, '')}"
        # decimal: integer mantissa with an exponent that is a multiple of 3, as large as exact
        scaled = self.value / _NANO  # an integer after rounding to nano
        mantissa = int(scaled)
        exponent = -9
        while mantissa % 1000 == 0 and mantissa != 0:
            mantissa //= 1000
            exponent += 3
        if fmt == DECIMAL_EXPONENT:
            return f"{mantissa}e{exponent}" if exponent else str(mantissa)
        if exponent > 18:
            mantissa *= 10 ** (exponent - 18)
            exponent = 18
        return f"{mantissa}{_DECIMAL_BY_EXP[exponent]}"

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"


def parse_quantity(text: str | int | float) -> Quantity:
    """Parse a quantity; raises QuantityError when it is not one."""
    return Quantity.parse(text)


def is_quantity(text) -> bool:
    """True for an int or a string in the Kubernetes quantity syntax (no surrounding spaces)."""
    if isinstance(text, bool):
        return False
    if isinstance(text, int):
        return True
    if isinstance(text, float):
        return math.isfinite(text)
    if not isinstance(text, str) or not text:
        return False
    return _QUANTITY_RE.match(text) is not None


def canonical(text: str | int) -> str:
    """Canonical string form of a quantity ("1000m" -> "1", "2048Mi" -> "2Gi")."""
    return str(Quantity.parse(text))

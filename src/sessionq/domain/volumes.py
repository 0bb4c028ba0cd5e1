"""Session volume sources (kagent's SessionVolumeSource): what the protos' rules leave to the service.

`SessionVolumeSource.capacity` has a pattern that lets through more than a Kubernetes quantity of
whole bytes (`0`, `1.5`, `20ki`: docs/kagent-validation.md §5), so the service parses it. Seeding a
Session's volume from a snapshot then needs a configured volume admission, which sessionq does not
have: CreateSession refuses every volume source with FAILED_PRECONDITION, after this check.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from sessionq import errors

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(?:[eE]([0-9]+)|([kMGTPE]i?))?$")
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
MAX_BYTES = 2**63 - 1  # a Kubernetes quantity is an int64 of bytes
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def capacity_bytes(value: str, field: str = "volume_source.capacity") -> int:
    """A Kubernetes quantity (`20Gi`, `500M`, `1e9`) as a positive whole number of bytes;
    INVALID_ARGUMENT otherwise (zero, a fraction of a byte, `ki`, which Kubernetes spells `Ki`)."""
    m = _QUANTITY.match(value)
    if m is None:
        raise errors.invalid(f"{field} {errors.clip(value)!r} is not a Kubernetes quantity such as 20Gi")
    number, exponent, suffix = m.groups()
    if suffix is not None and suffix not in _DECIMAL and suffix not in _BINARY:
        raise errors.invalid(
            f"{field} {errors.clip(value)!r}: unknown suffix {suffix!r} (binary suffixes are Ki, Mi, Gi, ...)"
        )
    try:
        if exponent:  # scaleb: no power of ten is computed, however large the exponent
            amount = Decimal(number).scaleb(int(exponent))
        else:
            amount = Decimal(number) * _DECIMAL.get(suffix or "", _BINARY.get(suffix or "", 1))
    except (InvalidOperation, ValueError, OverflowError):
        raise errors.invalid(f"{field} {errors.clip(value)!r} is not a quantity of bytes") from None
    if amount > MAX_BYTES:
        raise errors.invalid(f"{field} {errors.clip(value)!r} is larger than {MAX_BYTES} bytes")
    if amount <= 0:
        raise errors.invalid(f"{field} must be a positive number of bytes (got {errors.clip(value)!r})")
    if amount != amount.to_integral_value():
        raise errors.invalid(f"{field} {errors.clip(value)!r} is not a whole number of bytes")
    return int(amount)

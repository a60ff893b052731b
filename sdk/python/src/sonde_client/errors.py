"""Errors raised to the caller.

Every error the SDK raises for bad input is a :class:`ValueError`, so code
that already guards its metric calls with ``except ValueError`` keeps
working; the subclasses say which part of the call was wrong. Send
failures are never raised: they are counted (``Client.send_errors``).
"""

from __future__ import annotations

__all__ = [
    "ValidationError",
    "InvalidNameError",
    "InvalidTagError",
    "InvalidValueError",
    "InvalidAddressError",
]


class ValidationError(ValueError):
    """A metric call whose name, tags, value or timestamp cannot be sent."""


class InvalidNameError(ValidationError):
    """A metric name or client prefix that is empty or contains ``|``, ``=``, a space, ``\\n`` or ``\\r``."""


class InvalidTagError(ValidationError):
    """Tags that are not key/value pairs, or a key or value with a forbidden character."""


class InvalidValueError(ValidationError):
    """A value that is not a finite number (NaN, infinities, bools and non-numbers)."""


class InvalidAddressError(ValueError):
    """An address string that names no supported transport."""

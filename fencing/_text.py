"""Decoding replies that may come as bytes or str (depending on the client's settings)."""

from __future__ import annotations

from typing import Any


def text(value: Any) -> str:
    """``value`` as str: bytes are decoded as UTF-8, None becomes ''."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)

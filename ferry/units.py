"""Sizes and durations as people write them: '8M', '1.5G', '512K', '100' (bytes; binary units); '90s', '5m',
'1h', '30' (seconds)."""

from __future__ import annotations

import re

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str | int) -> int:
    """Bytes in text; ValueError naming the text if it is not a positive size."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
        if not match:
            raise ValueError(f"{text!r} is not a size (examples: 8M, 1.5G, 512K)")
        value = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if value <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return value


def format_size(value: int) -> str:
    """value as people write it, in the largest unit that divides it (8388608: 8M); parse_size reads it back."""
    for unit in ("T", "G", "M", "K"):
        if value % _UNITS[unit] == 0:
            return f"{value // _UNITS[unit]}{unit}"
    return str(value)


_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_duration(text: str | int | float) -> float:
    """Seconds in text ('90s', '5m', '1.5h', 30); ValueError naming the text if it is not a positive duration."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", str(text))
        if not match:
            raise ValueError(f"{text!r} is not a duration (examples: 90s, 5m, 1h)")
        value = float(match.group(1)) * _SECONDS[match.group(2)]
    if value <= 0:
        raise ValueError(f"{text!r} is not a positive duration")
    return value

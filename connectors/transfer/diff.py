"""The diff: both listings and the transfer state merge-joined in key order, and what to do with each key.

All three inputs are streams, so memory stays flat whatever the object count.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from connectors.base import ObjectInfo
from connectors.transfer.settings import TransferSettings
from connectors.transfer.state import ObjectRecord
from ferry.errors import PermanentError

COPY, SKIP, DELETE, COMPARE = "copy", "skip", "delete", "compare"
# A COMPARE's outcome when the target's object is proven to hold the source's bytes (its reason: the proof); without a
# record in the state, the object is adopted.
EQUAL = "equal"


@dataclass(frozen=True, slots=True)
class Action:
    kind: str
    key: str
    src: ObjectInfo | None
    dst: ObjectInfo | None
    record: ObjectRecord | None
    reason: str


def _ordered(items: Iterator, what: str) -> Iterator:
    """Pass items through, failing loudly if a listing is not in key order (the merge needs it)."""
    last = None
    for item in items:
        if last is not None and item.key <= last:
            raise PermanentError(f"{what} listing is out of key order at {item.key!r} after {last!r}", code="Order")
        last = item.key
        yield item


Joined = tuple[str, ObjectInfo | None, ObjectInfo | None, ObjectRecord | None]


def merge_join(
    source: Iterator[ObjectInfo],
    target: Iterator[ObjectInfo],
    records: Iterator[ObjectRecord],
    settings: TransferSettings,
) -> Iterator[Joined]:
    """(key, source, target, record in the state) for every selected key either side holds, in key order.

    All three inputs are streams in key order; nothing is held but the current item of each.
    """
    src_it = (i for i in _ordered(source, "source") if settings.selects(i.key))
    dst_it = (i for i in _ordered(target, "target") if settings.selects(i.key))
    rec_it = iter(records)
    s, d, r = next(src_it, None), next(dst_it, None), next(rec_it, None)
    while s is not None or d is not None:
        key = min(x.key for x in (s, d) if x is not None)
        while r is not None and r.key < key:
            r = next(rec_it, None)
        cur_s = s if s is not None and s.key == key else None
        cur_d = d if d is not None and d.key == key else None
        yield key, cur_s, cur_d, (r if r is not None and r.key == key else None)
        if cur_s is not None:
            s = next(src_it, None)
        if cur_d is not None:
            d = next(dst_it, None)


def diff(
    source: Iterator[ObjectInfo],
    target: Iterator[ObjectInfo],
    records: Iterator[ObjectRecord],
    settings: TransferSettings,
) -> Iterator[Action]:
    """Merge-join the two listings and the state's records into actions."""
    for key, s, d, r in merge_join(source, target, records, settings):
        yield decide(key, s, d, r, settings)


def decide(
    key: str, s: ObjectInfo | None, d: ObjectInfo | None, r: ObjectRecord | None, settings: TransferSettings
) -> Action:
    """What to do with one key, from what each side and the state know of it."""
    if s is None:
        return Action(DELETE if settings.delete else SKIP, key, None, d, r, "only in target")
    if d is None:
        return Action(COPY, key, s, None, r, "missing in target")
    if s.size != d.size:
        return Action(COPY, key, s, d, r, "size differs")
    if settings.checksum:
        return Action(COMPARE, key, s, d, r, "--checksum")
    if r is not None:
        if (r.size, r.src_sig, r.dst_sig) == (s.size, s.signature, d.signature):
            return Action(SKIP, key, s, d, r, "unchanged since last sync")
        if r.dst_sig != d.signature:
            return Action(COPY, key, s, d, r, "target changed since last sync")
        return Action(COPY, key, s, d, r, "source changed since last sync")
    return Action(COMPARE, key, s, d, r, "no record: prove it equal, or copy it")

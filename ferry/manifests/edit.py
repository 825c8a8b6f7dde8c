"""Editing a document as its source wrote it: a value set keeping its quoting and anchor merges, maps created."""

from __future__ import annotations

import collections

from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.scalarstring import ScalarString


def metadata(node: dict, position: int | None = None) -> dict:
    """node's metadata map, created (at position, when given) if absent."""
    meta = node.get("metadata")
    if not isinstance(meta, dict):
        meta = CommentedMap()
        if position is not None and isinstance(node, CommentedMap):
            node.insert(position, "metadata", meta)
        else:
            node["metadata"] = meta
    return meta


def set_as_written(node: dict, key: str, value: str) -> None:
    """node[key] = value, quoted as the old value was (a double-quoted image stays double-quoted), and where the
    old value was written when it came in by a `<<: *anchor` merge (so the merge stays a merge)."""
    if isinstance(node, CommentedMap) and node.merge and key not in dict(node.non_merged_items()):
        source = next((merged for merged in node.merge if key in merged), None)
        if source is not None:
            set_as_written(source, key, value)
            # The merged-in copy the map holds, refreshed without making the key its own (ruamel.yaml 0.19's
            # update_key_value fails on its own merge list).
            collections.OrderedDict.__setitem__(node, key, source[key])
            return
    old = node.get(key)
    node[key] = type(old)(value) if isinstance(old, ScalarString) else value


def map_at(meta: dict, key: str) -> dict:
    """meta[key], an empty map created there if it is not a map."""
    found = meta.get(key)
    if not isinstance(found, dict):
        found = CommentedMap()
        meta[key] = found
    return found

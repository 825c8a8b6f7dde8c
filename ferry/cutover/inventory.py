"""An S3 Inventory report (CSV) as the source's listing for a cut-over's first delta, and for a later one when a
newer report of the same configuration appeared: its manifest read, its files' rows under the source's root sorted
by key in a scratch SQLite file (a very large bucket's rows never held in memory), and given to the engine in key
order."""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote_plus

from connectors.base import ObjectInfo
from connectors.registry import open_connector
from ferry.errors import UsageError
from ferry.plan import LoadedPlan
from ferry.profiles import Profile

_COLUMNS = ("Bucket", "Key", "Size", "ETag")
_MANIFEST = "/manifest.json"


def _created(manifest: dict) -> int:
    try:
        return int(manifest.get("creationTimestamp") or 0)
    except ValueError:
        return 0


class Inventory:
    """The objects one inventory report lists under a source bucket's root, kept sorted in path (SQLite); created:
    when S3 began the report (its manifest's creationTimestamp, epoch milliseconds; 0 where it says none)."""

    def __init__(self, path: Path, created: int):
        self.path = path
        self.created = created

    @classmethod
    def load(cls, manifest_url: str, bucket: str, root: str, profiles: dict[str, Profile], path: Path) -> Inventory:
        """Read the report manifest_url (its manifest.json) names, keeping the rows of bucket under root."""
        scheme = manifest_url.split("://", 1)[0]
        folder, name = manifest_url.rsplit("/", 1)
        store = open_connector(folder, profiles)
        try:
            manifest = json.loads(store.get(name)[0])
        finally:
            store.close()
        if manifest.get("fileFormat") != "CSV":
            raise UsageError(f"{manifest_url}: an inventory report in {manifest.get('fileFormat')!r}: ferry reads CSV")
        columns = [c.strip() for c in manifest.get("fileSchema", "").split(",")]
        if manifest.get("sourceBucket") != bucket or not set(_COLUMNS) <= set(columns):
            raise UsageError(
                f"{manifest_url}: not an inventory of bucket {bucket!r} with the columns {', '.join(_COLUMNS)}"
            )
        base = f"{root.strip('/')}/" if root.strip("/") else ""
        destination = open_connector(f"{scheme}://{manifest['destinationBucket'].rsplit(':', 1)[-1]}", profiles)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            db.execute("CREATE TABLE objects (key TEXT PRIMARY KEY, size INTEGER, etag TEXT)")
            try:
                for file in manifest["files"]:
                    data = destination.get(file["key"])[0]
                    text = gzip.decompress(data) if file["key"].endswith(".gz") else data
                    rows = csv.reader(io.StringIO(text.decode("utf-8")))
                    for row in rows:
                        fields = dict(zip(columns, row, strict=False))
                        key = unquote_plus(fields["Key"])
                        if fields["Bucket"] == bucket and key.startswith(base) and key != base:
                            db.execute(
                                "INSERT OR REPLACE INTO objects VALUES (?, ?, ?)",
                                (key[len(base) :], int(fields["Size"]), fields["ETag"].strip('"')),
                            )
            finally:
                destination.close()
        return cls(path, _created(manifest))

    @staticmethod
    def newer(manifest_url: str, profiles: dict[str, Profile], created: int) -> str | None:
        """The manifest of the newest report of manifest_url's configuration (its sibling folders,
        `<configuration>/<YYYY-MM-DDTHH-MMZ>/manifest.json`) if it was created after created; None otherwise.

        One listing of the configuration's folder, and a read of the manifests in folders from manifest_url's on
        (their names are the reports' times, so older ones are not read)."""
        configuration, current, _ = manifest_url.rsplit("/", 2)
        store = open_connector(configuration, profiles)
        try:
            folders = [
                i.key[: -len(_MANIFEST)] for i in store.list() if i.key.count("/") == 1 and i.key.endswith(_MANIFEST)
            ]
            found = {f: _created(json.loads(store.get(f + _MANIFEST)[0])) for f in folders if f >= current}
        finally:
            store.close()
        newest = max(found, key=lambda f: found[f], default=None)
        if newest is None or found[newest] <= created:
            return None
        return f"{configuration}/{newest}{_MANIFEST}"

    def objects(self) -> Iterator[ObjectInfo]:
        """The report's objects in key order, as a listing gives them."""
        with contextlib.closing(sqlite3.connect(self.path)) as db:
            for key, size, etag in db.execute("SELECT key, size, etag FROM objects ORDER BY key"):
                yield ObjectInfo(key=key, size=size, signature=etag)


def load_inventory(loaded: LoadedPlan, folder: Path, manifest: str) -> Inventory:
    """The S3 Inventory report of the plan's source that manifest names (`cutover.inventory`'s, or a newer one of
    its configuration), sorted into folder."""
    source = open_connector(loaded.storage("source"), loaded.plan.profiles)
    try:
        bucket, root = source.bucket, source.root
    finally:
        source.close()
    return Inventory.load(manifest, bucket, root, loaded.plan.profiles, folder / "inventory.sqlite")

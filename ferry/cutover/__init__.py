"""The cut-over: live deltas of data_sync until the last one is predicted to fit the freeze budget, then the freeze
steps, the final delta verified point in time, the switch phases; the freeze window measured (docs/cutover.md).

One module per concern: `delta.py` (one delta: the data_sync shards synced from a live or frozen source, bounded
deletes, the full verification), `predict.py` (the final delta and the freeze window from the deltas so far),
`policy.py` (the bucket policy's ferry-owned Deny), `freeze.py` (the freeze steps applied and undone through a
journal), `report.py` (JSON, Markdown).
"""

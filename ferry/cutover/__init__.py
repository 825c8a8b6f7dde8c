"""The cut-over: live deltas of data_sync until the last one is predicted to fit the freeze budget, then the freeze
steps, the final delta verified point in time, the switch phases; the freeze window measured (docs/cutover.md).

One module per concern: `run.py` (the cut-over from start to end), `delta.py` (one delta: the data_sync shards
synced from a live or frozen source, bounded deletes, the full verification, the change log's keys),
`inventory.py` (an S3 Inventory report as the first delta's source listing), `predict.py` (the final delta and the
freeze window from the deltas so far), `history.py` (what the last cut-over measured, and the prediction a quote
gives from it or from the change log), `policy.py` (the bucket policy's ferry-owned Deny), `quiesce.py` (the source
cluster's workloads scaled to 0 and back), `freeze.py` (the freeze steps applied and undone through a journal),
`report.py` (JSON, Markdown, HTML).
"""

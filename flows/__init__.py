"""Prefect only: the migration pipeline (pipeline.py) and one thin flow per phase (iam_mapping.py, data_sync.py)."""

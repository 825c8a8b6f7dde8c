"""Prefect only: the migration pipeline (pipeline.py) and one thin flow per phase (data_sync.py)."""

"""Prefect only: the migration pipeline (pipeline.py) and the flow that runs any phase (phase.py)."""

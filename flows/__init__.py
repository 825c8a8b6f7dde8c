"""Prefect flows: one thin flow per phase and the pipeline (the migration pipeline issue)."""

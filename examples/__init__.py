"""Runnable examples: the demo and its sample data."""

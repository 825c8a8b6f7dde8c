"""ferry's sync benchmark: `python -m bench.run --help`."""

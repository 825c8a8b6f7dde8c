"""ferry: move GPU/ML workloads from one cloud to another, verified at every step."""

__version__ = "0.1.0"

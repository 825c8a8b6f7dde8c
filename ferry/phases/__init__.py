"""The pipeline's phases: one module each, on the contract in base.py, registered in ferry/phase_registry.py."""

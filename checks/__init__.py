"""What must hold after each phase: plain functions that measure and return a CheckResult."""

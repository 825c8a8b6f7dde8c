"""Fuzzing what users feed ferry: plan and profile files, IAM exports, Dockerfiles and manifests (hypothesis)."""

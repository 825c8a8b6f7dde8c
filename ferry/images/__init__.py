"""The images phase's domain: what it rebases, builds, copies and records, without Prefect.

reference (image references: normalised, split, matched against rules and tags), rebase (a Dockerfile onto the
target's bases, byte for byte), build (a build made ready, its content hash, the buildah, docker and kaniko
commands), copy (the plan's copy entries, skopeo with its retry), oci (the registry API client), auth (registry
credentials, ECR tokens, the tools' auth file), tool (running a build or copy tool), record (an image's digest-map
record and CUDA toolkit), journal (what a run pushed and recorded), publish (the digest map, and putting the
previous one back), undo (one pushed tag undone), report (the run in Markdown).
"""

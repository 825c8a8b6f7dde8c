"""Kubernetes manifests rewritten for the target: images, pod annotations, storage classes, namespaces, labels.

Sources are files and folders of multi-document YAML (a team's own, rendered Helm charts, kustomize output),
read and written with ruamel.yaml's round-trip mode, so everything no rule changes stays as written: comments,
key order, quoting and string types, Secret data. What no rule covers and will not work on the target (EFA
resources, instance-type node selectors, cloud load-balancer and workload-identity annotations, pull secrets,
URLs naming the old namespace) is reported as a Finding naming its file, document and path, never with a
Secret's value.

`model` holds what the rest passes around, `roundtrip` and `splice` how YAML is read and written back byte for
byte, `source` the reading of the sources, `edit` how a value is set as the source wrote it, `paths` how things
are found in a document, `rules` the transforms (one function per rule, in one list), `rollout` the waves,
references and readiness, `apply` and `undo` the rollout against a cluster and its exact undo.
"""

"""The go-live phase's domain: what it measures and decides, without Prefect.

cuda (toolkit against driver), placement (bare metal or managed Kubernetes), probe (the interconnect ping-pong,
a standalone script), jobs (the probe rendered as a pair of Kubernetes Jobs), checkpoint (write and read back a
synthetic sharded checkpoint), report (Markdown and one self-contained HTML page), autoscale (time to N Ready
replicas). gpu_probe is a standalone script run on a GPU node.
"""

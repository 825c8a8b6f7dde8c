"""The go-live phase's domain: what it measures and decides, without Prefect.

cuda (toolkit against driver), fingerprint (each image's toolkit, the driver to judge it against, the GPU probe),
placement (bare metal or managed Kubernetes), probe (the interconnect ping-pong, a standalone script), jobs (the
probe rendered as a pair of Kubernetes Jobs), checkpoint (write and read back a synthetic sharded checkpoint, and
what a crashed one left), report (Markdown and one self-contained HTML page), autoscale (time to N Ready replicas,
and restoring what a crashed spike left), portability (will a workload's code and settings run on the target's
accelerators and fabric: a read-only audit). gpu_probe is a standalone script run on a GPU node.
"""

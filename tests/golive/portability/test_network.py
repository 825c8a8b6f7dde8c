"""Network settings against the target's fabric: InfiniBand-era NCCL and UCX settings in Jobs, PyTorchJobs, MPIJobs
and the ConfigMaps they mount, Dockerfile ENV and launcher scripts; what RoCE v2 needs that is missing; the source's
RDMA resources; hostNetwork and capabilities as the profile allows them."""

from __future__ import annotations

import textwrap

import pytest

from ferry.golive.portability import network
from ferry.golive.portability.model import Container, Setting
from ferry.plan import Fabric
from tests.golive.portability.support import META, RULES, found

PYTORCH_JOB = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: nccl-env, namespace: train}
data:
  NCCL_SOCKET_IFNAME: ib0
  NCCL_IB_HCA: "=mlx5_0:1,mlx5_1:1"
  NCCL_DEBUG: INFO
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: llama-pretrain, namespace: train}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/trainer:2024.06
              envFrom:
                - configMapRef: {name: nccl-env}
              env:
                - name: NCCL_IB_GID_INDEX
                  value: "3"
              securityContext:
                capabilities: {add: [IPC_LOCK]}
              resources:
                limits: {nvidia.com/gpu: 8, rdma.compute.meta.com/roce: 1}
    Worker:
      replicas: 3
      template:
        spec:
          hostNetwork: true
          containers:
            - name: pytorch
              image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/trainer:2024.06
              env:
                - name: NCCL_NET
                  value: IB
                - name: UCX_NET_DEVICES
                  value: mlx5_0:1
                - name: IFNAME
                  valueFrom: {configMapKeyRef: {name: nccl-env, key: NCCL_SOCKET_IFNAME}}
              securityContext:
                capabilities: {add: [SYS_ADMIN]}
              resources:
                limits: {nvidia.com/gpu: 8, rdma/hca_shared_devices_a: 1}
"""


def judged(*files: tuple[str, str], profile=META):
    objects = []
    for name, text in files:
        docs = network.manifest_documents(textwrap.dedent(text), name)
        assert isinstance(docs, list)
        objects += [(name, d) for d in docs]
    containers = network.workload_containers(objects, network.config_maps(objects))
    return network.judge(containers, RULES, profile)


def test_a_pytorch_job_and_the_config_map_it_mounts() -> None:
    hits = judged(("job.yaml", PYTORCH_JOB))
    assert sorted({(h.line, h.rule.kind, h.match) for h in hits}) == [
        (5, "ib-setting", "NCCL_SOCKET_IFNAME=ib0 (ConfigMap nccl-env)"),
        (6, "ib-setting", "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1 (ConfigMap nccl-env)"),
        (34, "host-network", "hostNetwork: true (PyTorchJob/llama-pretrain container pytorch)"),
        (36, "roce-missing", "PyTorchJob/llama-pretrain container pytorch adds no IPC_LOCK"),
        (36, "roce-missing", "PyTorchJob/llama-pretrain container pytorch does not set NCCL_IB_GID_INDEX"),
        (39, "ib-setting", "NCCL_NET=IB"),
        (41, "ib-setting", "UCX_NET_DEVICES=mlx5_0:1"),
        (46, "capability", "capability SYS_ADMIN (PyTorchJob/llama-pretrain container pytorch)"),
        (48, "rdma-resource", "rdma/hca_shared_devices_a (PyTorchJob/llama-pretrain container pytorch)"),
    ]
    # The Master mounts the ConfigMap and sets the GID index, adds IPC_LOCK and requests the target's RDMA: none
    # of what it misses is its own.
    assert not [h for h in hits if h.line < 30 and h.file == "job.yaml" and h.rule.kind != "ib-setting"]


def test_an_mpi_job_on_aws_efa() -> None:
    job = """\
    apiVersion: kubeflow.org/v2beta1
    kind: MPIJob
    metadata: {name: nemo}
    spec:
      mpiReplicaSpecs:
        Worker:
          template:
            spec:
              containers:
                - name: worker
                  env:
                    - {name: FI_PROVIDER, value: efa}
                    - {name: FI_EFA_USE_DEVICE_RDMA, value: "1"}
                    - {name: NCCL_SOCKET_IFNAME, value: "^lo,docker"}
                    - {name: GLOO_SOCKET_IFNAME, value: ens5}
                  resources:
                    limits: {vpc.amazonaws.com/efa: 4}
    """
    assert sorted({(h.line, h.rule.kind) for h in judged(("mpijob.yaml", job))}) == [
        (10, "roce-missing"), (12, "efa-setting"), (13, "efa-setting"), (15, "ib-setting"), (17, "rdma-resource")
    ]  # fmt: skip


def test_interfaces_the_target_has_and_exclusions_are_fine() -> None:
    container = Container("c", "f", 1, [Setting("NCCL_SOCKET_IFNAME", v, "f", i) for i, v in enumerate(
        ["eth0", "=eth0", "eth", "^docker,lo", "ib0", "eth0,ib1"], 1)])  # fmt: skip
    assert [h.line for h in network.judge([container], RULES, META)] == [5, 6]


def test_without_a_fabric_the_profile_knows_nothing_to_miss_and_values_decide() -> None:
    plain = META.model_copy(update={"fabric": None})
    settings = [Setting("NCCL_IB_HCA", "mlx5_0", "f", 2), Setting("NCCL_SOCKET_IFNAME", "ens5", "f", 3)]
    container = Container("c", "f", 1, settings)
    container.host_network, container.capabilities = 4, {"SYS_ADMIN": 5}
    assert found(network.judge([container], RULES, plain)) == [(2, "ib-setting"), (3, "ib-setting")]


def test_a_gid_index_other_than_the_fabrics_is_named_where_it_is_set() -> None:
    fabric = Fabric(name="RoCE v2", rdma_env={"NCCL_IB_GID_INDEX": "3"})
    container = Container("c", "f", 1, [Setting("NCCL_IB_GID_INDEX", "0", "f", 7)])
    hits = network.judge([container], RULES, META.model_copy(update={"fabric": fabric}))
    assert [(h.line, h.rule.kind, h.match) for h in hits] == [(7, "roce-missing", "NCCL_IB_GID_INDEX=0")]


def test_dockerfile_env_by_stage_and_a_launcher_script() -> None:
    dockerfile = """\
    FROM nvcr.io/nvidia/pytorch:24.05-py3 AS base
    ENV NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_2,mlx5_3 \\
        NCCL_SOCKET_IFNAME=ib0 \\
        NCCL_IB_GID_INDEX=3
    FROM base AS train
    ENV NCCL_DEBUG INFO
    ENV TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX"
    FROM python:3.11-slim AS tools
    """
    hits, containers = network.read_dockerfile(textwrap.dedent(dockerfile), "Dockerfile", RULES)
    assert hits == [] and [len(c.settings) for c in containers] == [3, 5, 0]
    judged_hits = network.judge(containers, RULES, META)
    assert sorted({(h.line, h.rule.kind) for h in judged_hits}) == [
        (2, "ib-setting"), (3, "ib-setting"), (7, "cuda-extension")
    ]  # fmt: skip
    script = """\
    #!/bin/bash
    #SBATCH --nodes=4
    export NCCL_SOCKET_IFNAME=ib0  # the IB interface
    export NCCL_IB_HCA="mlx5_0,mlx5_1"
    MASTER_PORT=29500
    pip install cupy-cuda12x
    nvidia-smi topo -m && torchrun --nnodes=4 train.py
    """
    hits, container = network.read_script(textwrap.dedent(script), "launch.sh", RULES)
    assert found(hits) == [(6, "cuda-package"), (7, "cuda-call")] and container is not None
    # A script adds no capability: only the settings RoCE v2 needs can be missing there.
    assert found(network.judge([container], RULES, META)) == [(1, "roce-missing"), (3, "ib-setting"), (4, "ib-setting")]


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("kind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n", 1, "render it first"),
        ("{{- if .Values.enabled }}\nkind: ConfigMap\n{{- end }}\n", 1, "render it first"),
        ("a: [1, 2\n", 2, "not YAML"),
    ],
)
def test_yaml_that_does_not_parse_is_unreadable(text: str, line: int, needle: str) -> None:
    hit = network.manifest_documents(text, "templates/cm.yaml")
    assert not isinstance(hit, list) and hit.rule.kind == "unreadable" and hit.line == line and needle in hit.match


def test_a_list_of_objects_as_kubectl_get_prints_it() -> None:
    listed = """\
    apiVersion: v1
    kind: List
    items:
      - apiVersion: batch/v1
        kind: Job
        metadata: {name: j}
        spec:
          template:
            spec:
              hostNetwork: true
              containers: [{name: c, image: x}]
    """
    assert found(judged(("list.yaml", listed))) == [(10, "host-network")]


def test_an_azure_ml_job_and_a_compose_file_set_environments() -> None:
    job = """\
    $schema: https://azuremlschemas.azureedge.net/latest/commandJob.schema.json
    command: python train.py
    environment: azureml:acpt-pytorch-2.2-cuda12.1@latest
    distribution: {type: pytorch, process_count_per_instance: 8}
    environment_variables:
      NCCL_DEBUG: WARN
      NCCL_SOCKET_IFNAME: eth0
      NCCL_TOPO_FILE: /opt/microsoft/ndv4-topo.xml
      UCX_NET_DEVICES: mlx5_ib0:1
    """
    compose = """\
    services:
      trainer:
        image: trainer
        environment:
          - NCCL_SOCKET_IFNAME=ib0
          - NCCL_DEBUG=INFO
    """
    containers = [
        c
        for name, text in (("job.yml", job), ("compose.yaml", compose))
        for doc in network.manifest_documents(textwrap.dedent(text), name)
        for c in network.environment_blocks(doc, name)
    ]
    assert [c.label for c in containers] == ["job.yml environment_variables", "compose.yaml environment"]
    assert sorted((h.file, h.line, h.rule.kind) for h in network.judge(containers, RULES, META)) == [
        ("compose.yaml", 5, "ib-setting"), ("job.yml", 5, "roce-missing"), ("job.yml", 8, "ib-setting"),
        ("job.yml", 9, "ib-setting"),
    ]  # fmt: skip


def test_a_kustomization_generates_the_config_map_a_deployment_mounts() -> None:
    kustomization = """\
    apiVersion: kustomize.config.k8s.io/v1beta1
    kind: Kustomization
    namespace: train
    resources: [deployment.yaml]
    configMapGenerator:
      - name: nccl
        literals:
          - NCCL_SOCKET_IFNAME=ib0
          - NCCL_DEBUG=INFO
    """
    deployment = """\
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: serve}
    spec:
      template:
        spec:
          containers:
            - name: s
              envFrom: [{configMapRef: {name: nccl}}]
    """
    hits = judged(("kustomization.yaml", kustomization), ("deployment.yaml", deployment))
    assert [(h.file, h.line, h.match) for h in hits] == [
        ("kustomization.yaml", 8, "NCCL_SOCKET_IFNAME=ib0 (ConfigMap nccl)")
    ]


def test_helm_values_and_a_ray_runtime_env() -> None:
    values = """\
    replicaCount: 2
    trainer:
      env:
        - name: NCCL_SOCKET_IFNAME
          value: ib0
    """
    ray = """\
    entrypoint: python train.py
    runtime_env:
      env_vars: {NCCL_IB_HCA: "mlx5_0,mlx5_1", NCCL_IB_GID_INDEX: "3"}
    variables: ["NCCL_IB_*", NCCL_NET]  # a list of names, as a rules file writes it: no environment
    """
    containers = [
        c
        for name, text in (("values.yaml", values), ("ray.yaml", ray))
        for doc in network.manifest_documents(textwrap.dedent(text), name)
        for c in network.environment_blocks(doc, name)
    ]
    assert sorted((h.file, h.line, h.rule.kind) for h in network.judge(containers, RULES, META)) == [
        ("ray.yaml", 3, "ib-setting"), ("values.yaml", 4, "ib-setting")
    ]  # fmt: skip

"""The go-live phase through its contract: a run against loopback and a local target measures and reports; with
nothing to measure every check SKIPs with its reason and the gate WARNs (FAILs under strict); the report reads
right in headless Chromium; rollback removes a crashed run's checkpoint leftovers."""

from __future__ import annotations

import base64
import json
import re
import shutil
import socket
import threading
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from ferry import digest_map
from ferry.audit import AuditFolder
from ferry.errors import UsageError
from ferry.files import write_atomic
from ferry.golive import probe
from ferry.golive.checkpoint import shard_name, synthetic
from ferry.layout import StateLayout
from ferry.phases.base import Reporter, open_phase
from ferry.plan import load_plan
from ferry.results import Status, gate_status
from tests.controlplane.cluster import ControlPlane
from tests.golive.portability.support import training_repo
from tests.golive.test_autoscale import deployment
from tests.golive.test_jobs import ProbeKubelet
from tests.golive.test_probe import start_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Beside the UI test's screenshots (ignored by git); docs/golive-report.png is a copy of one.
SHOTS = Path(__file__).resolve().parents[2] / ".ferry" / "screenshots"


class Recorder(Reporter):
    def __init__(self) -> None:
        super().__init__()
        self.published: dict[str, str] = {}

    def markdown(self, key: str, text: str, description: str) -> None:
        self.published[key] = text


def plan_file(
    tmp_path: Path, golive: dict, *, strict: bool = False, gates: dict | None = None, cluster: dict | None = None
) -> Path:
    """A plan of the go-live phase alone; cluster: target.cluster (context, namespace, kubeconfig)."""
    (tmp_path / "src").mkdir(exist_ok=True)
    plan = {
        "name": "golive-check",
        "strict": strict,
        "source": {"storage": "./src"},
        "target": {"storage": "./dst", "profile": "meta-compute", "kubernetes_version": "1.30"},
        "phases": {"golive": golive},
        "gates": {"golive": gates or {}},
    }
    if cluster:
        plan["target"]["cluster"] = cluster
    path = tmp_path / "migration.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def run_all(path: Path, audit_root: Path) -> tuple[list, Recorder, object]:
    loaded = load_plan(path)
    phase = open_phase(loaded, "golive")
    audit, reporter = AuditFolder(audit_root), Recorder()
    for step in phase.steps():
        phase.run(step, audit, reporter)
    return phase.gate(audit), reporter, phase


def by_name(results) -> dict:
    return {r.name: r for r in results}


def test_a_measured_run_and_its_report(tmp_path) -> None:
    write_atomic(
        StateLayout(tmp_path / ".ferry").digest_map("golive-check"),
        digest_map.render(
            [
                digest_map.ImageRecord("src/a:1", "reg.example/ml/a:1", "sha256:" + "a" * 64, "rebuilt", "12.4.1"),
                digest_map.ImageRecord("src/b:1", "reg.example/ml/b:1", "sha256:" + "b" * 64, "copied", "12.2.2"),
                digest_map.ImageRecord("src/c:1", "reg.example/ml/c:1", "sha256:" + "c" * 64, "copied", None),
            ]
        ),
    )
    thread, port = start_server("tcp")
    training_repo(tmp_path)
    workload = {"name": "llama-405b-pretrain", "params": "405e9", "nodes": 32, "virt_overhead": 0.14}
    path = plan_file(
        tmp_path,
        {
            "latency": {"server": f"127.0.0.1:{port}", "samples": 400, "warmup": 20, "jobs": True},
            "checkpoint": {"size": "4M", "shards": 4, "prefix": "golive/ckpt/", "threads": 4},
            "nodes": {"driver": "535.104.05"},
            "workloads": [{**workload, "hourly_cost_delta": 6.5, "accelerator": "mtia", "paths": ["train", "k8s"]}],
        },
        # Thresholds no round trip and no copy that completes can miss (a TCP round trip times out after 1 s):
        # this test is about the report, not about how fast this machine is; blockers allowed, so that they warn.
        gates={"p99_us": 1_000_000, "checkpoint_write_gb_per_s": 1e-9, "checkpoint_read_gb_per_s": 1e-9,
               "max_portability_blockers": 10},
    )  # fmt: skip
    results, reporter, phase = run_all(path, tmp_path / "runs" / "r1")
    thread.join(5)
    found = by_name(results)
    assert found["golive.interconnect_p99"].status == Status.PASS
    assert found["golive.interconnect_p99"].measured["samples"] == 400
    assert found["golive.probe_jobs_schema"].status == Status.PASS
    assert found["golive.checkpoint_write"].status == Status.PASS
    assert found["golive.checkpoint_read"].status == Status.PASS
    assert found["golive.placement"].measured == {"llama-405b-pretrain": "bare-metal"}
    # 12.4.1 needs 550.54.15: minor-version compatibility only; 12.2.2's own minimum is met.
    cuda = found["golive.cuda_fingerprint"]
    assert cuda.status == Status.WARN and cuda.measured["judged"] == 2
    assert found["golive.gpu"].status == Status.SKIP and found["golive.gpu"].evidence
    assert found["golive.scale_up"].status == Status.SKIP
    portability = found["golive.portability"]
    assert portability.status == Status.WARN and portability.measured["blockers"] == 6
    assert portability.evidence[0] == "llama-405b-pretrain on mtia: 6 blocker(s) (at most 10), 2 warning(s), 0 ok: WARN"
    measured = found["golive.everything_measured"]
    jobs = found["golive.interconnect_p99_jobs"]
    assert jobs.status == Status.SKIP and jobs.evidence[0].startswith("no cluster (target.cluster)")
    assert measured.status == Status.WARN and measured.measured["skipped"] == 3
    assert gate_status(results, strict=False) == Status.WARN
    # Nothing is left on the target.
    assert not [p for p in (tmp_path / "dst").rglob("*") if p.is_file()]
    text = reporter.published["golive-report"]
    assert "| golive.interconnect_p99 | **PASS** |" in text and "not RDMA verbs" in text
    page = tmp_path / "runs" / "r1" / "golive" / "report.html"
    assert page.exists() and "data:image/png;base64," in page.read_text()
    if CHROMIUM:
        _looks_right_in_chromium(page)
    else:
        assert "train/train.py</code> nccl-backend" in page.read_text()


def _looks_right_in_chromium(page: Path) -> None:
    from tests.browser import Browser

    browser = Browser(CHROMIUM)
    try:
        browser.goto(page.as_uri())
        assert browser.wait_for_text("Go-live report: golive-check")
        rows = browser.evaluate(
            "[...document.querySelectorAll('#summary tr')].slice(1)"
            ".map(r => [r.cells[0].innerText, r.cells[1].innerText])"
        )
        assert ["golive.interconnect_p99", "PASS"] in rows and ["golive.gpu", "SKIP"] in rows
        assert browser.evaluate("document.getElementById('verdict').innerText") == "WARN"
        assert "not RDMA verbs" in browser.evaluate("document.body.innerText")
        # The portability table: the workload, its counts, its blockers first with the change to make.
        row = browser.evaluate("[...document.querySelectorAll('#portability tr')][1].innerText")
        assert row.startswith("llama-405b-pretrain\tmtia\t6\t2\t0"), row
        first = browser.evaluate("document.querySelector('#portability li').innerText")
        assert first.startswith("blocker train/csrc/fused.cu:1 cuda-extension"), first
        # Both charts are decoded images with real sizes, not broken links.
        for chart in ("latency-chart", "throughput-chart"):
            width = browser.evaluate(f"document.getElementById('{chart}').naturalWidth")
            assert width and width > 300, chart
        SHOTS.mkdir(parents=True, exist_ok=True)
        # The whole page, charts included, not only the window.
        height = browser.evaluate("document.documentElement.scrollHeight")
        clip = {"x": 0, "y": 0, "width": 1400, "height": height, "scale": 1}
        shot = browser.call("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)
        (SHOTS / "golive-report.png").write_bytes(base64.b64decode(shot["data"]))
    finally:
        browser.close()


@pytest.mark.parametrize("strict", [False, True])
def test_nothing_measurable_skips_every_check_with_its_reason(tmp_path, strict) -> None:
    path = plan_file(tmp_path, {"gpu_probe": False}, strict=strict)
    results, _, _ = run_all(path, tmp_path / "runs" / "r1")
    *checks, summary = results
    assert all(r.status == Status.SKIP and r.evidence and all(r.evidence) for r in checks), [
        (r.name, r.status, r.evidence) for r in checks
    ]
    # A SKIP still says what it would have been held against (the report's threshold column is never empty).
    assert all(r.threshold for r in results), [r.name for r in results if not r.threshold]
    assert summary.status == Status.WARN and summary.measured["skipped"] == len(checks)
    assert gate_status(results, strict) == (Status.FAIL if strict else Status.WARN)


@pytest.mark.parametrize("strict", [False, True])
def test_a_plan_without_a_cluster_skips_every_cluster_check_with_its_reason(tmp_path, strict) -> None:
    # Written by someone else: some checks only, the cluster ones with no target.cluster to run them on.
    golive = {
        "latency": {"jobs": True, "samples": 100},
        "autoscaling": {"deployment": "llama-serve", "replicas": 8},
        "workloads": [{"name": "w", "params": "405B", "nodes": 32, "virt_overhead": "14%", "hourly_cost_delta": 6.5}],
        "gpu_probe": False,
    }
    results, reporter, _ = run_all(plan_file(tmp_path, golive, strict=strict), tmp_path / "runs" / "r1")
    found = by_name(results)
    for name, reason in (
        ("golive.cuda_fingerprint", "target.cluster, to read the node labels"),
        ("golive.interconnect_p99_jobs", "no cluster (target.cluster): the Jobs are rendered in"),
        ("golive.scale_up", "no cluster: target.cluster is not set"),
    ):
        assert found[name].status == Status.SKIP and reason in found[name].evidence[0], found[name]
    assert "golive.interconnect_p99" not in found, "no server named: nothing to SKIP twice"
    assert found["golive.probe_jobs_schema"].status == Status.PASS and found["golive.probe_jobs_schema"].evidence
    assert found["golive.placement"].status == Status.PASS
    assert not [r.name for r in results if r.status == Status.PASS and not r.evidence]
    assert gate_status(results, strict) == (Status.FAIL if strict else Status.WARN)
    # The report (Markdown) has every check with its status, threshold and evidence.
    text = reporter.published["golive-report"]
    for r in results:
        assert f"| {r.name} | **{r.status.value}** |" in text
        assert all(f"- {line}" in text for line in r.evidence)
    page = tmp_path / "runs" / "r1" / "golive" / "report.html"
    if CHROMIUM:
        from tests.browser import Browser

        browser = Browser(CHROMIUM)
        try:
            browser.goto(page.as_uri())
            assert browser.wait_for_text("Go-live report: golive-check")
            rows = browser.evaluate(
                "[...document.querySelectorAll('#summary tr')].slice(1)"
                ".map(r => [...r.cells].map(c => c.innerText.trim()))"
            )
            assert [row[0] for row in rows] == [r.name for r in results]
            for (name, status, _measured, threshold, evidence), r in zip(rows, results, strict=True):
                assert status == r.status.value and threshold != "-" and evidence, (name, threshold, evidence)
                assert r.evidence[0] in evidence
            assert browser.evaluate("document.getElementById('verdict').innerText") == ("FAIL" if strict else "WARN")
            assert browser.evaluate("document.getElementById('latency-none').innerText").startswith("Not measured")
        finally:
            browser.close()


def test_checkpoint_figures_keep_their_digits(tmp_path) -> None:
    from checks.golive import check_throughput

    # A slow store's figure is not rounded to 0.0 beside its threshold.
    slow = check_throughput("golive.checkpoint_write", 0.0000021712, 2.0, ["evidence"], [])
    assert slow.status == Status.FAIL and slow.measured == {"checkpoint_write_gb_per_s": 2.171e-06}
    fast = check_throughput("golive.checkpoint_read", 12.3456789, 4.0, ["evidence"], [])
    assert fast.measured == {"checkpoint_read_gb_per_s": 12.35}


@pytest.mark.parametrize(("size", "shards"), [("512", 1000), (1, 2)])
def test_a_checkpoint_smaller_than_its_shards_is_a_plan_error(tmp_path, size, shards: int) -> None:
    # It used to pass `plan validate` and end the run in a traceback from the synthetic checkpoint.
    with pytest.raises(UsageError, match=f"phases.golive.checkpoint: .*cannot fill {shards} shards"):
        load_plan(plan_file(tmp_path, {"checkpoint": {"size": size, "shards": shards}}))


@pytest.mark.parametrize(
    ("size", "shards", "total"), [("8G", 1, 8 << 30), ("8GiB", 1000, 8 << 30), ("512M", 1, 512 << 20)]
)
def test_checkpoint_sizes_as_written(tmp_path, size: str, shards: int, total: int) -> None:
    phase = open_phase(load_plan(plan_file(tmp_path, {"checkpoint": {"size": size, "shards": shards}})), "golive")
    assert phase.changes().totals["checkpoint_bytes"] == total


def test_its_change_set_names_what_it_measures_and_everything_it_touches(tmp_path) -> None:
    golive = {
        "checkpoint": {"size": "1M", "shards": 2, "prefix": "ckpt/"},
        "autoscaling": {"deployment": "trainer", "replicas": 4, "hpa": "trainer-hpa"},
        "latency": {"jobs": True, "samples": 100},
    }
    cluster = {"context": "c", "namespace": "ml"}
    said = open_phase(load_plan(plan_file(tmp_path, golive, cluster=cluster)), "golive").changes().text
    assert said == (
        "golive measures each image's CUDA toolkit against the driver; TCP round trips (100 samples); checkpoint "
        "write and read speed; scale-up of trainer; it writes 1,048,576 bytes under "
        f"{tmp_path / 'dst'}/ckpt/<run>/, then deletes them; runs a probe Job pair in namespace ml, then deletes it; "
        "raises HorizontalPodAutoscaler trainer-hpa's minReplicas in namespace ml to 4, then restores it; nothing "
        "else changes."
    )
    quiet = open_phase(load_plan(plan_file(tmp_path, {})), "golive").changes()
    assert quiet.text.endswith("it touches nothing; nothing else changes.") and quiet.empty


def test_an_unreachable_probe_server_and_a_failed_read_back_are_not_passes(tmp_path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    path = plan_file(
        tmp_path,
        {"latency": {"server": f"127.0.0.1:{dead}", "samples": 10}, "checkpoint": {"size": "2M", "shards": 2},
         "gpu_probe": False},
        gates={"checkpoint_write_gb_per_s": 1e-9},
    )  # fmt: skip
    loaded = load_plan(path)
    # Damage the synthetic checkpoint once it exists: the bytes that land are not those recorded.
    phase = open_phase(loaded, "golive")
    audit = AuditFolder(tmp_path / "runs" / "r1")
    source = synthetic(loaded.layout.synthetic_checkpoint, 2 << 20, 2)
    (source.root / shard_name(0, 2)).write_bytes(b"\0" * (1 << 20))
    for step in phase.steps():
        phase.run(step, audit, Reporter())
    found = by_name(phase.gate(audit))
    assert found["golive.interconnect_p99"].status == Status.SKIP
    assert "no round trip" in found["golive.interconnect_p99"].evidence[0]
    assert found["golive.checkpoint_read"].status == Status.FAIL
    assert any("SHA-256" in line for line in found["golive.checkpoint_read"].evidence)
    assert found["golive.checkpoint_write"].status == Status.PASS


def test_rollback_removes_what_a_crashed_run_left(tmp_path) -> None:
    path = plan_file(tmp_path, {"checkpoint": {"size": "1M", "shards": 1}, "gpu_probe": False})
    phase = open_phase(load_plan(path), "golive")
    audit_root = tmp_path / "runs" / "r1"
    assert "nothing to undo" in phase.rollback(AuditFolder(audit_root)).text
    phase.run("checkpoint", AuditFolder(audit_root), Reporter())
    url = json.loads((audit_root / "golive" / "checkpoint-target.json").read_text())["url"]
    assert "nothing to undo" in phase.rollback(AuditFolder(audit_root)).text, "it cleaned up after itself, and says so"
    # A run killed mid-write: its shards are there, and it never reached its clean-up (nor marked it done).
    leftover = crash(audit_root, url)
    preview = phase.rollback(AuditFolder(audit_root), dry_run=True)
    assert preview.items == [f"delete every object under {url}"] and leftover.exists()
    assert "deleted 1 object(s)" in phase.rollback(AuditFolder(audit_root)).text and not leftover.exists()
    assert "nothing to undo" in phase.rollback(AuditFolder(audit_root)).text


def crash(audit_root: Path, url: str) -> Path:
    """What a checkpoint killed mid-write leaves: a shard under its place, no clean-up marker."""
    leftover = Path(url) / "model-00001-of-00001.bin"
    leftover.parent.mkdir(parents=True, exist_ok=True)
    leftover.write_bytes(b"left by a crash")
    (audit_root / "golive" / "checkpoint-cleaned.json").unlink()
    return leftover


def test_the_next_measurement_removes_what_a_killed_one_left(tmp_path) -> None:
    path = plan_file(tmp_path, {"checkpoint": {"size": "1M", "shards": 1}, "gpu_probe": False})
    phase = open_phase(load_plan(path), "golive")
    first, second = tmp_path / "runs" / "r1", tmp_path / "runs" / "r2"
    phase.run("checkpoint", AuditFolder(first), Reporter())
    url = json.loads((first / "golive" / "checkpoint-target.json").read_text())["url"]
    leftover = crash(first, url)
    phase.run("checkpoint", AuditFolder(second), Reporter())
    assert not leftover.exists() and (first / "golive" / "checkpoint-cleaned.json").exists()
    assert "nothing to undo" in phase.rollback(AuditFolder(first)).text


def test_plan_errors_are_one_line_with_the_field(tmp_path) -> None:
    path = plan_file(tmp_path, {"latency": {"samples": 10}})
    with pytest.raises(UsageError) as raised:
        load_plan(path)
    assert "phases.golive.latency" in str(raised.value) and "server" in str(raised.value)
    for driver, needle in (("latest", "not a version"), ("r550", "driver branch"), (570.26, "quote the driver")):
        path = plan_file(tmp_path, {"nodes": {"driver": driver}})
        with pytest.raises(UsageError, match=f"phases.golive.nodes.driver: .*{needle}"):
            load_plan(path)


def test_autoscaling_through_the_phase_and_rollback_after_a_crash(control_plane, namespace, tmp_path) -> None:
    control_plane.seed(deployment(namespace, replicas=2))
    kubeconfig = control_plane.kubeconfig(tmp_path / "kubeconfig", context="meta-eu")
    path = plan_file(
        tmp_path,
        {"autoscaling": {"deployment": "llama-serve", "replicas": 8, "timeout_s": 60, "poll_s": 0.1},
         "gpu_probe": False},
        gates={"scale_up_s": 60},
        cluster={"context": "meta-eu", "namespace": namespace, "kubeconfig": str(kubeconfig)},
    )  # fmt: skip
    phase = open_phase(load_plan(path), "golive")
    audit_root = tmp_path / "runs" / "r1"
    # The Deployment controller, the scheduler and kwok make the 8 replicas Ready.
    phase.run("autoscaling", AuditFolder(audit_root), Reporter())
    scale = by_name(phase.gate(AuditFolder(audit_root)))["golive.scale_up"]
    assert scale.status == Status.PASS and scale.measured["scale_up_s"] > 0, scale.evidence
    assert any("restored" in line for line in scale.evidence)
    assert "nothing to undo" in phase.rollback(AuditFolder(audit_root)).text
    # A run that died mid-spike: the journal holds the snapshot, the Deployment is left at 8.
    (audit_root / "golive" / "autoscaling-restored.json").unlink()
    client.AppsV1Api(control_plane.api_client()).patch_namespaced_deployment(
        "llama-serve", namespace, {"spec": {"replicas": 8}}
    )
    preview = phase.rollback(AuditFolder(audit_root), dry_run=True)
    assert preview.items == [f"restore {namespace}/llama-serve as snapshot before the spike"]
    assert "back to 2 replica(s)" in phase.rollback(AuditFolder(audit_root)).text
    assert control_plane.get("apps/v1", "Deployment", "llama-serve", namespace)["spec"]["replicas"] == 2
    assert "nothing to undo" in phase.rollback(AuditFolder(audit_root)).text


def test_autoscaling_without_a_cluster_skips_with_the_reason(tmp_path) -> None:
    path = plan_file(tmp_path, {"autoscaling": {"deployment": "llama-serve", "replicas": 8}, "gpu_probe": False})
    phase = open_phase(load_plan(path), "golive")
    phase.run("autoscaling", AuditFolder(tmp_path / "r"), Reporter())
    scale = by_name(phase.gate(AuditFolder(tmp_path / "r")))["golive.scale_up"]
    assert scale.status == Status.SKIP and scale.evidence == ["no cluster: target.cluster is not set"]


def test_the_probe_jobs_through_the_phase_on_a_cluster(tmp_path, control_plane, namespace) -> None:
    kubeconfig = control_plane.kubeconfig(tmp_path / "kubeconfig", context="meta-eu")
    path = plan_file(
        tmp_path, {"latency": {"jobs": True, "samples": 200, "poll_s": 0.05}, "gpu_probe": False},
        gates={"p99_us": 1_000_000},  # no TCP round trip takes longer: it times out at 1 s
        cluster={"context": "meta-eu", "namespace": namespace, "kubeconfig": str(kubeconfig)},
    )  # fmt: skip
    phase = open_phase(load_plan(path), "golive")
    audit = AuditFolder(tmp_path / "runs" / "r1")
    with ProbeKubelet(control_plane, namespace):
        phase.run("latency", audit, Reporter())
    found = by_name(phase.gate(audit))
    assert "golive.interconnect_p99" not in found, "no server named: only the Jobs measure"
    assert found["golive.probe_jobs_schema"].status == Status.PASS
    jobs = found["golive.interconnect_p99_jobs"]
    assert jobs.status == Status.PASS and jobs.measured["samples"] == 200


def test_the_driver_comes_from_the_node_labels_when_the_plan_gives_none(tmp_path) -> None:
    write_atomic(
        StateLayout(tmp_path / ".ferry").digest_map("golive-check"),
        digest_map.render(
            [digest_map.ImageRecord("src/a:1", "reg.example/ml/a:1", "sha256:" + "a" * 64, "rebuilt", "12.4.1")]
        ),
    )
    # A control plane of its own, with only these nodes: as GPU feature discovery labels them, and a CPU node.
    with ControlPlane(gpu_nodes=0) as plane:
        gfd = {
            "nvidia.com/cuda.driver.major": "535",
            "nvidia.com/cuda.driver.minor": "104",
            "nvidia.com/cuda.driver.rev": "05",
        }
        for name, labels in (
            ("gpu-a", {"nvidia.com/cuda.driver-version.full": "550.54.15"}),
            ("gpu-b", gfd),
            # A two-part driver: GPU feature discovery's rev label is empty.
            ("gpu-c", dict(zip(gfd, ("570", "26", ""), strict=True))),
            ("cpu-d", {}),
        ):
            plane.seed({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}})
        kubeconfig = plane.kubeconfig(tmp_path / "kubeconfig", context="meta-eu")
        path = plan_file(
            tmp_path, {"gpu_probe": False},
            cluster={"context": "meta-eu", "namespace": "default", "kubeconfig": str(kubeconfig)},
        )  # fmt: skip
        phase = open_phase(load_plan(path), "golive")
        audit = AuditFolder(tmp_path / "runs" / "r1")
        phase.run("fingerprint", audit, Reporter())
    cuda = by_name(phase.gate(audit))["golive.cuda_fingerprint"]
    assert cuda.status == Status.WARN and cuda.measured["driver"] == "535.104.05"
    assert (
        cuda.evidence[0]
        == "driver 535.104.05: the oldest driver on the labelled nodes (gpu-a 550.54.15, gpu-b 535.104.05, "
        "gpu-c 570.26)"
    )


@pytest.mark.parametrize(
    ("workload", "needle"),
    [
        ({"virt_overhead": 14}, "virt_overhead: 14 is not a fraction from 0 to 1 (0.14 is 14%)"),
        ({"params": "405"}, "params: '405' is 405 parameters, under a million"),
        ({"params": 405}, "params: 405 is 405 parameters"),
        ({"hourly_cost_delta": float("nan")}, "hourly_cost_delta"),
        ({"nodes": 0}, "nodes"),
        ({"accelerator": "amd"}, "accelerator: target profile meta-compute has no accelerator 'amd' (nvidia, mtia)"),
        ({"accelerator": "MTIA"}, "accelerator: String should match pattern"),
    ],
)
def test_workloads_written_by_others_are_refused_with_the_field(tmp_path, workload: dict, needle: str) -> None:
    base = {"name": "w", "params": "405B", "nodes": 32, "virt_overhead": "14%", "hourly_cost_delta": 6.5}
    path = plan_file(tmp_path, {"workloads": [{**base, **workload}]})
    with pytest.raises(UsageError) as raised:
        load_plan(path)
    assert f"phases.golive.workloads.0.{needle}" in str(raised.value) and "\n" not in str(raised.value)


def test_workloads_as_percentages_and_suffixes_advise_like_fractions(tmp_path) -> None:
    workloads = [
        {"name": "pct", "params": "70B", "nodes": 1, "virt_overhead": "14%", "hourly_cost_delta": 1},
        {"name": "frac", "params": 7e10, "nodes": 1, "virt_overhead": 0.14, "hourly_cost_delta": 1},
        {"name": "edge", "params": "0.175T", "nodes": 8, "virt_overhead": "12%", "hourly_cost_delta": 1},
    ]
    phase = open_phase(load_plan(plan_file(tmp_path, {"workloads": workloads, "gpu_probe": False})), "golive")
    advice = by_name(phase.gate(AuditFolder(tmp_path / "r")))["golive.placement"].measured
    assert advice == {"pct": "bare-metal", "frac": "bare-metal", "edge": "managed-kubernetes"}


@pytest.mark.parametrize(
    ("server", "needle"),
    [
        ("10.0.4.12", "is not host:port"),
        ("10.0.4.12:99999", "is not a port (1 to 65535)"),
        ("fe80::1:7447", "an IPv6 address needs brackets"),
        ("http://10.0.4.12:7447", "is a URL"),
    ],
)
def test_latency_servers_written_by_others_are_refused_with_the_field(tmp_path, server: str, needle: str) -> None:
    with pytest.raises(UsageError, match=f"phases.golive.latency.server: .*{re.escape(needle)}"):
        load_plan(plan_file(tmp_path, {"latency": {"server": server}}))


def test_latency_to_an_ipv6_server(tmp_path) -> None:
    bound: list[int] = []
    thread = threading.Thread(
        target=probe.serve, args=("::1", 0, "tcp"), kwargs={"sessions": 1, "ready": bound.append}, daemon=True
    )
    thread.start()
    while not bound and thread.is_alive():
        thread.join(0.05)
    path = plan_file(tmp_path, {"latency": {"server": f"[::1]:{bound[0]}", "samples": 100, "warmup": 5}})
    phase = open_phase(load_plan(path), "golive")
    audit = AuditFolder(tmp_path / "runs" / "r1")
    phase.run("latency", audit, Reporter())
    thread.join(5)
    p99 = by_name(phase.gate(audit))["golive.interconnect_p99"]
    assert p99.status in (Status.PASS, Status.FAIL) and p99.measured["samples"] == 100
    assert f"to [::1]:{bound[0]}" in p99.evidence[0]


def test_portability_audits_what_the_plan_moves_for_each_workload(tmp_path) -> None:
    """The images' Dockerfiles and build contexts, the manifests' sources and the workloads' own paths; each
    workload judged on its accelerator, the MTIA one over the default bar of no blocker."""
    training_repo(tmp_path)
    path = plan_file(
        tmp_path,
        {
            "gpu_probe": False,
            "workloads": [
                {"name": "llama-mtia", "params": "70B", "nodes": 4, "virt_overhead": 0.05, "hourly_cost_delta": 1,
                 "accelerator": "mtia", "paths": ["train"]},
                {"name": "llama-h100", "params": "70B", "nodes": 4, "virt_overhead": 0.05, "hourly_cost_delta": 1},
            ],
        },
    )  # fmt: skip
    plan = yaml.safe_load(path.read_text())
    plan["target"]["registry"] = "registry.meta.example/ml"
    plan["phases"]["images"] = {"dockerfiles": [{"path": "image/Dockerfile", "image": "trainer:1"}]}
    plan["phases"]["manifests"] = {"sources": ["k8s/job.yaml"]}
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    phase = open_phase(load_plan(path), "golive")
    assert phase.audited_paths() == [tmp_path / p for p in ("image/Dockerfile", "image", "k8s/job.yaml", "train")]
    assert phase.files() == {("phases", "golive", "workloads", 0, "paths", 0): tmp_path / "train"}
    assert "audit 4 path(s) for portability to meta-compute (at most 0 blocker(s) a workload)" in phase.summary()
    audit = AuditFolder(tmp_path / "runs" / "r1")
    phase.run("portability", audit, Reporter())
    check = by_name(phase.gate(audit))["golive.portability"]
    assert check.status == Status.FAIL
    assert [line for line in check.evidence if line.startswith(("llama-mtia on", "llama-h100 on"))] == [
        "llama-mtia on mtia: 6 blocker(s) (at most 0), 0 warning(s), 0 ok: FAIL",
        "llama-h100 on nvidia: 1 blocker(s) (at most 0), 1 warning(s), 7 ok: FAIL",
    ]
    recorded = json.loads((audit.root / "golive" / "portability.json").read_text())
    (ib0,) = [f for f in recorded["findings"] if f["kind"] == "ib-setting" and f["file"] == "image/Dockerfile"]
    assert ib0["workloads"] == {"llama-h100": "blocker"}


def test_portability_without_workloads_judges_the_profiles_first_accelerator(tmp_path) -> None:
    training_repo(tmp_path)
    path = plan_file(tmp_path, {"gpu_probe": False})
    plan = yaml.safe_load(path.read_text())
    plan["phases"]["manifests"] = {"sources": ["k8s/job.yaml"]}
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    phase = open_phase(load_plan(path), "golive")
    audit = AuditFolder(tmp_path / "runs" / "r1")
    phase.run("portability", audit, Reporter())
    check = by_name(phase.gate(audit))["golive.portability"]
    assert check.status == Status.WARN
    assert check.evidence[0] == "nvidia on nvidia: 0 blocker(s) (at most 0), 1 warning(s), 0 ok: WARN"

"""The interconnect probe on loopback (TCP and UDP), and its percentile maths against a known sample."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading

import pytest

from ferry.golive import probe
from tests.support import run_cli


def test_nearest_rank_on_a_known_sample() -> None:
    ordered = list(range(1, 1001))  # 1..1000
    assert probe.nearest_rank(ordered, 50) == 500
    assert probe.nearest_rank(ordered, 99) == 990
    assert probe.nearest_rank(ordered, 99.9) == 999
    assert probe.nearest_rank(ordered, 100) == 1000
    # Ten samples: p99 is rank ceil(9.9) = 10, the largest; p50 rank 5.
    ten = [10, 20, 30, 40, 50, 60, 70, 80, 90, 1000]
    assert probe.nearest_rank(ten, 99) == 1000
    assert probe.nearest_rank(ten, 50) == 50
    assert probe.nearest_rank([7], 99.9) == 7
    with pytest.raises(ValueError):
        probe.nearest_rank([], 50)


def test_summary_figures_and_histogram_from_known_nanoseconds() -> None:
    rtts = [i * 1000 for i in range(1000, 0, -1)]  # 1..1000 us, unordered
    result = probe.summarise(rtts, protocol="tcp", server="h:1", warmup=5)
    assert (result["p50_us"], result["p99_us"], result["p99_9_us"], result["max_us"]) == (500, 990, 999, 1000)
    assert result["samples"] == 1000 and result["percentiles"] == "nearest-rank"
    assert sum(count for _, _, count in result["histogram_us"]) == 1000
    assert result["histogram_us"][0][0] == 1.0 and result["histogram_us"][-1][1] == 1000.0
    assert "not RDMA" in result["what"]


def start_server(protocol: str, sessions: int = 1) -> tuple[threading.Thread, int]:
    """A probe server on a free loopback port in a thread, ending after `sessions` clients: (thread, port)."""
    bound: list[int] = []
    ready = threading.Event()

    def on_ready(port: int) -> None:
        bound.append(port)
        ready.set()

    thread = threading.Thread(
        target=probe.serve, args=("127.0.0.1", 0, protocol), kwargs={"sessions": sessions, "ready": on_ready},
        daemon=True,
    )  # fmt: skip
    thread.start()
    assert ready.wait(5)
    return thread, bound[0]


@pytest.mark.parametrize("protocol", ["tcp", "udp"])
def test_ping_pong_on_loopback(protocol: str) -> None:
    thread, port = start_server(protocol)
    result = probe.ping(f"127.0.0.1:{port}", protocol, 500, warmup=50)
    thread.join(5)
    assert not thread.is_alive(), "the server ends after its one session"
    assert result["samples"] + result["lost"] == 500 and result["samples"] >= 490
    assert result["warmup_discarded"] == 50 and len(result["rtt_ns"]) == result["samples"]
    assert 0 < result["min_us"] <= result["p50_us"] <= result["p99_us"] <= result["p99_9_us"] <= result["max_us"]
    assert result["p50_us"] == probe.nearest_rank(result["rtt_ns"], 50) / 1e3


def test_ping_to_nothing_fails_and_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="host:port"):
        probe.ping("nohostport", "tcp", 10)
    with pytest.raises(ValueError, match="samples"):
        probe.ping("127.0.0.1:1", "tcp", 0)
    with pytest.raises(OSError):
        probe.ping("127.0.0.1:1", "tcp", 10)


def test_ferry_probe_ping_prints_figures_with_counts_and_histogram() -> None:
    thread, port = start_server("tcp")
    code, out, err = run_cli("probe", "ping", "--server", f"127.0.0.1:{port}", "--samples", "300", "--warmup", "10")
    thread.join(5)
    assert code == 0, err
    lines = out.splitlines()
    assert "n=300" in lines[0] and "warm-up 10 discarded" in lines[0] and "nearest-rank" in lines[0]
    assert "p99 " in lines[1] and "p99.9 " in lines[1] and lines[1].count("(n=300)") == 4
    assert sum(int(line.split()[4]) for line in lines[2:]) == 300


def test_ferry_probe_bad_invocations_are_one_line_exit_2() -> None:
    code, _, err = run_cli("probe", "ping", "--server", "nohostport")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--server" in err
    code, _, err = run_cli("probe", "ping", "--server", "127.0.0.1:1", "--protocol", "sctp")
    assert code == 2 and "--protocol" in err


def test_the_standalone_script_runs_alone_with_the_stdlib() -> None:
    # As the Jobs run it: the file by path, with -I (isolated: no ferry on the path, no user site-packages).
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    script = [sys.executable, "-I", probe.__file__]
    server = subprocess.Popen([*script, "serve", "--host", "127.0.0.1", "--port", str(port), "--sessions", "1"])
    try:
        done = subprocess.run(
            [*script, "ping", "--server", f"127.0.0.1:{port}", "--samples", "200", "--warmup", "5", "--wait", "20",
             "--json"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        result = json.loads(done.stdout)
        assert result["samples"] == 200 and result["protocol"] == "tcp"
        assert server.wait(10) == 0, "the server exits after its one session"
    finally:
        server.kill()
        server.wait()

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


@pytest.mark.parametrize(
    ("server", "host", "port"),
    [("10.0.4.12:7447", "10.0.4.12", 7447), ("[::1]:7447", "::1", 7447), ("[fd00::12]:1", "fd00::12", 1),
     ("llama-probe.ml.svc:65535", "llama-probe.ml.svc", 65535), (" 10.0.4.12:7447 ", "10.0.4.12", 7447)],
)  # fmt: skip
def test_parse_server(server: str, host: str, port: int) -> None:
    assert probe.parse_server(server) == (host, port)


# Addresses as people get them wrong: each a usage error naming what is wrong (exit 2), never a traceback.
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--server", "nohostport"], "is not host:port"),
        (["--server", "10.0.4.12"], "is not host:port"),
        (["--server", ":7447"], "is not host:port"),
        (["--server", "127.0.0.1:99999"], "port '99999' is not a port (1 to 65535)"),
        (["--server", "127.0.0.1:0"], "port '0' is not a port"),
        (["--server", "127.0.0.1:http"], "port 'http' is not a port"),
        (["--server", "::1:7447"], "an IPv6 address needs brackets"),
        (["--server", "[::1]"], "is not [ipv6]:port"),
        (["--server", "http://10.0.4.12:7447"], "is a URL"),
        (["--server", "nosuchhost.invalid:7447"], "cannot resolve nosuchhost.invalid:7447"),
        (["--server", "127.0.0.1:1", "--protocol", "sctp"], "--protocol"),
        (["--server", "127.0.0.1:1", "--samples", "0"], "--samples"),
        ([], "--server"),
    ],
)
def test_ferry_probe_ping_bad_addresses_are_one_line_exit_2(args: list[str], needle: str) -> None:
    code, _, err = run_cli("probe", "ping", *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("protocol", ["tcp", "udp"])
def test_ferry_probe_ping_to_a_server_that_is_not_there_fails_in_one_line(protocol: str, monkeypatch) -> None:
    # A failed measurement, not bad input: exit 1. UDP gives up after LOST_IN_A_ROW silent round trips instead of
    # waiting a timeout for each of the 20,100 it was asked for (3 here, to keep the test short).
    monkeypatch.setattr(probe, "LOST_IN_A_ROW", 3)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))  # bound and never answering: UDP's "not there" without ICMP's refusal
        port = silent.getsockname()[1] if protocol == "udp" else 1
        code, _, err = run_cli("probe", "ping", "--server", f"127.0.0.1:{port}", "--protocol", protocol)
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    expected = "Connection refused" if protocol == "tcp" else f"{probe.LOST_IN_A_ROW} round trips in a row"
    assert f"probe to 127.0.0.1:{port} failed: " in err and expected in err, err


def test_ferry_probe_ping_to_something_else_says_so() -> None:
    # A TCP listener that answers with other bytes (an HTTP server, say) is not mistaken for a probe server.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]

        def answer() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(64)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n" + b" " * 64)

        threading.Thread(target=answer, daemon=True).start()
        code, _, err = run_cli("probe", "ping", "--server", f"127.0.0.1:{port}", "--samples", "5", "--warmup", "0")
    assert code == 1 and "is 127.0.0.1:" in err and "a ferry probe server?" in err, err


@pytest.mark.parametrize("protocol", ["tcp", "udp"])
def test_ferry_probe_serve_on_a_port_in_use_is_one_line_exit_2(protocol: str) -> None:
    kind = socket.SOCK_STREAM if protocol == "tcp" else socket.SOCK_DGRAM
    # Held as a first `probe serve` holds it (SO_REUSEADDR set): a second UDP server used to bind beside it and
    # share its round trips.
    with socket.socket(socket.AF_INET, kind) as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", 0))
        if protocol == "tcp":
            taken.listen(1)
        port = taken.getsockname()[1]
        code, _, err = run_cli("probe", "serve", "--host", "127.0.0.1", "--port", str(port), "--protocol", protocol)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in err


def test_ferry_probe_serve_bad_host_is_one_line_exit_2() -> None:
    code, _, err = run_cli("probe", "serve", "--host", "256.1.1.1", "--port", "7447", "--sessions", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cannot listen on 256.1.1.1:7447" in err
    code, _, err = run_cli("probe", "serve", "--port", "99999")
    assert code == 2 and "--port" in err


def test_ferry_probe_serves_on_a_bracketed_ipv6_host() -> None:
    bound: list[int] = []
    thread = threading.Thread(
        target=probe.serve, args=("[::1]", 0, "tcp"), kwargs={"sessions": 1, "ready": bound.append}, daemon=True
    )
    thread.start()
    for _ in range(50):
        if bound:
            break
        thread.join(0.1)
    result = probe.ping(f"[::1]:{bound[0]}", "tcp", 50, warmup=5)
    thread.join(5)
    assert result["samples"] == 50 and result["server"] == f"[::1]:{bound[0]}"


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

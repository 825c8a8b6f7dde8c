"""The interconnect probe: TCP or UDP ping-pong between two ends, round trips timed on the client.

Standalone and stdlib only: the rendered Kubernetes Jobs run this very file from a ConfigMap on a stock Python
image (`python3 probe.py serve ...` on one node, `python3 probe.py ping ...` on another), and `ferry probe`
calls the same functions. It measures TCP/UDP round trips over the pod network, not RDMA verbs. Percentiles are
nearest-rank over the samples kept (the warm-up round trips are discarded), each figure beside its sample count.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import struct
import sys
import time
from fractions import Fraction

DEFAULT_PORT = 7447
DEFAULT_SIZE = 64
DEFAULT_WARMUP = 100
# UDP round trips lost one after another before a ping gives up on the server.
LOST_IN_A_ROW = 10
_HEADER = struct.Struct("!Q")  # a round trip's sequence number, so a late UDP reply is never mistaken
_BYE = b"ferry-probe-bye"


def nearest_rank(ordered: list[int], percent: float) -> int:
    """The nearest-rank percentile of an ascending list: the value at rank ceil(percent/100 * n), 1-based."""
    if not ordered:
        raise ValueError("no samples")
    # Exact arithmetic: 99.9 / 100 * 1000 is 999.0000000000001 in floating point, which would round up a rank.
    rank = max(1, math.ceil(Fraction(str(percent)) * len(ordered) / 100))
    return ordered[min(rank, len(ordered)) - 1]


def histogram(ordered: list[int], bins: int = 24) -> list[tuple[float, float, int]]:
    """(low_us, high_us, count) in log-spaced bins from the smallest to the largest sample (nanoseconds in)."""
    low, high = max(ordered[0], 1), max(ordered[-1], 1)
    if high <= low:
        return [(low / 1e3, high / 1e3, len(ordered))]
    edges = [low * (high / low) ** (i / bins) for i in range(bins + 1)]
    counts = [0] * bins
    for value in ordered:
        index = int(math.log(max(value, low) / low) / math.log(high / low) * bins)
        counts[min(index, bins - 1)] += 1
    return [(round(edges[i] / 1e3, 3), round(edges[i + 1] / 1e3, 3), counts[i]) for i in range(bins)]


def summarise(rtts_ns: list[int], *, protocol: str, server: str, warmup: int, lost: int = 0) -> dict:
    """The figures of one run: p50, p99, p99.9 and max in microseconds (nearest-rank), counts and a histogram."""
    ordered = sorted(rtts_ns)
    count = len(ordered)
    figures = {
        name: round(nearest_rank(ordered, pct) / 1e3, 3)
        for name, pct in (("p50_us", 50), ("p99_us", 99), ("p99_9_us", 99.9))
    }
    return {
        "protocol": protocol,
        "server": server,
        "what": f"{protocol.upper()} round trips over the pod network (not RDMA verbs)",
        "percentiles": "nearest-rank",
        "samples": count,
        "warmup_discarded": warmup,
        "lost": lost,
        **figures,
        "max_us": round(ordered[-1] / 1e3, 3),
        "min_us": round(ordered[0] / 1e3, 3),
        "histogram_us": histogram(ordered),
        "rtt_ns": ordered,
    }


def compact(result: dict) -> dict:
    """The summary without the raw samples: about 1 KB, within a pod's 4 KB termination message."""
    return {k: v for k, v in result.items() if k != "rtt_ns"}


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the other end closed the connection")
        data += chunk
    return bytes(data)


def parse_server(server: str) -> tuple[str, int]:
    """'host:port' or '[ipv6]:port' -> (host, port); ValueError saying what is wrong (no port, a port out of range,
    an IPv6 address without brackets, a URL)."""
    text = server.strip() if isinstance(server, str) else ""
    if "://" in text:
        raise ValueError(f"{server!r} is a URL: give host:port (e.g. 10.0.4.12:7447)")
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
        if not closed or not host or not port:
            raise ValueError(f"{server!r} is not [ipv6]:port (e.g. [fd00::12]:7447)")
    else:
        host, _, port = text.rpartition(":")
        if ":" in host:
            raise ValueError(f"{server!r}: an IPv6 address needs brackets, [address]:port (e.g. [::1]:7447)")
        if not host or not port:
            raise ValueError(f"{server!r} is not host:port (e.g. 10.0.4.12:7447)")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{server!r}: port {port!r} is not a port (1 to 65535)")
    return host, int(port)


def serve(host: str, port: int, protocol: str, *, size: int = DEFAULT_SIZE, sessions: int = 0, ready=None) -> None:
    """Echo round trips on host:port until `sessions` clients have finished (0: forever). ready(port) once bound."""
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    kind = socket.SOCK_STREAM if protocol == "tcp" else socket.SOCK_DGRAM
    with socket.socket(family, kind) as sock:
        if protocol == "tcp":
            # Only so that a restart can bind while old connections sit in TIME_WAIT: for UDP it would let a
            # second server bind the same port and share the round trips.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        if protocol == "tcp":
            sock.listen(8)
        if ready is not None:
            ready(sock.getsockname()[1])
        done = 0
        while sessions == 0 or done < sessions:
            if protocol == "tcp":
                conn, _ = sock.accept()
                with conn:
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    try:
                        while True:
                            conn.sendall(_recv_exactly(conn, size))
                    except (ConnectionError, OSError):
                        pass
            else:
                while True:
                    data, peer = sock.recvfrom(65535)
                    if data == _BYE:
                        break
                    sock.sendto(data, peer)
            done += 1


def _connect(host: str, port: int, wait_s: float, source: str | None) -> socket.socket:
    """A TCP connection, retried until wait_s has passed (the server's pod may start after the client's)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return socket.create_connection((host, port), timeout=5, source_address=(source, 0) if source else None)
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def _udp_answering(sock: socket.socket, wait_s: float) -> None:
    """Return once the UDP server echoes (it may start after the client); after wait_s, let the run find out."""
    deadline = time.monotonic() + wait_s
    hello = _HEADER.pack(2**64 - 1)
    sock.settimeout(0.5)
    while time.monotonic() < deadline:
        try:
            sock.send(hello)
            if sock.recv(65535) == hello:
                return
        except (TimeoutError, ConnectionRefusedError):
            continue


def ping(
    server: str,
    protocol: str,
    samples: int,
    *,
    warmup: int = DEFAULT_WARMUP,
    size: int = DEFAULT_SIZE,
    timeout_s: float = 1.0,
    wait_s: float = 0.0,
    source: str | None = None,
) -> dict:
    """samples timed round trips to server after `warmup` untimed ones; the summary of summarise().

    source: the client's own address (which interface the round trips leave from); wait_s: how long to keep
    trying to reach a server that is not answering yet.
    """
    if samples < 1 or warmup < 0 or size < _HEADER.size:
        raise ValueError(f"samples >= 1, warmup >= 0 and size >= {_HEADER.size} bytes are needed")
    host, port = parse_server(server)
    payload = b"\0" * (size - _HEADER.size)
    rtts: list[int] = []
    lost = 0
    if protocol == "tcp":
        with _connect(host, port, wait_s, source) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(timeout_s)
            for seq in range(warmup + samples):
                message = _HEADER.pack(seq) + payload
                start = time.perf_counter_ns()
                sock.sendall(message)
                if _recv_exactly(sock, size) != message:
                    raise ConnectionError(
                        f"round trip {seq}: the reply differs from what was sent: is {server} a ferry probe server?"
                    )
                if seq >= warmup:
                    rtts.append(time.perf_counter_ns() - start)
    elif protocol == "udp":
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            if source:
                sock.bind((source, 0))
            sock.connect((host, port))
            _udp_answering(sock, wait_s)
            sock.settimeout(timeout_s)
            in_a_row = 0
            for seq in range(warmup + samples):
                message = _HEADER.pack(seq) + payload
                start = time.perf_counter_ns()
                sock.send(message)
                try:
                    while sock.recv(65535) != message:  # a late reply to an earlier, timed-out round trip
                        pass
                except (TimeoutError, ConnectionRefusedError):
                    lost += seq >= warmup
                    in_a_row += 1
                    if in_a_row >= LOST_IN_A_ROW:
                        # A server that is gone: without this a run would wait timeout_s for every round trip left.
                        raise ConnectionError(
                            f"{in_a_row} round trips in a row got no reply within {timeout_s:g} s: is a "
                            f"`probe serve --protocol udp` running at {server}?"
                        ) from None
                    continue
                in_a_row = 0
                if seq >= warmup:
                    rtts.append(time.perf_counter_ns() - start)
            sock.send(_BYE)
    else:
        raise ValueError(f"protocol {protocol!r} is not tcp or udp")
    if not rtts:
        raise ConnectionError(f"no round trip to {server} came back ({lost} lost)")
    return summarise(rtts, protocol=protocol, server=server, warmup=warmup, lost=lost)


def text(result: dict) -> list[str]:
    """The summary as lines: figures with their sample count, then the histogram."""
    n = result["samples"]
    lines = [
        f"{result['what']} to {result['server']}: n={n} (warm-up {result['warmup_discarded']} discarded, "
        f"{result['lost']} lost); nearest-rank percentiles",
        f"p50 {result['p50_us']} us (n={n})  p99 {result['p99_us']} us (n={n})  "
        f"p99.9 {result['p99_9_us']} us (n={n})  max {result['max_us']} us (n={n})",
    ]
    peak = max(count for _, _, count in result["histogram_us"]) or 1
    for low, high, count in result["histogram_us"]:
        lines.append(f"{low:>10.1f} - {high:>10.1f} us {count:>7} {'#' * round(40 * count / peak)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """`probe.py serve|ping ...` as the Jobs run it; ping prints one JSON line (--json) or the text summary."""
    parser = argparse.ArgumentParser(prog="probe.py", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    served = commands.add_parser("serve")
    served.add_argument("--host", default="0.0.0.0")
    served.add_argument("--port", type=int, default=DEFAULT_PORT)
    served.add_argument("--sessions", type=int, default=0, help="clients to serve, then exit (0: forever)")
    pinged = commands.add_parser("ping")
    pinged.add_argument("--server", required=True, help="host:port")
    pinged.add_argument("--samples", type=int, default=20000)
    pinged.add_argument("--warmup", type=int, default=DEFAULT_WARMUP)
    pinged.add_argument("--wait", type=float, default=0.0, help="seconds to keep trying to reach the server")
    pinged.add_argument("--source", default=None, help="the client's own address to send from")
    pinged.add_argument("--json", action="store_true")
    pinged.add_argument(
        "--summary-file", default=None, help="also write the summary without the samples here (a Job's termination log)"
    )
    for command in (served, pinged):
        command.add_argument("--protocol", choices=("tcp", "udp"), default="tcp")
        command.add_argument("--size", type=int, default=DEFAULT_SIZE)
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args.host, args.port, args.protocol, size=args.size, sessions=args.sessions)
        return 0
    result = ping(
        args.server,
        args.protocol,
        args.samples,
        warmup=args.warmup,
        size=args.size,
        wait_s=args.wait,
        source=args.source,
    )
    print(json.dumps(result) if args.json else "\n".join(text(result)), flush=True)
    if args.summary_file:
        with open(args.summary_file, "w", encoding="utf-8") as out:
            out.write(json.dumps(compact(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

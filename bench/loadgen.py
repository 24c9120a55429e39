"""Small HTTP/1.1-over-TLS load generator (standard library only) for benchmarking the webhook.

Each worker process drives its keep-alive TLS connections from one ``selectors`` loop. The request
is serialised once; a response is read as headers up to ``\\r\\n\\r\\n`` plus exactly Content-Length
bytes of body, and any status other than 200 counts as an error.

Closed loop (``rate=None``): every connection sends its next request as soon as the previous
response arrives. Open loop (``rate=R``): connection ``j`` of ``N`` sends at ``start + j/R + k*N/R``;
latency counts from that scheduled time (or the actual send, if it went out up to 1 ms early), so
a server that falls behind is charged for the wait (no coordinated omission).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import selectors
import socket
import ssl
import sys
from dataclasses import dataclass
from time import perf_counter

_SLACK_S = 0.001  # epoll sleeps in whole ms: wake (and send) up to 1 ms early rather than late
_CHECK_S = 0.1  # how often in-flight requests are checked against the timeout
_BACKOFF_S = 0.05  # closed loop: pause before retrying a connection that failed to reopen


@dataclass
class Result:
    """Counts and latencies (ms, successful responses only) over the measured window."""

    sent: int
    ok: int
    errors: int
    duration_s: float
    latencies_ms: list[float]

    @property
    def rate(self) -> float:
        """Successful responses per second."""
        return self.ok / self.duration_s if self.duration_s > 0 else 0.0

    def percentile(self, p: float) -> float:
        """Nearest-rank percentile (``p`` in 0..100) of the latencies in ms; 0.0 when there are none."""
        return _nearest_rank(sorted(self.latencies_ms), p)

    def summary(self) -> dict:
        """JSON-ready summary: counts, rate and p50/p90/p99/max latency in ms."""
        lat = sorted(self.latencies_ms)
        return {
            "requests": self.sent,
            "ok": self.ok,
            "errors": self.errors,
            "rate_per_s": round(self.rate, 1),
            **{f"p{p}_ms": round(_nearest_rank(lat, p), 3) for p in (50, 90, 99)},
            "max_ms": round(lat[-1], 3) if lat else 0.0,
        }


def _nearest_rank(lat: list[float], p: float) -> float:
    if not lat:
        return 0.0
    return lat[min(len(lat), max(1, math.ceil(p / 100 * len(lat)))) - 1]


def _context(cafile: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cafile is None:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _send(sock: ssl.SSLSocket, data: bytes, timeout_s: float) -> None:
    """Write the whole request; fall back to a blocking write if the socket buffer is full."""
    try:
        n = sock.send(data)
    except ssl.SSLWantWriteError:
        n = 0  # OpenSSL wants the same buffer again
    if n < len(data):
        sock.settimeout(timeout_s)
        sock.sendall(memoryview(data)[n:])
        sock.setblocking(False)


class _Conn:
    __slots__ = ("sock", "busy", "buf", "need", "status_ok", "close", "t0", "t_sent", "next_t")

    def __init__(self, sock: ssl.SSLSocket | None) -> None:
        self.sock = sock
        self.busy = False
        self.buf = b""
        self.need = -1  # total response length once the headers are parsed
        self.status_ok = self.close = False
        self.t0 = self.t_sent = self.next_t = 0.0

    def read(self) -> bool:
        """Consume what is readable; True once the whole response is in. Raises on a broken stream."""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return False
            if not chunk:
                raise ConnectionError("connection closed by server")
            buf = self.buf = self.buf + chunk
            if self.need < 0:
                h = buf.find(b"\r\n\r\n")
                if h < 0:
                    continue
                head = buf[: h + 2].lower()
                i = head.find(b"\ncontent-length:")
                if i < 0:
                    raise ValueError("response without Content-Length")
                self.need = h + 4 + int(head[i + 16 : head.index(b"\r", i)])
                self.status_ok = buf[9:12] == b"200"
                self.close = b"\nconnection: close" in head
            if len(buf) >= self.need:
                self.buf, self.need = b"", -1
                return True


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (i < total % parts) for i in range(parts)]


def _worker(
    host: str,
    port: int,
    request: bytes,
    cafile: str | None,
    server_hostname: str,
    duration_s: float,
    n_conns: int,
    rate: float | None,
    first_index: int,
    total_conns: int,
    max_requests: int | None,
    timeout_s: float,
    barrier=None,
) -> Result:
    """One process's share: open ``n_conns`` connections, wait at ``barrier``, run the window."""
    ctx = _context(cafile)
    sel = selectors.DefaultSelector()
    conns: list[_Conn] = []

    def open_sock() -> ssl.SSLSocket:
        raw = socket.create_connection((host, port), timeout=timeout_s)
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock = ctx.wrap_socket(raw, server_hostname=server_hostname)  # handshake, bounded by timeout
        except BaseException:
            raw.close()
            raise
        sock.setblocking(False)
        return sock

    def reopen(c: _Conn) -> None:
        """Replace the connection (blocking connect + handshake); leaves ``sock`` None on failure."""
        if c.sock is not None:
            sel.unregister(c.sock)
            c.sock.close()
            c.sock = None
        c.buf, c.need, c.busy = b"", -1, False
        try:
            c.sock = open_sock()
        except OSError:
            return
        sel.register(c.sock, selectors.EVENT_READ, c)

    try:
        try:
            for _ in range(n_conns):
                conns.append(_Conn(open_sock()))
                sel.register(conns[-1].sock, selectors.EVENT_READ, conns[-1])
        except BaseException:
            if barrier is not None:
                barrier.abort()
            raise
        if barrier is not None:
            barrier.wait(timeout=timeout_s * (total_conns + 1) + 10)

        interval = total_conns / rate if rate else 0.0
        budget = math.inf if max_requests is None else max_requests
        sent = ok = errors = busy = 0
        lat: list[float] = []
        start = perf_counter()
        deadline, next_check, last_t, stop_t = start + duration_s, start + _CHECK_S, start, None
        for j, c in enumerate(conns):
            c.next_t = start + (first_index + j) / rate if rate else start
        idle = list(conns)  # connections with no request in flight
        select = sel.select

        while True:
            now = perf_counter()
            if stop_t is None and (now >= deadline or sent >= budget):
                stop_t = now
            if stop_t is not None:
                if not busy or now >= stop_t + timeout_s:
                    errors += busy  # still unanswered after the grace period
                    break
            elif idle:
                horizon, waiting = now + _SLACK_S, []
                for c in idle:
                    if c.next_t > horizon or sent >= budget:
                        waiting.append(c)
                        continue
                    sent += 1
                    if c.sock is None:
                        reopen(c)
                    t = perf_counter()
                    t0 = min(c.next_t, t) if rate else t
                    c.next_t = c.next_t + interval if rate else t
                    try:
                        if c.sock is None:
                            raise ConnectionError("reconnect failed")
                        _send(c.sock, request, timeout_s)
                    except OSError:
                        errors += 1
                        if c.sock is not None:
                            reopen(c)
                        if c.sock is None and rate is None:
                            c.next_t = t + _BACKOFF_S
                        waiting.append(c)
                        continue
                    c.t0, c.t_sent, c.busy = t0, t, True
                    busy += 1
                idle = waiting

            wake = deadline if stop_t is None else stop_t + timeout_s
            wake = min(wake, next_check)
            if stop_t is None:
                for c in idle:
                    wake = min(wake, c.next_t - _SLACK_S)
            for key, _ in select(max(0.0, wake - perf_counter())):
                c = key.data
                was_busy = c.busy
                try:
                    if not c.read():
                        continue
                    if not was_busy:
                        raise ConnectionError("unsolicited response")
                except (OSError, ValueError):
                    reopen(c)  # an idle keep-alive connection closed by the server is not an error
                    if was_busy:
                        errors += 1
                        busy -= 1
                        idle.append(c)
                    continue
                last_t = perf_counter()
                c.busy = False
                busy -= 1
                if c.status_ok:
                    ok += 1
                    lat.append((last_t - c.t0) * 1e3)
                else:
                    errors += 1
                if c.close:
                    reopen(c)
                idle.append(c)

            now = perf_counter()
            if now >= next_check:
                next_check = now + _CHECK_S
                for c in conns:
                    if c.busy and now - c.t_sent > timeout_s:
                        errors += 1
                        busy -= 1
                        reopen(c)
                        idle.append(c)

        return Result(sent, ok, errors, max(stop_t, last_t) - start, lat)
    finally:
        for c in conns:
            if c.sock is not None:
                c.sock.close()
        sel.close()


def _child(queue, index: int, args: tuple, barrier) -> None:
    try:
        queue.put((index, _worker(*args, barrier=barrier)))
    except BaseException as exc:  # report to the parent instead of dying silently
        barrier.abort()
        queue.put((index, f"{type(exc).__name__}: {exc}"))


def run(
    host: str,
    port: int,
    path: str,
    body: bytes,
    *,
    cafile: str | None,
    server_hostname: str,
    duration_s: float,
    connections: int,
    rate: float | None = None,
    processes: int = 1,
    max_requests: int | None = None,
    timeout_s: float = 5.0,
) -> Result:
    """Load ``https://host:port/path`` with POSTs of ``body``; see the module docstring for the modes.

    Connections are opened before the window starts (a failure there raises). The window lasts
    ``duration_s`` or until ``max_requests`` have been sent; requests still in flight then get up to
    ``timeout_s`` to finish. ``processes > 1`` splits the connections over forked workers.
    """
    if connections < 1 or duration_s <= 0 or processes < 1 or timeout_s <= 0 or (rate is not None and rate <= 0):
        raise ValueError("connections, processes, duration_s, timeout_s and rate must be positive")
    host_header = server_hostname if port == 443 else f"{server_hostname}:{port}"
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {host_header}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
    ).encode("latin-1") + body
    processes = min(processes, connections)
    shares = _split(connections, processes)
    budgets = [None] * processes if max_requests is None else _split(max_requests, processes)
    jobs = [
        (host, port, request, cafile, server_hostname, duration_s, n, rate, sum(shares[:i]), connections,
         budgets[i], timeout_s)
        for i, n in enumerate(shares)
    ]
    if processes == 1:
        return _worker(*jobs[0])

    ctx = mp.get_context("fork")
    queue, barrier = ctx.Queue(), ctx.Barrier(processes)
    procs = [ctx.Process(target=_child, args=(queue, i, job, barrier), daemon=True) for i, job in enumerate(jobs)]
    for p in procs:
        p.start()
    try:
        limit = duration_s + timeout_s * (connections + 3) + 30
        results = dict(queue.get(timeout=limit) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join()
    failed = sorted((r for r in results.values() if isinstance(r, str)), key=lambda m: "BrokenBarrier" in m)
    if failed:  # the root cause first, not the other workers' broken barrier
        raise RuntimeError(f"load generator worker failed: {failed[0]}")
    parts = [results[i] for i in range(processes)]
    return Result(
        sent=sum(r.sent for r in parts),
        ok=sum(r.ok for r in parts),
        errors=sum(r.errors for r in parts),
        duration_s=max(r.duration_s for r in parts),
        latencies_ms=[x for r in parts for x in r.latencies_ms],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/")
    parser.add_argument("--body-file", help="request body (JSON); empty body if omitted")
    parser.add_argument("--cafile", help="CA bundle to verify the server; no verification if omitted")
    parser.add_argument("--hostname", default="localhost", help="SNI / verified server name")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--rate", type=float, help="fixed total requests/s (open loop); closed loop if omitted")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--max-requests", type=int)
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args(argv)
    body = b""
    if args.body_file:
        with open(args.body_file, "rb") as f:
            body = f.read()
    result = run(
        args.host, args.port, args.path, body, cafile=args.cafile, server_hostname=args.hostname,
        duration_s=args.duration, connections=args.connections, rate=args.rate,
        processes=args.processes, max_requests=args.max_requests, timeout_s=args.timeout,
    )
    print(json.dumps(result.summary()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

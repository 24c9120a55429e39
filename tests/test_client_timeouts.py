"""Stalled and slow clients cannot starve the webhook (webhook/worker.py): TLS handshakes and request reads
wait in the worker's poller, not in its 8 threads, and end at ``server.handshakeTimeoutSeconds`` /
``server.readTimeoutSeconds``. Meanwhile admissions are answered promptly, on the real webhook over HTTPS."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import re
import socket
import ssl
import threading
import time
from pathlib import Path

import pytest

from tests.support.contract import GATE, OPT_IN
from tests.support.operator_scenarios import SCENARIOS
from tests.support.webhook import pod_request
from webhook.worker import READ_AHEAD_BYTES, request_complete

pytestmark = pytest.mark.e2e

CLIENTS = 48  # more than the shipped 2 workers x 8 threads can hold
TIMEOUT = 3.0  # the client timeouts of the webhook under test (shipped: 5 s)
PROMPT = 2.0  # an admission on a fresh connection, on a busy 2-core machine (normally a few ms)
# A TLS record header announcing a 512-byte ClientHello, and only its first bytes.
PARTIAL_CLIENT_HELLO = bytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03]) + b"\x00" * 20


@pytest.fixture(scope="module")
def hook(start_webhook, tls):
    return start_webhook(server={"certDir": str(Path(tls.cert).parent), "handshakeTimeoutSeconds": TIMEOUT,
                                 "readTimeoutSeconds": TIMEOUT})


def review(pod: dict, namespace: str) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": pod_request(pod, namespace)}).encode()


def admit_on_a_new_connection(hook, pod: dict, namespace: str) -> tuple[float, dict]:
    """A new connection (a new TLS handshake) and one admission on it: (seconds it took, the response)."""
    started = time.monotonic()
    conn = http.client.HTTPSConnection("127.0.0.1", hook.port, context=hook.context, timeout=10)
    try:
        conn.request("POST", "/mutate", body=review(pod, namespace), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200
        return time.monotonic() - started, json.loads(response.read())["response"]
    finally:
        conn.close()


def gang_pod(apiserver, namespace: str) -> dict:
    scenario = SCENARIOS["job"](namespace, {OPT_IN: "true"})
    apiserver.put(*scenario.owners)
    return scenario.pod


def assert_admissions_are_prompt(hook, apiserver, namespace: str) -> None:
    pod = gang_pod(apiserver, namespace)
    for _ in range(10):
        took, response = admit_on_a_new_connection(hook, pod, namespace)
        assert took < PROMPT, f"admission took {took:.2f}s"
        assert response["allowed"] and GATE in base64.b64decode(response["patch"]).decode()  # gated, not escaped


def wait_closed(sockets: list, deadline: float) -> None:
    """Each socket sees the webhook close it (EOF or reset) before ``deadline`` (monotonic)."""
    for sock in sockets:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            while sock.recv(4096):
                pass
        except (ConnectionResetError, ssl.SSLError):
            pass
        except TimeoutError:
            raise AssertionError("a stalled connection is still open after the deadline") from None


def timeouts(hook, stage: str) -> float:
    status, body = hook.request("GET", "/metrics")
    assert status == 200
    found = re.search(rb'^kubenexus_webhook_client_timeouts_total\{stage="' + stage.encode() + rb'"\} ([0-9.e+]+)$',
                      body, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_stalled_tls_handshakes_do_not_starve_admission(hook, apiserver, namespace):
    before = timeouts(hook, "handshake")
    stalled = [socket.create_connection(("127.0.0.1", hook.port), timeout=10) for _ in range(CLIENTS)]
    opened = time.monotonic()
    try:
        for sock in stalled:
            sock.sendall(PARTIAL_CLIENT_HELLO)
        assert_admissions_are_prompt(hook, apiserver, namespace)
        wait_closed(stalled, opened + TIMEOUT + 2.5)  # the poller looks once a second
    finally:
        for sock in stalled:
            sock.close()
    assert timeouts(hook, "handshake") - before >= CLIENTS


class Trickler:
    """Slowloris: TLS connections that send a request head one byte at a time, 4 bytes a second."""

    def __init__(self, hook, count: int, first: bytes = b"") -> None:
        self.sockets = []
        for _ in range(count):
            sock = hook.context.wrap_socket(socket.create_connection(("127.0.0.1", hook.port), timeout=10),
                                            server_hostname="127.0.0.1")
            sock.sendall(first + b"POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n")
            self.sockets.append(sock)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        live = list(self.sockets)
        while live and not self._stop.wait(0.25):
            for sock in list(live):
                try:
                    sock.send(b"X")
                except OSError:
                    live.remove(sock)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for sock in self.sockets:
            sock.close()


def test_slowloris_clients_do_not_starve_admission(hook, apiserver, namespace):
    before = timeouts(hook, "read")
    plain = review({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}, namespace)
    first = (b"POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
             b"Content-Length: %d\r\n\r\n%s" % (len(plain), plain))
    # Half send their whole head slowly; half answer one request first and trickle the next (kept alive).
    slow = [Trickler(hook, CLIENTS // 2), Trickler(hook, CLIENTS // 2, first=first)]
    opened = time.monotonic()
    try:
        assert_admissions_are_prompt(hook, apiserver, namespace)
        for trickler in slow:
            wait_closed(trickler.sockets, opened + TIMEOUT + 2.5)
    finally:
        for trickler in slow:
            trickler.close()
    assert timeouts(hook, "read") - before >= CLIENTS


def test_a_connection_that_sends_nothing_after_the_handshake_is_closed(hook):
    sock = hook.context.wrap_socket(socket.create_connection(("127.0.0.1", hook.port), timeout=10),
                                    server_hostname="127.0.0.1")
    try:
        wait_closed([sock], time.monotonic() + TIMEOUT + 2.5)
    finally:
        sock.close()


def raw_exchange(hook, data: bytes, responses: int) -> bytes:
    """Send ``data`` on one TLS connection and read until ``responses`` admission responses (or the close) came."""
    sock = hook.context.wrap_socket(socket.create_connection(("127.0.0.1", hook.port), timeout=10),
                                    server_hostname="127.0.0.1")
    try:
        sock.sendall(data)
        received = b""
        while received.count(b'"allowed":') < responses:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
        return received
    finally:
        sock.close()


def test_pipelined_chunked_and_expect_continue_requests_are_still_answered(hook, namespace):
    body = review({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}, namespace)
    plain = b"POST /mutate HTTP/1.1\r\nHost: w\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    chunked = (b"POST /mutate HTTP/1.1\r\nHost: w\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
               % (len(body), body))
    assert raw_exchange(hook, plain * 3, 3).count(b'"allowed":true') == 3  # pipelined on one connection
    assert b'"allowed":true' in raw_exchange(hook, chunked, 1)
    expect = b"POST /mutate HTTP/1.1\r\nHost: w\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)
    sock = hook.context.wrap_socket(socket.create_connection(("127.0.0.1", hook.port), timeout=10),
                                    server_hostname="127.0.0.1")
    try:
        sock.sendall(expect)
        assert sock.recv(4096).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(body)
        answer = b""
        while b'"allowed":true' not in answer:
            answer += sock.recv(65536)
    finally:
        sock.close()


def test_a_large_body_is_read_by_its_thread(hook, namespace):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {"big": "x" * READ_AHEAD_BYTES}}}
    body = review(pod, namespace)
    assert len(body) > READ_AHEAD_BYTES
    answer = raw_exchange(hook, b"POST /mutate HTTP/1.1\r\nHost: w\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body),
                          1)
    assert b'"allowed":true' in answer


@pytest.mark.parametrize("data, complete", [
    (b"GET /readyz HTTP/1.1\r\nHost: w\r\n", False),
    (b"GET /readyz HTTP/1.1\r\nHost: w\r\n\r\n", True),
    (b"POST /mutate HTTP/1.1\r\nContent-Length: 5\r\n\r\nabcd", False),
    (b"POST /mutate HTTP/1.1\r\ncontent-length:5\r\n\r\nabcde", True),
    (b"POST /mutate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", True),  # its thread reads the body
    (b"POST /mutate HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", True),
    (b"POST /mutate HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n" + b"x" * READ_AHEAD_BYTES, True),
    (b"GET /" + b"x" * 70000, True),  # a head that never ends: gunicorn's parser refuses it
])
def test_request_complete(data, complete):
    assert request_complete(data) is complete


def counted(hook, metric: str) -> float:
    status, body = hook.request("GET", "/metrics")
    assert status == 200
    return sum(float(v) for v in re.findall(rb"^" + metric.encode() + rb"\{[^}]*\} ([0-9.e+]+)$", body, re.MULTILINE))


def test_clients_that_do_not_read_their_answers_do_not_hold_the_poller(hook, apiserver, namespace):
    # Admissions are answered on the poller (the owners cached); what a client does not take, a pool thread writes.
    pod = gang_pod(apiserver, namespace)
    for _ in range(4):  # both workers' caches
        admit_on_a_new_connection(hook, pod, namespace)
    # Refused with a 200 KB answer (it quotes the apiVersion): the buffers of a client that does not read fill soon.
    body = json.dumps({"apiVersion": "x" * 200_000, "kind": "AdmissionReview"}).encode()
    batch = b"POST /mutate HTTP/1.1\r\nHost: w\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body) * 4
    stalled, stop = [], threading.Event()

    def pipeline(sock: ssl.SSLSocket) -> None:  # until the webhook stops reading: its answers backed up
        with contextlib.suppress(OSError):
            while not stop.is_set():
                sock.sendall(batch)

    for _ in range(8):
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the answers back up soon
        raw.connect(("127.0.0.1", hook.port))
        stalled.append(hook.context.wrap_socket(raw, server_hostname="127.0.0.1"))
        threading.Thread(target=pipeline, args=(stalled[-1],), daemon=True).start()
    try:
        time.sleep(1.0)
        assert_admissions_are_prompt(hook, apiserver, namespace)
    finally:
        stop.set()
        for sock in stalled:
            sock.close()


def test_an_admission_that_needs_a_read_is_answered_and_counted_once(hook, apiserver, namespace):
    # First tried on the poller with the cache alone, then answered by a pool thread that reads the owners.
    before = counted(hook, "kubenexus_webhook_requests_total"), counted(hook, "kubenexus_webhook_pod_decisions_total")
    _, response = admit_on_a_new_connection(hook, gang_pod(apiserver, namespace), namespace)
    assert response["allowed"] and GATE in base64.b64decode(response["patch"]).decode()
    after = counted(hook, "kubenexus_webhook_requests_total"), counted(hook, "kubenexus_webhook_pod_decisions_total")
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)
    time.sleep(0.3)  # the log writer writes every 50 ms
    lines = [json.loads(line) for line in hook.log_path.read_text().splitlines() if response["uid"] in line]
    assert [line["msg"] for line in lines] == ["pod admitted"]


def _serving_pids(hook, client_ports: list[int]) -> list[int]:
    """The webhook worker (pid) holding the server end of each client connection, from /proc."""
    inodes = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = (int(address.split(":")[1], 16) for address in fields[1:3])
        if local == hook.port:
            inodes[remote] = fields[9]
    holders = {}
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        with contextlib.suppress(OSError):
            if int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) != hook.process.pid:
                continue
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    holders[os.readlink(f"/proc/{pid}/fd/{fd}")] = pid
    return [holders[f"socket:[{inodes[port]}]"] for port in client_ports]


def _open(hook, count: int) -> tuple[list[ssl.SSLSocket], list[int]]:
    """``count`` connections opened at once (then TLS and a request on each), and their client ports."""
    plain = [socket.create_connection(("127.0.0.1", hook.port), timeout=10) for _ in range(count)]
    ports = [sock.getsockname()[1] for sock in plain]
    socks = [hook.context.wrap_socket(sock, server_hostname="127.0.0.1") for sock in plain]
    for sock in socks:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: w\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    return socks, ports


def test_connections_opened_at_once_are_spread_over_the_workers(hook):
    # As a client opening its pool does: each worker answers its own connections' requests on its poller.
    seen: set[int] = set()
    deadline = time.monotonic() + 30
    while len(seen) < 2 and time.monotonic() < deadline:  # both workers up (loaded their app)
        socks, ports = _open(hook, 1)
        seen.update(_serving_pids(hook, ports))
        socks[0].close()
        time.sleep(0.05)
    socks, ports = _open(hook, 4)
    try:
        assert len(set(_serving_pids(hook, ports))) == 2
    finally:
        for sock in socks:
            sock.close()

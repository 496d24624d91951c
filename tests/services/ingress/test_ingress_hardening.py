"""The HTTP ingress against a hostile client, over raw sockets: a malformed header carrying a
token is a JSON 400 and the token is in neither the reply nor the log; a declared length past
the limit is refused before the body; a body that is not JSON by its type is a 415; a client
that trickles its headers or its body is cut off. A real ingress process, a real Redis."""

import asyncio
import json
import socket
import time

from spex.services.ingress.http_body import BODY_TIMEOUT_S
from spex.services.ingress.service import IDLE_TIMEOUT_S
from spex.shared.runtime.redis_server import free_port
from tests.services.cluster import Cluster
from tests.services.helpers import wait_http

TOKEN = "a7c5e1f0b2d94c38a7c5e1f0b2d94c38"


def exchange(port, data, wait_s=5.0):
    """Send `data` raw, then read until the server closes or `wait_s` passes: (reply, seconds
    until its first byte, or until the close if none came)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as s:
        s.sendall(data)
        started, reply, first = time.monotonic(), b"", None
        try:
            while chunk := s.recv(65536):
                first = first or time.monotonic()
                reply += chunk
        except TimeoutError:
            pass
        return reply, (first or time.monotonic()) - started


def status_and_body(reply):
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_a_hostile_client_gets_json_refusals_and_its_bytes_are_never_echoed_or_logged(redis_url):
    port = free_port()

    async def go():
        cluster = Cluster(redis_url, "processes", http_port=port, auth_tokens=f"alice={TOKEN}")
        await cluster.start("ingress", "ingress-0")
        await asyncio.to_thread(wait_http, f"http://127.0.0.1:{port}/v1/questions/x")
        post = "POST /v1/questions HTTP/1.1\r\nHost: x\r\n"
        auth = f"Authorization: Bearer {TOKEN}\r\n"
        try:
            bad_header = await asyncio.to_thread(exchange, port, f"{post}{auth[:-2]}\x00\r\n\r\n".encode(), 2)
            huge = f"{post}{auth}Content-Type: application/json\r\nContent-Length: 99999999999\r\n\r\n"
            too_large = await asyncio.to_thread(exchange, port, huge.encode(), 2)
            plain = f'{post}{auth}Content-Type: text/plain\r\nContent-Length: 17\r\n\r\n{{"question": "x"}}'
            not_json = await asyncio.to_thread(exchange, port, plain.encode(), 2)
            wait = max(IDLE_TIMEOUT_S, BODY_TIMEOUT_S) + 5
            slow_body = f"{post}{auth}Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
            trickled_head, trickled_body = await asyncio.gather(
                asyncio.to_thread(exchange, port, post.encode(), wait),  # headers never finished
                asyncio.to_thread(exchange, port, slow_body.encode(), wait),  # 1 byte of 100
            )
            return bad_header, too_large, not_json, trickled_head, trickled_body, cluster.logs()
        finally:
            await cluster.stop()

    bad_header, too_large, not_json, trickled_head, trickled_body, logs = asyncio.run(go())
    assert status_and_body(bad_header[0]) == (400, {"error": "http: malformed request"})
    assert TOKEN not in bad_header[0].decode(errors="replace") and TOKEN[:8] not in logs
    assert "Traceback" not in logs
    assert status_and_body(too_large[0])[0] == 413 and too_large[1] < 2  # refused before any body
    assert status_and_body(not_json[0]) == (415, {"error": "body: send it as application/json"})
    assert trickled_head[0] == b"" and trickled_head[1] < IDLE_TIMEOUT_S + 3  # closed, unanswered
    assert status_and_body(trickled_body[0])[0] == 408 and trickled_body[1] < BODY_TIMEOUT_S + 3

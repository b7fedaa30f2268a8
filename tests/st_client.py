"""What the hosting tests do to a real `streamlit run app.py` beyond the load benchmark's protocol client
(benchmarks/bench_load.py, Session): Streamlit's clear-cache message, a deferred download (the PDF report) the way
the browser asks for it, the file's bytes over HTTP, and uploads to Streamlit's upload endpoint. Loopback only."""
from __future__ import annotations

import asyncio
import http.client
import os
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_load  # noqa: E402
from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402


class Session(bench_load.Session):
    async def clear_cache(self) -> None:
        """Streamlit's clear-cache message (its "Clear cache" menu item sends it; so can any client)."""
        msg = BackMsg()
        msg.clear_cache = True
        await self.ws.send(msg.SerializeToString())

    async def download_url(self, label: str) -> str:
        """Ask for a deferred download (a download_button given a callable) as the browser does on a click, a
        backend_operation_request; the file's URL path on the server."""
        msg = BackMsg()
        request = msg.backend_operation_request
        request.request_id, request.session_id = os.urandom(8).hex(), self.session_id
        request.deferred_file.file_id = self.downloads[label]
        await self.ws.send(msg.SerializeToString())
        while True:
            fmsg = ForwardMsg()
            fmsg.ParseFromString(await asyncio.wait_for(self.ws.recv(), self.timeout))
            response = fmsg.backend_operation_response
            if fmsg.WhichOneof("type") == "backend_operation_response" and response.request_id == request.request_id:
                if response.error_msg:
                    raise RuntimeError(f"download {label!r}: {response.error_msg}")
                return response.deferred_file.url


def run_async(coro):
    """asyncio.run in a thread of its own (Playwright's sync API may hold an event loop in the main thread)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def http_get(port: int, path: str, cookie: str = "") -> tuple[int, bytes, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", path, headers={"Cookie": cookie} if cookie else {})
        r = conn.getresponse()
        return r.status, r.read(), {k.lower(): v for k, v in r.getheaders()}
    finally:
        conn.close()


async def aget(port: int, path: str) -> tuple[int, bytes]:
    """GET on the event loop itself (no thread pool to queue behind): (status, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 60)
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def xsrf_cookie(port: int) -> str:
    """The _streamlit_xsrf cookie a browser gets (the health route sets it), for the upload endpoint's check."""
    _, _, headers = http_get(port, "/_stcore/health")
    value = headers.get("set-cookie", "")
    assert value.startswith("_streamlit_xsrf="), headers
    return value.split(";")[0].split("=", 1)[1]


def upload(port: int, session_id: str, cookie: str, size: int, filename: str = "config.json",
           chunked: bool = False) -> int | str:
    """PUT one multipart file of `size` bytes (sent in 1 MB blocks; `chunked`: with no Content-Length) to the
    session's upload endpoint, as st.file_uploader's frontend does. The HTTP status, or the error that ended it."""
    boundary = "----" + uuid.uuid4().hex
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    block = b"x" * (1 << 20)

    def body():
        yield head
        for left in range(size, 0, -len(block)):
            yield block[:left]
        yield tail
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}", "X-Xsrftoken": cookie,
               "Cookie": f"_streamlit_xsrf={cookie}"}
    if not chunked:
        headers["Content-Length"] = str(len(head) + size + len(tail))
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("PUT", f"/_stcore/upload_file/{session_id}/{uuid.uuid4().hex}", body=body(), headers=headers,
                     encode_chunked=chunked)
        r = conn.getresponse()
        r.read()
        return r.status
    except (BrokenPipeError, ConnectionResetError) as exc:  # the server answered and closed before the body ended
        return type(exc).__name__
    finally:
        conn.close()


def metrics(port: int) -> str:
    """Streamlit's own /_stcore/metrics (OpenMetrics text: what its caches and uploaded-file manager hold)."""
    status, body, _ = http_get(port, "/_stcore/metrics")
    assert status == 200
    return body.decode()

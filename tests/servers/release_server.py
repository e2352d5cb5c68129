"""A web server on 127.0.0.1 in a thread, serving files under upstream's layout for download tests."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


@dataclass(frozen=True)
class Served:
    body: bytes
    sent: int | None = None  # bytes really sent, when fewer than the Content-Length announced


class ReleaseServer:
    """`with ReleaseServer() as server:` serves server.files (path -> Served); 404 for anything else."""

    def __init__(self) -> None:
        self.files: dict[str, Served] = {}
        self.requests: list[str] = []
        self._http: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        assert self._http is not None
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    @property
    def template(self) -> str:
        """A $LEAKCHECK_PGBOUNCER_URL for this server, in upstream's layout."""
        return f"{self.base}/downloads/files/{{version}}/pgbouncer-{{version}}.tar.gz"

    def put_release(self, version: str, tarball: bytes | None, checksum: bytes | str | None, sent: int | None = None
                    ) -> None:
        """files/<version>/pgbouncer-<version>.tar.gz and its .sha256 (a str: a digest, written as upstream does)."""
        path = f"/downloads/files/{version}/pgbouncer-{version}.tar.gz"
        for suffix in ("", ".sha256"):
            self.files.pop(path + suffix, None)
        if tarball is not None:
            self.files[path] = Served(tarball, sent)
        if isinstance(checksum, str):
            checksum = f"{checksum}  pgbouncer-{version}.tar.gz\n".encode()
        if checksum is not None:
            self.files[path + ".sha256"] = Served(checksum)

    def __enter__(self) -> ReleaseServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server.requests.append(self.path)
                served = server.files.get(self.path)
                if served is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(served.body)))
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()
                self.wfile.write(served.body[: served.sent])
                self.close_connection = True

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, name="release-server", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        assert self._http is not None and self._thread is not None
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=10)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()

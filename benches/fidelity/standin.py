"""Loopback stand-ins for what the workflows reach over the network.

- `Registry`: one HTTP server on 127.0.0.1 that is both a PEP 503 simple
  index (pip) and an npm registry (packuments, tarballs, an audit endpoint
  that finds nothing), serving only the pinned files of the cache. The
  workflows name it `registry.fidelity.test:PORT`. A rehearsal reaches it
  through dryrun's egress proxy, which refuses loopback addresses unless
  the system configuration pins the name (`--egress-resolve
  registry.fidelity.test:PORT:127.0.0.1`); the direct lane has no resolver
  entry for the name, so it is given the server itself as its HTTP proxy
  (`HTTP_PROXY`): the server answers absolute-form requests exactly as
  direct ones. Both lanes thus send the same requests for the same URLs.
- `Service`: a line-based TCP "database" on 127.0.0.1 (`GET key` answers
  the value), the host service of the loopback-service workflow.
"""

import base64
import hashlib
import io
import json
import socketserver
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

REGISTRY_NAME = "registry.fidelity.test"


def _pep503(name):
    out = []
    for ch in name.lower():
        out.append("-" if ch in "_." else ch)
    return "".join(out)


def _npm_manifest(tgz):
    with tarfile.open(tgz, "r:gz") as t:
        f = t.extractfile("package/package.json")
        return json.load(f)


class Registry:
    """The stand-in registry for the pinned wheels and npm tarballs."""

    def __init__(self, wheels, tarballs):
        self.requests = []
        self._lock = threading.Lock()
        self._routes = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.host = f"{REGISTRY_NAME}:{self.port}"
        self.url = f"http://{self.host}"
        self._index_python(wheels)
        self._index_npm(tarballs)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # ---- content -------------------------------------------------------
    def _index_python(self, wheels):
        by_project = {}
        for w in wheels:
            w = Path(w)
            project = _pep503(w.name.split("-")[0])
            by_project.setdefault(project, []).append(w)
            self._routes[f"/files/{w.name}"] = ("application/octet-stream", w.read_bytes())
        for project, files in by_project.items():
            links = "".join(
                f'<a href="/files/{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">{w.name}</a><br>\n'
                for w in sorted(files)
            )
            html = f"<!DOCTYPE html><html><body>\n{links}</body></html>\n"
            self._routes[f"/simple/{project}/"] = ("text/html", html.encode())
        top = "".join(f'<a href="/simple/{p}/">{p}</a><br>\n' for p in sorted(by_project))
        self._routes["/simple/"] = ("text/html", f"<html><body>\n{top}</body></html>\n".encode())

    def _index_npm(self, tarballs):
        packuments = {}
        for tgz in tarballs:
            tgz = Path(tgz)
            data = tgz.read_bytes()
            m = _npm_manifest(tgz)
            name, version = m["name"], m["version"]
            base = name.split("/")[-1]
            path = f"/{name}/-/{base}-{version}.tgz"
            self._routes[path] = ("application/octet-stream", data)
            doc = dict(m)
            doc["_id"] = f"{name}@{version}"
            doc["dist"] = {
                "tarball": f"{self.url}{path}",
                "integrity": "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode(),
                "shasum": hashlib.sha1(data).hexdigest(),
            }
            p = packuments.setdefault(name, {"name": name, "dist-tags": {}, "versions": {}})
            p["versions"][version] = doc
            p["dist-tags"]["latest"] = version
        for name, p in packuments.items():
            body = json.dumps(p).encode()
            self._routes[f"/{name}"] = ("application/json", body)
            if name.startswith("@"):
                self._routes["/" + name.replace("/", "%2f")] = ("application/json", body)
                self._routes["/" + name.replace("/", "%2F")] = ("application/json", body)

    # ---- serving -------------------------------------------------------
    def _handler(self):
        reg = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _path(self):
                # Absolute form (the direct lane's proxy requests) or origin form.
                target = self.path
                if target.startswith("http://"):
                    target = urlsplit(target).path or "/"
                return target.split("?", 1)[0]

            def _answer(self, code, ctype, body):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_GET(self):
                path = self._path()
                with reg._lock:
                    reg.requests.append(f"{self.command} {path}")
                hit = reg._routes.get(path) or reg._routes.get(unquote(path))
                if hit is None:
                    self._answer(404, "application/json", b'{"error":"not found"}')
                else:
                    self._answer(200, *hit)

            do_HEAD = do_GET

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                path = self._path()
                with reg._lock:
                    reg.requests.append(f"POST {path}")
                # npm's audit: no advisories.
                self._answer(200, "application/json", b"{}")

            def do_CONNECT(self):
                self._answer(405, "text/plain", b"plain http only\n")

        return Handler

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._server.shutdown()
        self._server.server_close()

    def pin(self):
        """The `--egress-resolve` value that lets a rehearsal reach it."""
        return f"{self.host}:127.0.0.1"

    def proxy_env(self):
        """The direct lane's way to the same name (see the module doc)."""
        url = f"http://127.0.0.1:{self.port}"
        env = {}
        for k in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
            env[k] = url
        return env


class Service:
    """A line-based key/value service on host loopback."""

    VALUES = {"answer": "42", "greeting": "hello from the host service"}

    def __init__(self):
        self.connections = 0
        svc = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                svc.connections += 1
                for raw in self.rfile:
                    words = raw.decode(errors="replace").split()
                    if len(words) == 2 and words[0] == "GET":
                        self.wfile.write((svc.VALUES.get(words[1], "") + "\n").encode())
                    else:
                        self.wfile.write(b"ERR\n")

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.endpoint = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._server.shutdown()
        self._server.server_close()


def _selftest():
    """`python3 standin.py`: a quick look that both answer."""
    import urllib.request

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        body = json.dumps({"name": "@x/y", "version": "1.0.0"}).encode()
        info = tarfile.TarInfo("package/package.json")
        info.size = len(body)
        t.addfile(info, io.BytesIO(body))
    import tempfile

    d = Path(tempfile.mkdtemp())
    (d / "y-1.0.0.tgz").write_bytes(buf.getvalue())
    r = Registry([], [d / "y-1.0.0.tgz"]).start()
    with urllib.request.urlopen(f"http://127.0.0.1:{r.port}/@x%2fy") as u:
        print(json.load(u)["versions"]["1.0.0"]["dist"]["tarball"])
    r.stop()


if __name__ == "__main__":
    _selftest()

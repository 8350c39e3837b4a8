"""The HTTP server of asyncrl's chat-environment wire form (tasks/chatenv/wire.go).

Standard library only (http.server, threads). One episode table; each
episode's calls are serialised; an exception in the environment answers 500
{"error": ...}, which fails that trajectory on the asyncrl side (it is
requeued), not the server.
"""

import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 4 << 20


class _Episodes:
    def __init__(self):
        self.lock = threading.Lock()
        self.eps = {}

    def add(self, ep):
        eid = secrets.token_hex(12)
        with self.lock:
            self.eps[eid] = (ep, threading.Lock())
        return eid

    def get(self, eid):
        with self.lock:
            return self.eps.get(eid)

    def pop(self, eid):
        with self.lock:
            return self.eps.pop(eid, None)


def make_server(spec, host="127.0.0.1", port=0):
    """A ThreadingHTTPServer serving spec (an EnvSpec); call serve_forever."""
    episodes = _Episodes()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet: the rollout logs failures
            pass

        def _send(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self):
            n = int(self.headers.get("Content-Length") or 0)
            if n > MAX_BODY:
                raise ValueError("body over %d bytes" % MAX_BODY)
            data = self.rfile.read(n) if n else b"{}"
            obj = json.loads(data)
            if not isinstance(obj, dict):
                raise ValueError("body must be a JSON object")
            return obj

        def do_GET(self):
            if self.path == "/info":
                self._send(200, {"name": spec.name, "max_turns": spec.max_turns,
                                 "max_tokens_per_turn": spec.max_tokens_per_turn})
            else:
                self._send(404, {"error": "no such path %s" % self.path})

        def do_POST(self):
            try:
                req = self._body()
            except Exception as e:  # noqa: BLE001 -- any bad body is the client's
                self._send(400, {"error": "bad request: %s" % e})
                return
            route = {"/reset": self._reset, "/step": self._step, "/close": self._close}.get(self.path)
            if route is None:
                self._send(404, {"error": "no such path %s" % self.path})
                return
            try:
                code, obj = route(req)
            except Exception as e:  # noqa: BLE001 -- the environment failed: say why
                code, obj = 500, {"error": "%s: %s" % (type(e).__name__, e)}
            self._send(code, obj)

        def _reset(self, req):
            messages, tools, meta, ep = spec.adapter.reset(req.get("prompt") or {})
            eid = episodes.add(ep)
            out = {"episode_id": eid, "messages": messages, "metadata": meta}
            if tools:
                out["tools"] = tools
            return 200, out

        def _step(self, req):
            entry = episodes.get(req.get("episode_id", ""))
            if entry is None:
                return 404, {"error": "unknown episode %r" % req.get("episode_id")}
            ep, lock = entry
            with lock:
                msgs, reward, done, meta = ep.step(req.get("action") or {})
            if done:
                episodes.pop(req["episode_id"])
                ep.close()
            return 200, {"messages": msgs, "reward": reward, "done": done, "metadata": meta}

        def _close(self, req):
            entry = episodes.pop(req.get("episode_id", ""))
            if entry is not None:
                entry[0].close()
            return 200, {}

    srv = ThreadingHTTPServer((host, port), Handler)
    srv.daemon_threads = True
    return srv


def serve(spec, host="127.0.0.1", port=0, out=None):
    """Serve spec until interrupted, printing "listening http://host:port"
    first (a parent process reads the line to learn the port)."""
    import sys

    srv = make_server(spec, host, port)
    h, p = srv.server_address[:2]
    print("listening http://%s:%d" % (h, p), file=out or sys.stdout, flush=True)
    try:
        srv.serve_forever()
    finally:
        srv.server_close()

#!/usr/bin/env python3
"""A task server in Python speaking asyncrl's httpenv protocol (see doc.go).

Task "echo": the prompt is "say <word>", the answer is the word; one turn.
Run: python3 echo_server.py  -> prints "listening http://127.0.0.1:<port>".
Only the standard library; binds 127.0.0.1.
"""
import json
import secrets
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORDS = ["cab", "bad", "ace", "dab"]
episodes = {}  # episode_id -> word
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def error(self, status, code, msg):
        self.reply(status, {"error": msg, "code": code})

    def do_GET(self):
        if self.path != "/info":
            return self.error(404, "not_found", "no such path " + self.path)
        self.reply(200, {"name": "echo", "max_turns": 1, "max_tokens_per_turn": 8})

    def do_POST(self):
        try:
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        except ValueError as e:
            return self.error(400, "bad_request", "bad JSON body: %s" % e)
        if self.path == "/reset":
            p = req.get("prompt", {})
            text = p.get("text") or "say " + WORDS[p.get("seed", 0) % len(WORDS)]
            if not text.startswith("say ") or len(text) < 5:
                return self.error(400, "bad_prompt", "%r is not of the form 'say <word>'" % text)
            eid = secrets.token_hex(8)
            with lock:
                episodes[eid] = text[4:]
            return self.reply(200, {"episode_id": eid, "observation": text})
        if self.path == "/step":
            with lock:
                word = episodes.pop(req.get("episode_id"), None)
            if word is None:
                return self.error(404, "unknown_episode", "unknown episode_id %r" % req.get("episode_id"))
            answer = (req.get("action", "").split() or [""])[0]
            return self.reply(200, {"observation": "", "reward": 1.0 if answer == word else 0.0, "done": True})
        self.error(404, "not_found", "no such path " + self.path)


if __name__ == "__main__":
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("listening http://127.0.0.1:%d" % srv.server_address[1], flush=True)
    srv.serve_forever()

#!/usr/bin/env python3
"""A Helm chart repository for the test bed: serves a directory over HTTP (or HTTPS) on --host
(127.0.0.1 unless told) with basic auth, and appends one line per request ("METHOD PATH STATUS")
to a log file so tests can count what clients fetched.

Credentials come from the environment (CHARTREPO_USERNAME, CHARTREPO_PASSWORD), never argv.
"""
import argparse
import base64
import functools
import http.server
import os
import ssl
import threading


class Handler(http.server.SimpleHTTPRequestHandler):
    expected_auth = None
    log_path = None
    log_lock = threading.Lock()

    def _record(self, status):
        with self.log_lock, open(self.log_path, "a", encoding="utf-8") as log:
            log.write(f"{self.command} {self.path} {status}\n")

    def send_response(self, code, message=None):
        self._record(code)
        super().send_response(code, message)

    def _authorized(self):
        if self.expected_auth is None:
            return True
        return self.headers.get("Authorization") == self.expected_auth

    def do_GET(self):
        if not self._authorized():
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="charts"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()

    def do_HEAD(self):
        if not self._authorized():
            self.send_response(401)
            self.end_headers()
            return
        super().do_HEAD()

    def log_message(self, format, *args):
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    args = parser.parse_args()

    user, password = os.environ.get("CHARTREPO_USERNAME"), os.environ.get("CHARTREPO_PASSWORD")
    if user:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        Handler.expected_auth = f"Basic {token}"
    Handler.log_path = args.log
    handler = functools.partial(Handler, directory=args.dir)
    server = http.server.ThreadingHTTPServer((args.host, args.port), handler)
    if args.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

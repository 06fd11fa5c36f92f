"""A stand-in server for tests/test_sitting.py, started as a plan's server command:

    python tests/sitting_fake_server.py --port N [--healthy-after S | --never-healthy | --exit-now RC]
        [--child-pid-file FILE] [--ignore-term]

GET /health answers 200 once --healthy-after seconds have passed (503 before, and always with --never-healthy);
--exit-now prints a line and exits with RC at once; --child-pid-file starts a child process in its group (a
stand-in for an engine core) and writes the child's pid there; --ignore-term ignores SIGTERM, so only SIGKILL
to the group ends it. Otherwise SIGTERM ends the child, then it (exit 0). Each event is a line on stdout (the sitting's log)."""

import argparse
import http.server
import signal
import subprocess
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--healthy-after", type=float, default=0.0)
    p.add_argument("--never-healthy", action="store_true")
    p.add_argument("--exit-now", type=int)
    p.add_argument("--child-pid-file")
    p.add_argument("--ignore-term", action="store_true")
    args = p.parse_args()
    print(f"fake server: starting on port {args.port}", flush=True)
    if args.exit_now is not None:
        print(f"fake server: giving up at once with exit {args.exit_now}", flush=True)
        return args.exit_now
    child = None
    if args.child_pid_file:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(args.child_pid_file, "w") as f:
            f.write(str(child.pid))

    def stop(signum, frame):  # as a server stops its engine before it exits
        print("fake server: SIGTERM, stopping", flush=True)
        if child is not None:
            child.terminate()
            child.wait()
        sys.exit(0)

    signal.signal(signal.SIGTERM, signal.SIG_IGN if args.ignore_term else stop)
    started = time.monotonic()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            healthy = not args.never_healthy and time.monotonic() - started >= args.healthy_after
            self.send_response(200 if self.path == "/health" and healthy else 503)
            self.end_headers()
            self.wfile.write(b"ok" if healthy else b"not yet")

        def log_message(self, format, *a):
            print(f"fake server: {format % a}", flush=True)

    with http.server.HTTPServer(("127.0.0.1", args.port), Handler) as server:
        print("fake server: listening", flush=True)
        server.serve_forever(poll_interval=0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

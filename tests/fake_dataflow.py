"""A stand-in for the Dataflow service's job API, for tests that submit real jobs offline.

    python tests/fake_dataflow.py --port PORT --job-id ID

Beam's DataflowRunner given ``--dataflow_endpoint=http://localhost:PORT --no_auth`` speaks
REST to it: creating a job answers a job with id ``ID`` (pending), reading a job answers it
done. Nothing runs: this proves what the submitting side does and prints (staging, the
job's id), not what a Dataflow worker does. It listens on loopback only and logs each
request on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _handler(job_id: str) -> type[BaseHTTPRequestHandler]:
    class JobApi(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # projects.locations.jobs.create
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            job = json.loads(body or b"{}")
            self._answer({"id": job_id, "name": job.get("name", ""), "type": "JOB_TYPE_BATCH",
                          "currentState": "JOB_STATE_PENDING",
                          "clientRequestId": job.get("clientRequestId", "")})

        def do_GET(self) -> None:  # projects.locations.jobs.get
            self._answer({"id": job_id, "type": "JOB_TYPE_BATCH",
                          "currentState": "JOB_STATE_DONE"})

        def _answer(self, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args) -> None:
            sys.stderr.write(f"fake dataflow: {format % args}\n")

    return JobApi


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--job-id", default="2026-01-01_00_00_00-1234567890")
    args = parser.parse_args()
    ThreadingHTTPServer(("127.0.0.1", args.port), _handler(args.job_id)).serve_forever()


if __name__ == "__main__":
    main()

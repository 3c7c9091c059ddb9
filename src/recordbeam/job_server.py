"""The job server a portable runner submits to (``--job_endpoint``), said plainly when it
is not there.

Beam waits ``--job_server_timeout`` (300 s by default) for a job server that does not
answer and then raises a timeout error without a message. A port where nothing listens
refuses a connection at once, so that case is told before the job is built; a server
that stays silent is told when Beam's wait ends.
"""

from __future__ import annotations

import socket

import grpc
from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions, StandardOptions

from recordbeam.errors import RecordbeamError, UsageError

#: How long the connection test waits: long enough for a job server across a network,
#: and a refused port answers at once.
_CONNECT_SECONDS = 10.0


def job_endpoint(options: PipelineOptions) -> str | None:
    """The ``host:port`` the runner will submit to, or None (no endpoint given, Beam
    starts its own job server, or the runner is Dataflow's, which has none)."""
    endpoint = options.view_as(PortableOptions).job_endpoint
    runner = options.view_as(StandardOptions).runner
    name = runner if isinstance(runner, str) else type(runner).__name__
    if not endpoint or endpoint == "embed" or "dataflow" in (name or "").lower():
        return None
    return endpoint


def check_job_server(options: PipelineOptions) -> None:
    """Raise ``UsageError`` when nothing listens at ``--job_endpoint`` (or its host does not
    resolve). A server that accepts the connection is left to Beam."""
    endpoint = job_endpoint(options)
    address = _host_and_port(endpoint) if endpoint else None
    if address is None:
        return
    try:
        socket.create_connection(address, timeout=_CONNECT_SECONDS).close()
    except ConnectionRefusedError:
        raise UsageError(f"--job_endpoint {endpoint}: no job server listens there (connection "
                         "refused); start the job server, or correct the address") from None
    except socket.gaierror as error:
        raise UsageError(f"--job_endpoint {endpoint}: the host {address[0]} is not known "
                         f"({error.strerror}); correct the address") from None
    except OSError:  # unreachable or silent for now: Beam's own wait decides
        return


def no_job_server_error(error: BaseException, options: PipelineOptions) -> RecordbeamError | None:
    """What to say for Beam's wait for a job server that never answered (``error``), or
    None when ``error`` is another."""
    if not isinstance(error, grpc.FutureTimeoutError):
        return None
    endpoint = job_endpoint(options) or "the job server Beam started"
    waited = options.view_as(PortableOptions).job_server_timeout
    return RecordbeamError(f"no Beam job server answered at {endpoint} within {waited} s "
                           "(--job_endpoint, --job_server_timeout)")


def _host_and_port(endpoint: str) -> tuple[str, int] | None:
    host, _colon, port = endpoint.rpartition(":")
    host = host.strip("[]")  # [::1]:8099
    if not host or "/" in host or not port.isdigit():  # not dns:///host:port: left to gRPC
        return None
    return host, int(port)

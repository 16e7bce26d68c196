"""Token and TLS options, against a gRPC server on loopback that records what it receives.

The coordinator does not check tokens or speak TLS yet, so these use a server of the
test's own that serves ``GetCluster`` with a certificate made for the occasion.
"""

from __future__ import annotations

import subprocess
from concurrent import futures
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import grpc
import pytest

import stoke
from stoke.v1 import coordinator_pb2, coordinator_pb2_grpc


class RecordingCoordinator(coordinator_pb2_grpc.CoordinatorServicer):
    """Answers GetCluster and keeps each call's metadata."""

    def __init__(self) -> None:
        self.metadata: List[dict] = []

    def GetCluster(self, request, context):  # noqa: N802 (the RPC's name)
        self.metadata.append(dict(context.invocation_metadata()))
        return coordinator_pb2.Cluster(coordinator_version="recording")


def serve(credentials: Optional[grpc.ServerCredentials]) -> Tuple[grpc.Server, RecordingCoordinator, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = RecordingCoordinator()
    coordinator_pb2_grpc.add_CoordinatorServicer_to_server(servicer, server)
    if credentials is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    return server, servicer, port


@pytest.fixture
def certificate(tmp_path: Path) -> Tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture
def plain_server() -> Iterator[Tuple[RecordingCoordinator, int]]:
    server, servicer, port = serve(None)
    yield servicer, port
    server.stop(None)


def test_a_token_travels_as_bearer_authorization(plain_server) -> None:
    servicer, port = plain_server
    with stoke.Client(f"127.0.0.1:{port}", token="s3cret") as client:
        assert client.cluster().coordinator_version == "recording"
    with stoke.Client(f"127.0.0.1:{port}") as client:
        client.cluster()
    assert servicer.metadata[0].get("authorization") == "Bearer s3cret"
    assert "authorization" not in servicer.metadata[1]


def test_tls_verifies_the_server_against_the_given_ca(certificate) -> None:
    cert, key = certificate
    credentials = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])
    server, servicer, port = serve(credentials)
    try:
        with stoke.Client(f"127.0.0.1:{port}", token="t", tls=cert) as client:
            assert client.cluster().coordinator_version == "recording"
        assert servicer.metadata[0].get("authorization") == "Bearer t"
        # Without TLS, or trusting only the system's CAs, there is no connection.
        for tls in (False, True):
            with stoke.Client(f"127.0.0.1:{port}", tls=tls, timeout=3) as client:
                with pytest.raises(stoke.Unavailable):
                    client.cluster()
        assert len(servicer.metadata) == 1
    finally:
        server.stop(None)

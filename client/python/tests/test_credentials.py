"""Token and TLS options: first against a gRPC server on loopback that records what it
receives (to see exactly what travels), then against a real coordinator started with TLS
and a tokens file, as docs/security.md deploys one.
"""

from __future__ import annotations

import hashlib
import subprocess
from concurrent import futures
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import grpc
import pytest

import stoke
import stoke.settings
from conftest import binary, wait_for
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


def test_the_environment_and_the_config_file_fill_in_what_is_not_given(
    plain_server, monkeypatch, tmp_path: Path
) -> None:
    servicer, port = plain_server
    config = tmp_path / "stoke" / "config.yaml"
    config.parent.mkdir()
    config.write_text(f"address: 127.0.0.1:{port}\ntoken: from-file\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    with stoke.Client() as client:
        assert client.address == f"127.0.0.1:{port}"
        client.cluster()
    monkeypatch.setenv("STOKE_TOKEN", "from-env")
    with stoke.Client() as client:
        client.cluster()
    with stoke.Client(token="given") as client:
        client.cluster()
    assert [m.get("authorization") for m in servicer.metadata] == [
        "Bearer from-file", "Bearer from-env", "Bearer given"]
    # The CLI's rules for the file: an unknown key is named with its line.
    config.write_text(f"address: 127.0.0.1:{port}\nadress: typo\n")
    with pytest.raises(stoke.settings.ConfigFileError, match=f"{config}:2: adress: unknown key"):
        stoke.Client()


def test_stoke_tls_ca_turns_tls_on_unless_tls_is_false(certificate, monkeypatch) -> None:
    cert, key = certificate
    credentials = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])
    server, servicer, port = serve(credentials)
    try:
        monkeypatch.setenv("STOKE_TLS_CA", str(cert))
        with stoke.Client(f"127.0.0.1:{port}") as client:
            assert client.cluster().coordinator_version == "recording"
        with stoke.Client(f"127.0.0.1:{port}", tls=False, timeout=3) as client:
            with pytest.raises(stoke.Unavailable):
                client.cluster()
    finally:
        server.stop(None)


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


def test_a_coordinator_with_tls_and_tokens_knows_who_calls(certificate, tmp_path: Path) -> None:
    cert, key = certificate
    tokens = {"alice": ("submitter", "stk_alice"), "victor": ("viewer", "stk_victor")}
    (tmp_path / "tokens").write_text(
        "".join(
            f"{name} {role} sha256:{hashlib.sha256(token.encode()).hexdigest()}\n"
            for name, (role, token) in tokens.items()
        )
    )
    data = tmp_path / "data"
    process = subprocess.Popen(
        [
            str(binary("stoke-coordinator")), "--address", "127.0.0.1:0", "--data-dir", str(data),
            "--local-workers", "0", "--metrics-address", "", "--tls-cert", str(cert),
            "--tls-key", str(key), "--auth-tokens", str(tmp_path / "tokens"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        address_file = data / "coordinator.address"
        assert wait_for(address_file.exists, 30), "the coordinator did not start"
        address = address_file.read_text().strip()
        spec = {
            "model": {"mlp": {"hidden": [8]}},
            "data": {"synthetic": {"features": 4, "num_classes": 2}},
            "training": {"steps": 5, "batch_size": 8},
        }
        with stoke.Client(address, token="stk_alice", tls=cert) as alice:
            job = alice.submit(spec)
            assert job.refresh().owner == "alice"
        with stoke.Client(address, tls=cert) as nobody:
            with pytest.raises(stoke.Unauthenticated):
                nobody.cluster()
        with stoke.Client(address, token="stk_victor", tls=cert) as victor:
            assert victor.cluster() is not None
            with pytest.raises(stoke.PermissionDenied):
                victor.submit(spec)
            with pytest.raises(stoke.PermissionDenied):
                victor.job(job.id).cancel()
    finally:
        process.terminate()
        process.wait(timeout=30)


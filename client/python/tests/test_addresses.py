"""Coordinator address lists: a client given a leader and its standbys reaches the one
that listens, and bad lists are refused naming the list."""

from __future__ import annotations

import socket
from concurrent import futures

import grpc
import pytest

import stoke
from stoke.addresses import channel_target
from stoke.v1 import coordinator_pb2, coordinator_pb2_grpc


class Leader(coordinator_pb2_grpc.CoordinatorServicer):
    def GetCluster(self, request, context):  # noqa: N802 (the RPC's name)
        return coordinator_pb2.Cluster(coordinator_version="leader")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_one_address_is_used_as_given() -> None:
    assert channel_target("coordinator.example:50051") == ("coordinator.example:50051", [])


def test_a_list_becomes_one_target_of_numeric_addresses() -> None:
    target, options = channel_target("127.0.0.1:5001, localhost:5002")
    assert target == "ipv4:127.0.0.1:5001,127.0.0.1:5002"
    assert ("grpc.lb_policy_name", "pick_first") in options


@pytest.mark.parametrize("bad", ["127.0.0.1:1,", "127.0.0.1:1,127.0.0.1", "127.0.0.1:1,[::1]:2",
                                 "127.0.0.1:1,no-such-host.invalid:1"])
def test_bad_lists_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="coordinator address"):
        channel_target(bad)


def test_the_client_reaches_the_coordinator_that_listens() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    coordinator_pb2_grpc.add_CoordinatorServicer_to_server(Leader(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        # The first address is a standby: nothing listens there.
        client = stoke.Client(f"127.0.0.1:{free_port()},127.0.0.1:{port}")
        assert client._stub.GetCluster(coordinator_pb2.GetClusterRequest(), timeout=10).coordinator_version == "leader"
        client.close()
    finally:
        server.stop(None)

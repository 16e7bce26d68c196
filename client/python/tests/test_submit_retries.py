"""A submission whose answer is lost is sent again with its request id, and the coordinator
creates one job for it: a proxy in front of a real coordinator forwards the first
SubmitJob, then drops the answer as UNAVAILABLE (the failure is the only fake here)."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest

import stoke
from conftest import Coordinator, endless_job
from stoke.v1 import coordinator_pb2, coordinator_pb2_grpc


class LosesTheFirstAnswer(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(self, target: str) -> None:
        self._channel = grpc.insecure_channel(target)
        self._stub = coordinator_pb2_grpc.CoordinatorStub(self._channel)
        self.requests: list[coordinator_pb2.SubmitJobRequest] = []

    def SubmitJob(self, request, context):  # noqa: N802 (gRPC's method name)
        self.requests.append(request)
        answer = self._stub.SubmitJob(request)  # the job is made...
        if len(self.requests) == 1:
            context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset")  # ...the answer lost
        return answer

    def ValidateJob(self, request, context):  # noqa: N802 (gRPC's method name)
        return self._stub.ValidateJob(request)  # the dict's reading: passed through


@pytest.fixture
def proxy(idle_coordinator: Coordinator):
    servicer = LosesTheFirstAnswer(idle_coordinator.address)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    coordinator_pb2_grpc.add_CoordinatorServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, f"127.0.0.1:{port}"
    server.stop(None)


def test_a_lost_answer_is_retried_with_the_same_request_id_and_makes_one_job(
    proxy, idle_client: stoke.Client
) -> None:
    servicer, address = proxy
    before = {job.id for job in idle_client.list()}
    with stoke.Client(address) as client:
        job = client.submit(endless_job("retried"))
    assert len(servicer.requests) == 2, "not sent again after UNAVAILABLE"
    first, second = servicer.requests
    assert first.request_id and first.request_id == second.request_id
    made = [j for j in idle_client.list() if j.id not in before]
    assert [j.id for j in made] == [job.id], "the retry made a second job"
    idle_client.cancel(job.id)


def test_a_request_id_given_names_the_submission(idle_client: stoke.Client) -> None:
    first = idle_client.submit(endless_job("named"), request_id="nightly-2026-12-06")
    again = idle_client.submit(endless_job("named"), request_id="nightly-2026-12-06")
    assert again.id == first.id
    first.cancel()

// The addresses Stoke's programs meet at when they are told none: where the coordinator
// listens (gRPC) and serves /metrics, which is also where its local workers, the CLI and
// libstoke_client dial it. One home for each, so that a program never listens at one
// default while another dials a different one. Header-only and free of torch, protobuf
// and gRPC (the stoke_job_defaults target).
#pragma once

namespace stoke::defaults {

// stoke-coordinator --address; stoke-worker --coordinator; stoke --address; ClientOptions.
inline constexpr char kCoordinatorAddress[] = "127.0.0.1:50051";
// stoke-coordinator --metrics-address (Prometheus' /metrics).
inline constexpr char kMetricsAddress[] = "127.0.0.1:9464";

}  // namespace stoke::defaults

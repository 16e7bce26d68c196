// Sizes and timings every side of the Stoke API agrees on: the coordinator's server, its
// workers' links and the client. One number each, so that nothing the coordinator accepts
// is refused further down (a spec the server took but a worker could not receive used to
// break that worker's link on every assignment).
#pragma once

#include <cstddef>

namespace stoke::v1 {

// The largest gRPC message any side sends or receives (WorkerLink, Coordinator).
inline constexpr int kMaxMessageBytes = 16 * 1024 * 1024;

// The largest job spec accepted at submission (unknown fields dropped first). An
// assignment carries the spec plus a few hundred bytes, far below kMaxMessageBytes.
inline constexpr size_t kMaxSpecBytes = 64 * 1024;

// ListJobs stops adding jobs to a page once it holds this many bytes (and hands out a
// token for the rest), so a page always fits in kMaxMessageBytes.
inline constexpr size_t kMaxPageBytes = 8 * 1024 * 1024;

// Caps on strings in requests (INVALID_ARGUMENT names the field beyond them).
inline constexpr size_t kMaxIdBytes = 256;       // job and worker ids, hosts, names
inline constexpr size_t kMaxPathBytes = 4096;    // paths in specs (PATH_MAX)
inline constexpr size_t kMaxReasonBytes = 4096;  // cancel reasons, errors, log lines
inline constexpr int kMaxRepeatedElements = 64;  // repeated fields in a spec

// Script jobs' reported scalars (MetricSample.scalars): names a job may have, and a
// name's length. Each name is a label value on /metrics, so the set stays bounded.
inline constexpr size_t kMaxReportedScalars = 32;
inline constexpr size_t kMaxScalarNameBytes = 64;

// Keepalive pings on the long-lived streams (WorkerLink, WatchJob). A worker pings its
// idle link this often, and the coordinator accepts pings that often: gRPC closes the
// connection of a peer that pings more often than its server permits.
inline constexpr int kWorkerKeepaliveMs = 10'000;
// A ping unanswered this long means the peer is gone, on either side.
inline constexpr int kKeepaliveTimeoutMs = 10'000;

// ListJobs: a page holds at most this many jobs (page_size 0 means kDefaultPageSize).
inline constexpr unsigned kMaxPageSize = 1000;
inline constexpr unsigned kDefaultPageSize = 50;

}  // namespace stoke::v1

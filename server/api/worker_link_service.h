// The internal stoke.v1.WorkerLink service: one bidirectional stream per worker. The
// stream is the worker's WorkerConnection in the core; messages from the worker are
// handled on the executor one at a time, in order (the next read starts only after the
// previous message was handled, which also pushes back on a worker that sends too fast).
#pragma once

#include "server/api/access_control.h"
#include "server/api/audit_log.h"
#include "server/api/executor.h"
#include "server/core/coordinator.h"
#include "stoke/v1/worker_link.grpc.pb.h"

namespace stoke::server {

class WorkerLinkService final : public v1::WorkerLink::CallbackService {
 public:
  // Workers identify themselves as AccessControl::IdentifyWorker says; registrations are
  // audited.
  WorkerLinkService(Coordinator& core, Executor& executor, const AccessControl& access,
                    AuditLog& audit);

 private:
  // Attach, with the worker's messages handed over as bytes and decoded by the stream, so
  // that one gRPC cannot decode ends the stream with INVALID_ARGUMENT naming the field
  // (gRPC would read it as the worker closing the stream).
  grpc::ServerBidiReactor<grpc::ByteBuffer, v1::CoordinatorMessage>* AttachLink(
      grpc::CallbackServerContext* context);

  Coordinator& core_;
  Executor& executor_;
  const AccessControl& access_;
  AuditLog& audit_;
};

}  // namespace stoke::server

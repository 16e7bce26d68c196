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
                    AuditLog& audit)
      : core_(core), executor_(executor), access_(access), audit_(audit) {}

  grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* Attach(
      grpc::CallbackServerContext* context) override;

 private:
  Coordinator& core_;
  Executor& executor_;
  const AccessControl& access_;
  AuditLog& audit_;
};

}  // namespace stoke::server

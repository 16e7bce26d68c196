// Who is calling, and what they may do. A call carries a bearer token
// ("authorization: Bearer TOKEN" metadata) that the tokens file (--auth-tokens) names and
// gives a role; a worker may instead present a client certificate that --client-ca
// verified. Without a tokens file every caller is an anonymous admin (the loopback
// quickstart), unless certificates are required of workers.
//
// Roles: a viewer reads job states, metrics and the cluster; a submitter also submits,
// and cancels, exports and reads the logs of the jobs it owns; an admin does everything;
// a worker attaches as a worker and nothing else.
#pragma once

#include <grpcpp/grpcpp.h>

#include <map>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "security/auth_tokens.h"
#include "stoke/v1/job.pb.h"

namespace stoke::server {

struct Caller {
  std::string name;
  security::Role role = security::Role::kViewer;
  // Where the call came from (gRPC's peer string), for the audit log.
  std::string peer;
  // A worker token's hosts (security::TokenEntry::hosts); empty: any.
  std::vector<std::string> hosts = {};
};

class AccessControl {
 public:
  struct Options {
    std::vector<security::TokenEntry> tokens;
    // Workers must present a client certificate verified by --client-ca (a join token
    // alone is not enough).
    bool require_worker_certificate = false;
    // Who may submit Python models, whose code runs on the workers' hosts
    // (--python-models): callers of this role or above; none when unset.
    std::optional<security::Role> python_models = security::Role::kSubmitter;
    // The highest resources.priority a submitter may set (--max-priority submitter=N);
    // admins may set any. None: no limit.
    std::optional<int32_t> max_submitter_priority;
  };

  explicit AccessControl(Options options);

  // Whether calls need a token at all.
  bool enabled() const;
  // The tokens file was read again (SIGHUP): calls from now on are checked against
  // `tokens`; a call being served keeps the caller it was identified as.
  void ReplaceTokens(std::vector<security::TokenEntry> tokens);

  // The caller of a client call: UNAUTHENTICATED without a valid token (when tokens are
  // enabled). Worker tokens are refused here.
  absl::StatusOr<Caller> IdentifyUser(const grpc::ServerContextBase& context) const;
  // The caller of a worker link: a worker token or a verified client certificate
  // (name "cert:" + the certificate's identity).
  absl::StatusOr<Caller> IdentifyWorker(const grpc::ServerContextBase& context) const;

  // PERMISSION_DENIED (naming `field` and --python-models) unless `caller` may run its own
  // code on the workers: a Python model, or a script job's command.
  absl::Status RequirePythonModels(const Caller& caller, const std::string& field) const;
  // PERMISSION_DENIED naming the field when a caller below admin asks for a priority
  // above max_submitter_priority, or protects (preemptible: false) a job of negative
  // priority, which would hold devices that higher priorities are promised.
  // The message names `prefix` + the field ("resources.priority").
  absl::Status RequirePriorityAllowed(const Caller& caller, const v1::ResourceSpec& resources,
                                      const std::string& prefix = "resources.") const;
  // PERMISSION_DENIED (naming register.worker_id) when the caller's token names hosts and
  // the worker's id is not HOST or HOST/DEVICE of one of them.
  static absl::Status RequireHostOf(const Caller& caller, const std::string& worker_id);
  // PERMISSION_DENIED unless `caller` has at least `role`.
  static absl::Status Require(const Caller& caller, security::Role role, const std::string& what);
  // PERMISSION_DENIED unless `caller` owns the job or is an admin.
  static absl::Status RequireOwner(const Caller& caller, const v1::Job& job,
                                   const std::string& what);
  static bool Owns(const Caller& caller, const v1::Job& job);

 private:
  // The entry of the token the call presents, if any (`presented`: whether it presents
  // one at all); UNAUTHENTICATED for an expired one.
  absl::StatusOr<std::optional<security::TokenEntry>> FindToken(
      const grpc::ServerContextBase& context, bool* presented) const;

  mutable std::shared_mutex tokens_mu_;
  std::map<std::string, security::TokenEntry> by_hash_;
  bool require_worker_certificate_;
  std::optional<security::Role> python_models_;
  std::optional<int32_t> max_submitter_priority_;
};

// The host of a gRPC peer: "ipv4:10.0.0.7:51234" -> "10.0.0.7", "ipv6:[fe80::1]:51234" ->
// "fe80::1"; any other kind of peer (a unix socket) is on this host, "127.0.0.1".
std::string PeerHost(const std::string& peer);

// A job as a caller who does not own it may see it: states, progress and metrics, but not
// where its data and model files are.
v1::Job RedactForNonOwner(v1::Job job);
// `text` with every absolute path in it (a run of characters from a '/' after a space, a
// quote, a colon or the start, to the next space, quote or comma) replaced by "<path>":
// a failed job's message names its files, which are its owner's business.
std::string RedactPaths(const std::string& text);

}  // namespace stoke::server

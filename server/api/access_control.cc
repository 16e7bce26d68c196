#include "server/api/access_control.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "security/token_hash.h"

namespace stoke::server {
namespace {

using security::Role;

constexpr absl::string_view kBearer = "Bearer ";
// Anything longer is not one of our tokens; refusing it early keeps hashing bounded.
constexpr size_t kMaxTokenBytes = 512;

Caller Anonymous(const grpc::ServerContextBase& context) {
  return Caller{"anonymous", Role::kAdmin, context.peer()};
}

// The identity a verified client certificate carries (its subject alternative name or
// common name), or "" when the peer presented none.
std::string CertificateIdentity(const grpc::ServerContextBase& context) {
  auto auth = context.auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) return "";
  for (const auto& id : auth->GetPeerIdentity()) {
    std::string name(id.data(), id.size());
    if (!name.empty()) return name;
  }
  return "";
}

}  // namespace

AccessControl::AccessControl(Options options)
    : require_worker_certificate_(options.require_worker_certificate),
      python_models_(options.python_models),
      max_submitter_priority_(options.max_submitter_priority) {
  for (auto& entry : options.tokens) by_hash_.emplace(entry.hash, std::move(entry));
}

bool AccessControl::enabled() const {
  std::shared_lock<std::shared_mutex> lock(tokens_mu_);
  return !by_hash_.empty();
}

void AccessControl::ReplaceTokens(std::vector<security::TokenEntry> tokens) {
  std::map<std::string, security::TokenEntry> by_hash;
  for (auto& entry : tokens) by_hash.emplace(entry.hash, std::move(entry));
  std::unique_lock<std::shared_mutex> lock(tokens_mu_);
  by_hash_ = std::move(by_hash);
}

absl::StatusOr<std::optional<security::TokenEntry>> AccessControl::FindToken(
    const grpc::ServerContextBase& context, bool* presented) const {
  *presented = false;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return std::nullopt;
  *presented = true;
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::StartsWith(value, kBearer) || value.size() > kMaxTokenBytes) return std::nullopt;
  value.remove_prefix(kBearer.size());
  const std::string hash = security::HashToken(absl::StrCat(value));
  std::shared_lock<std::shared_mutex> lock(tokens_mu_);
  auto found = by_hash_.find(hash);
  if (found == by_hash_.end()) return std::nullopt;
  const security::TokenEntry& entry = found->second;
  if (entry.expires && absl::Now() >= *entry.expires) {
    return absl::UnauthenticatedError(
        absl::StrCat("token ", entry.name, " expired at ",
                     absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", *entry.expires, absl::UTCTimeZone()),
                     "; ask an admin for a new one (stoke token create)"));
  }
  return entry;
}

absl::StatusOr<Caller> AccessControl::IdentifyUser(const grpc::ServerContextBase& context) const {
  if (!enabled()) return Anonymous(context);
  bool presented = false;
  auto found = FindToken(context, &presented);
  if (!found.ok()) return found.status();
  const std::optional<security::TokenEntry>& entry = *found;
  if (!presented) {
    return absl::UnauthenticatedError(
        "this coordinator requires a token: set STOKE_TOKEN (or token: in "
        "~/.config/stoke/config.yaml); an admin makes one with `stoke token create`");
  }
  if (!entry) return absl::UnauthenticatedError("the token is not valid here");
  if (entry->role == Role::kWorker) {
    return absl::PermissionDeniedError(
        absl::StrCat("token ", entry->name, " is a worker join token; it may only attach workers"));
  }
  return Caller{entry->name, entry->role, context.peer()};
}

absl::StatusOr<Caller> AccessControl::IdentifyWorker(const grpc::ServerContextBase& context) const {
  const std::string certificate = CertificateIdentity(context);
  if (require_worker_certificate_ && certificate.empty()) {
    return absl::UnauthenticatedError(
        "workers must present a client certificate signed by the coordinator's --client-ca");
  }
  if (!certificate.empty()) return Caller{"cert:" + certificate, Role::kWorker, context.peer()};
  if (!enabled()) return Caller{"anonymous", Role::kWorker, context.peer()};
  bool presented = false;
  auto found = FindToken(context, &presented);
  if (!found.ok()) return found.status();
  const std::optional<security::TokenEntry>& entry = *found;
  if (!presented) {
    return absl::UnauthenticatedError(
        "this coordinator requires workers to join with a token (--join-token-file) or a "
        "client certificate");
  }
  if (!entry) return absl::UnauthenticatedError("the join token is not valid here");
  if (entry->role != Role::kWorker) {
    return absl::PermissionDeniedError(absl::StrCat("token ", entry->name, " has role ",
                                                    security::RoleName(entry->role),
                                                    "; workers join with a token of role worker"));
  }
  return Caller{entry->name, Role::kWorker, context.peer(), entry->hosts};
}

absl::Status AccessControl::RequireHostOf(const Caller& caller, const std::string& worker_id) {
  if (caller.hosts.empty()) return absl::OkStatus();
  for (const std::string& host : caller.hosts) {
    if (worker_id == host || absl::StartsWith(worker_id, host + "/")) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "register.worker_id: ", worker_id, ": token ", caller.name, " registers workers of ",
      absl::StrJoin(caller.hosts, ", "), " only (HOST or HOST/DEVICE)"));
}

absl::Status AccessControl::Require(const Caller& caller, Role role, const std::string& what) {
  const bool user = caller.role != Role::kWorker;
  if (user && static_cast<int>(caller.role) >= static_cast<int>(role)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(what, " needs role ", security::RoleName(role),
                                                  "; ", caller.name, " is ",
                                                  security::RoleName(caller.role)));
}

absl::Status AccessControl::RequirePythonModels(const Caller& caller,
                                                const std::string& field) const {
  if (!python_models_) {
    return absl::PermissionDeniedError(absl::StrCat(
        field,
        ": this coordinator runs no submitted code on its workers "
        "(stoke-coordinator --python-models off); use a built-in model, or ask its admin"));
  }
  if (auto s = Require(caller, *python_models_,
                       absl::StrCat(field, " (your own code, run on the workers)"));
      !s.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(s.message(),
                                                    " (stoke-coordinator --python-models ",
                                                    security::RoleName(*python_models_), ")"));
  }
  return absl::OkStatus();
}

absl::Status AccessControl::RequirePriorityAllowed(const Caller& caller,
                                                   const v1::ResourceSpec& resources,
                                                   const std::string& prefix) const {
  if (caller.role == Role::kAdmin) return absl::OkStatus();
  if (max_submitter_priority_ && resources.priority() > *max_submitter_priority_) {
    return absl::PermissionDeniedError(absl::StrCat(
        prefix, "priority: ", resources.priority(), " is above ", *max_submitter_priority_,
        ", the highest a submitter may set (stoke-coordinator --max-priority submitter=",
        *max_submitter_priority_, "); an admin may set it"));
  }
  if (resources.priority() < 0 && resources.has_preemptible() && !resources.preemptible()) {
    return absl::PermissionDeniedError(absl::StrCat(
        prefix, "preemptible: false; only an admin may protect a job of negative priority (",
        resources.priority(), ") from preemption"));
  }
  return absl::OkStatus();
}

bool AccessControl::Owns(const Caller& caller, const v1::Job& job) {
  return caller.role == Role::kAdmin ||
         (caller.role == Role::kSubmitter && job.owner() == caller.name);
}

absl::Status AccessControl::RequireOwner(const Caller& caller, const v1::Job& job,
                                         const std::string& what) {
  if (Owns(caller, job)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      what, " of job ", job.id(), " is for its owner or an admin; ", caller.name, " is neither"));
}

std::string PeerHost(const std::string& peer) {
  if (peer.rfind("ipv4:", 0) == 0) return peer.substr(5, peer.rfind(':') - 5);
  if (peer.rfind("ipv6:[", 0) == 0) {
    const auto close = peer.find(']');
    if (close != std::string::npos) return peer.substr(6, close - 6);
  }
  return "127.0.0.1";
}

std::string RedactPaths(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const bool starts = text[i] == '/' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '"' ||
                                           text[i - 1] == '\'' || text[i - 1] == ':' ||
                                           text[i - 1] == '(' || text[i - 1] == '=');
    if (!starts) {
      out.push_back(text[i++]);
      continue;
    }
    size_t end = i;
    while (end < text.size() && text[end] != ' ' && text[end] != '"' && text[end] != '\'' &&
           text[end] != ',' && text[end] != ')' && text[end] != ';') {
      ++end;
    }
    // "path: problem" keeps its colon.
    if (end > i + 1 && text[end - 1] == ':') --end;
    out += "<path>";
    i = end;
  }
  return out;
}

v1::Job RedactForNonOwner(v1::Job job) {
  v1::JobSpec* spec = job.mutable_spec();
  v1::DataSpec* data = spec->mutable_data();
  if (data->has_mnist()) data->mutable_mnist()->clear_path();
  if (data->has_cifar10()) data->mutable_cifar10()->clear_path();
  if (data->has_tokens()) {
    data->mutable_tokens()->clear_train_path();
    data->mutable_tokens()->clear_val_path();
  }
  if (data->has_images()) {
    auto* images = data->mutable_images();
    images->clear_path();
    images->clear_manifest();
    images->clear_val_path();
    images->clear_val_manifest();
  }
  if (data->has_shards()) {
    data->mutable_shards()->clear_urls();
    data->mutable_shards()->clear_val_urls();
  }
  if (data->has_arrays()) {
    auto* arrays = data->mutable_arrays();
    arrays->clear_inputs();
    arrays->clear_targets();
    arrays->clear_val_inputs();
    arrays->clear_val_targets();
  }
  if (spec->model().has_torchscript()) spec->mutable_model()->mutable_torchscript()->clear_path();
  if (spec->model().has_python()) spec->mutable_model()->mutable_python()->clear_file();
  job.set_message(RedactPaths(job.message()));
  job.clear_request_id();  // the owner's handle for retries, not a viewer's
  // A command's arguments and environment may hold what is its owner's alone.
  if (spec->has_command()) {
    spec->mutable_command()->clear_argv();
    spec->mutable_command()->clear_env();
    spec->mutable_command()->clear_workdir();
  }
  return job;
}

}  // namespace stoke::server

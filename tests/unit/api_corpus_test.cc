// A corpus of malformed requests sent straight to a real coordinator's gRPC API (server
// on loopback, SQLite store in a temp folder), generated from tables and from the
// messages' own descriptors so that a field added to the .proto is covered too. Every
// request must be refused with the fitting code and a message naming the field; afterwards
// the coordinator still takes a valid job, and no job it had stored has changed.
#include <google/protobuf/descriptor.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/stoke/v1/limits.h"
#include "security/token_hash.h"
#include "stoke/v1/coordinator.pb.h"
#include "tests/support/data_files.h"
#include "tests/support/in_process_coordinator.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace stoke::testing {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// What a test case talks to.
struct Api {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Coordinator::Stub> stub;
  std::unique_ptr<v1::WorkerLink::Stub> link;
  std::string job_id;  // a stored job, PENDING (no workers attach)
  std::string token;   // sent as "authorization: Bearer TOKEN" when set
};

void Authorize(const Api& api, grpc::ClientContext& context) {
  if (!api.token.empty()) context.AddMetadata("authorization", "Bearer " + api.token);
}

struct Case {
  std::string name;
  std::function<grpc::Status(Api&)> call;
  grpc::StatusCode code;
  // The message must contain this: the field (or, for NOT_FOUND, what was not found).
  std::string names;
};

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(20);
}

template <typename Request, typename Response>
using UnaryMethod = grpc::Status (v1::Coordinator::Stub::*)(grpc::ClientContext*, const Request&,
                                                            Response*);
template <typename Request, typename Response>
using StreamMethod = std::unique_ptr<grpc::ClientReader<Response>> (v1::Coordinator::Stub::*)(
    grpc::ClientContext*, const Request&);

template <typename Request, typename Response>
std::function<grpc::Status(Api&)> Unary(UnaryMethod<Request, Response> method, Request request) {
  return [method, request](Api& api) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    Authorize(api, context);
    Response response;
    return (api.stub.get()->*method)(&context, request, &response);
  };
}

template <typename Request, typename Response>
std::function<grpc::Status(Api&)> Streaming(StreamMethod<Request, Response> method,
                                            Request request) {
  return [method, request](Api& api) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    Authorize(api, context);
    auto reader = (api.stub.get()->*method)(&context, request);
    Response response;
    while (reader->Read(&response)) {
    }
    return reader->Finish();
  };
}

// The worker link: `messages` written in turn, then the stream's end awaited.
std::function<grpc::Status(Api&)> Link(std::vector<v1::WorkerMessage> messages) {
  return [messages](Api& api) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    Authorize(api, context);
    auto stream = api.link->Attach(&context);
    for (const auto& m : messages) {
      if (!stream->Write(m)) break;
    }
    stream->WritesDone();
    v1::CoordinatorMessage reply;
    while (stream->Read(&reply)) {
    }
    return stream->Finish();
  };
}

// Bytes that are no valid encoding of the method's request, through the generic stub.
std::function<grpc::Status(Api&)> RawBytes(std::string method, std::string bytes) {
  return [method, bytes](Api& api) {
    grpc::GenericStub generic(api.channel);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
    generic.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                      [&](grpc::Status s) {
                        std::lock_guard<std::mutex> lock(mu);
                        status = std::move(s);
                        done = true;
                        cv.notify_one();
                      });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    return status;
  };
}

// The worker link with `messages` as bytes, written in turn (so that they need not be valid
// encodings), then the stream's end awaited; `replies` gets what the coordinator sent.
grpc::Status RawLink(Api& api, const std::vector<std::string>& messages,
                     std::vector<v1::CoordinatorMessage>* replies = nullptr) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  Authorize(api, context);
  const grpc::internal::RpcMethod method("/stoke.v1.WorkerLink/Attach",
                                         grpc::internal::RpcMethod::BIDI_STREAMING);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          api.channel.get(), method, &context));
  grpc::ByteBuffer reply;
  for (const auto& bytes : messages) {
    grpc::Slice slice(bytes);
    if (!stream->Write(grpc::ByteBuffer(&slice, 1))) break;
    // One reply (registered) to each registration before the next message goes.
    if (replies != nullptr && replies->empty() && stream->Read(&reply)) {
      replies->emplace_back();
      std::vector<grpc::Slice> slices;
      std::string wire;
      if (reply.Dump(&slices).ok()) {
        for (const auto& s : slices) {
          wire.append(reinterpret_cast<const char*>(s.begin()), s.size());
        }
      }
      replies->back().ParseFromString(wire);
    }
  }
  stream->WritesDone();
  while (stream->Read(&reply)) {
  }
  return stream->Finish();
}

v1::JobSpec ValidSpec() {
  v1::JobSpec spec;
  spec.set_name("valid");
  spec.mutable_model()->mutable_mlp();
  spec.mutable_data()->mutable_synthetic();
  spec.mutable_training()->set_steps(10);
  return spec;
}

Case Submit(std::string name, std::function<void(v1::JobSpec&)> edit, grpc::StatusCode code,
            std::string names) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = ValidSpec();
  edit(*request.mutable_spec());
  return {"SubmitJob " + name, Unary(&v1::Coordinator::Stub::SubmitJob, request), code,
          std::move(names)};
}

Case SubmitInvalid(std::string field, std::function<void(v1::JobSpec&)> edit) {
  std::string names = "spec." + field;
  return Submit(field, std::move(edit), grpc::StatusCode::INVALID_ARGUMENT, std::move(names));
}

// ------------------------------------------------------------------ fields by reflection

// A path from JobSpec down to one of its scalar, string, enum or repeated fields.
using FieldPath = std::vector<const FieldDescriptor*>;

std::string PathName(const FieldPath& path) {
  std::string name;
  for (const auto* f : path) name += (name.empty() ? "" : ".") + f->name();
  return name;
}

// model.python.args (a google.protobuf.Struct, free-form keyword arguments) is not walked
// into: its own cases are below.
void CollectFields(const Descriptor* message, FieldPath& prefix, std::vector<FieldPath>& out) {
  for (int i = 0; i < message->field_count(); ++i) {
    const FieldDescriptor* field = message->field(i);
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
        field->message_type()->file()->package() == "google.protobuf") {
      continue;
    }
    prefix.push_back(field);
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !field->is_repeated()) {
      CollectFields(field->message_type(), prefix, out);
    } else {
      out.push_back(prefix);
    }
    prefix.pop_back();
  }
}

std::vector<FieldPath> SpecFields() {
  std::vector<FieldPath> out;
  FieldPath prefix;
  CollectFields(v1::JobSpec::descriptor(), prefix, out);
  return out;
}

// The message holding the path's last field, made present (choosing its oneof branch).
Message* Holder(Message& spec, const FieldPath& path) {
  Message* m = &spec;
  for (size_t i = 0; i + 1 < path.size(); ++i) m = m->GetReflection()->MutableMessage(m, path[i]);
  return m;
}

std::vector<Case> EnumCases() {
  std::vector<Case> cases;
  for (const FieldPath& path : SpecFields()) {
    const FieldDescriptor* field = path.back();
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_ENUM) continue;
    for (int value : {999, -1, std::numeric_limits<int32_t>::max()}) {
      cases.push_back(SubmitInvalid(PathName(path), [path, field, value](v1::JobSpec& spec) {
        Message* holder = Holder(spec, path);
        if (field->is_repeated()) {
          holder->GetReflection()->AddEnumValue(holder, field, value);
        } else {
          holder->GetReflection()->SetEnumValue(holder, field, value);
        }
      }));
      cases.back().name += absl::StrCat(" = ", value);
    }
  }
  return cases;
}

std::vector<Case> OversizedStringCases() {
  std::vector<Case> cases;
  for (const FieldPath& path : SpecFields()) {
    const FieldDescriptor* field = path.back();
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_STRING) continue;
    for (size_t bytes : {v1::kMaxPathBytes + 1, size_t{60000}}) {
      cases.push_back(SubmitInvalid(PathName(path), [path, field, bytes](v1::JobSpec& spec) {
        Message* holder = Holder(spec, path);
        if (field->is_repeated()) {
          holder->GetReflection()->AddString(holder, field, std::string(bytes, 'a'));
        } else {
          holder->GetReflection()->SetString(holder, field, std::string(bytes, 'a'));
        }
      }));
      cases.back().name += absl::StrCat(" of ", bytes, " bytes");
    }
  }
  return cases;
}

// A factory's keyword arguments are capped as every list and string of a spec is.
std::vector<Case> PythonArgsCases() {
  std::vector<Case> cases;
  cases.push_back(SubmitInvalid("model.python.args.fields", [](v1::JobSpec& spec) {
    auto& fields = *spec.mutable_model()->mutable_python()->mutable_args()->mutable_fields();
    for (int i = 0; i <= v1::kMaxRepeatedElements; ++i) {
      fields["k" + std::to_string(i)].set_number_value(i);
    }
  }));
  cases.back().name += " with too many keys";
  cases.push_back(SubmitInvalid("model.python.args", [](v1::JobSpec& spec) {
    auto& fields = *spec.mutable_model()->mutable_python()->mutable_args()->mutable_fields();
    for (int i = 0; i < 8; ++i) {
      fields["k" + std::to_string(i)].set_string_value(std::string(4000, 'a'));
    }
  }));
  cases.back().name += " of 32 kB";
  return cases;
}

std::vector<Case> OversizedListCases() {
  std::vector<Case> cases;
  for (const FieldPath& path : SpecFields()) {
    const FieldDescriptor* field = path.back();
    if (!field->is_repeated()) continue;
    for (int n : {v1::kMaxRepeatedElements + 1, 10000}) {
      cases.push_back(SubmitInvalid(PathName(path), [path, field, n](v1::JobSpec& spec) {
        Message* holder = Holder(spec, path);
        for (int i = 0; i < n; ++i) {
          switch (field->cpp_type()) {
            case FieldDescriptor::CPPTYPE_UINT32:
              holder->GetReflection()->AddUInt32(holder, field, 1);
              break;
            case FieldDescriptor::CPPTYPE_ENUM:
              holder->GetReflection()->AddEnumValue(holder, field, 1);
              break;
            case FieldDescriptor::CPPTYPE_STRING:
              holder->GetReflection()->AddString(holder, field, "x");
              break;
            default:
              ADD_FAILURE() << "no filler for " << field->full_name();
              return;
          }
        }
      }));
      cases.back().name += absl::StrCat(" with ", n, " entries");
    }
  }
  return cases;
}

// ------------------------------------------------------------------ spec rules by table

std::vector<Case> SpecRuleCases() {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr uint32_t kMax32 = std::numeric_limits<uint32_t>::max();
  using S = v1::JobSpec;
  std::vector<Case> cases = {
      SubmitInvalid("model", [](S& s) { s.clear_model(); }),
      SubmitInvalid("data", [](S& s) { s.clear_data(); }),
      SubmitInvalid("training", [](S& s) { s.clear_training(); }),
      SubmitInvalid("training.steps", [](S& s) { s.mutable_training()->set_steps(0); }),
      SubmitInvalid("training.epochs", [](S& s) { s.mutable_training()->set_epochs(0); }),
      SubmitInvalid("name", [](S& s) { s.set_name(std::string(201, 'n')); }),
      SubmitInvalid("max_restarts", [](S& s) { s.set_max_restarts(101); }),
      SubmitInvalid("max_restarts", [](S& s) { s.set_max_restarts(kMax32); }),
      SubmitInvalid("resources.gpus", [](S& s) { s.mutable_resources()->set_gpus(4097); }),
      SubmitInvalid("resources.gpus", [](S& s) { s.mutable_resources()->set_gpus(kMax32); }),
      SubmitInvalid("distributed.timeout_seconds",
                    [](S& s) { s.mutable_distributed()->set_timeout_seconds(3601); }),
      SubmitInvalid("distributed.bucket_mb",
                    [](S& s) { s.mutable_distributed()->set_bucket_mb(kMax32); }),
      SubmitInvalid("training.batch_size",
                    [](S& s) { s.mutable_training()->set_batch_size((1u << 20) + 1); }),
      SubmitInvalid("training.batch_size",
                    [](S& s) { s.mutable_training()->set_batch_size(kMax32); }),
      SubmitInvalid("training.batch_size",
                    [](S& s) {
                      s.mutable_training()->set_batch_size(8);
                      s.mutable_training()->set_batch_size_auto(true);
                    }),
      SubmitInvalid("training.grad_accum_steps",
                    [](S& s) { s.mutable_training()->set_grad_accum_steps(kMax32); }),
      SubmitInvalid("training.effective_batch_size",
                    [](S& s) { s.mutable_training()->set_effective_batch_size(64); }),
      SubmitInvalid("training.effective_batch_size",
                    [](S& s) {
                      s.mutable_training()->set_batch_size_auto(true);
                      s.mutable_training()->set_effective_batch_size(kMax32);
                    }),
      SubmitInvalid("training.grad_accum_steps",
                    [](S& s) {
                      s.mutable_training()->set_batch_size_auto(true);
                      s.mutable_training()->set_effective_batch_size(64);
                      s.mutable_training()->set_grad_accum_steps(4);
                    }),
      SubmitInvalid("training.loss_scale",
                    [](S& s) { s.mutable_training()->mutable_loss_scale()->set_initial(8); }),
      SubmitInvalid("data.synthetic.features",
                    [](S& s) { s.mutable_data()->mutable_synthetic()->set_features(kMax32); }),
      SubmitInvalid("data.synthetic.num_classes",
                    [](S& s) { s.mutable_data()->mutable_synthetic()->set_num_classes(1); }),
      SubmitInvalid("data.synthetic.num_classes",
                    [](S& s) { s.mutable_data()->mutable_synthetic()->set_num_classes(kMax32); }),
      SubmitInvalid("data.synthetic.image_shape",
                    [](S& s) {
                      s.mutable_data()->mutable_synthetic()->add_image_shape(3);
                      s.mutable_data()->mutable_synthetic()->add_image_shape(32);
                    }),
      SubmitInvalid("data.synthetic.image_shape",
                    [](S& s) {
                      for (uint32_t d : {3u, 0u, 32u})
                        s.mutable_data()->mutable_synthetic()->add_image_shape(d);
                    }),
      SubmitInvalid("data.synthetic.image_shape",
                    [](S& s) {
                      for (uint32_t d : {3u, kMax32, kMax32})
                        s.mutable_data()->mutable_synthetic()->add_image_shape(d);
                    }),
      SubmitInvalid("data.synthetic.vocab_size",
                    [](S& s) { s.mutable_data()->mutable_synthetic()->set_vocab_size(kMax32); }),
      SubmitInvalid("data.synthetic.context",
                    [](S& s) { s.mutable_data()->mutable_synthetic()->set_context(64); }),
      SubmitInvalid("data.synthetic.vocab_size",
                    [](S& s) {
                      s.mutable_data()->mutable_synthetic()->set_vocab_size(256);
                      for (uint32_t d : {3u, 32u, 32u})
                        s.mutable_data()->mutable_synthetic()->add_image_shape(d);
                    }),
      SubmitInvalid("data.loader.threads",
                    [](S& s) { s.mutable_data()->mutable_loader()->set_threads(kMax32); }),
      SubmitInvalid("data.loader.prefetch",
                    [](S& s) { s.mutable_data()->mutable_loader()->set_prefetch(65); }),
      SubmitInvalid("data.augment.crop_padding",
                    [](S& s) { s.mutable_data()->mutable_augment()->set_crop_padding(kMax32); }),
      SubmitInvalid("model.mlp.hidden[1]",
                    [](S& s) {
                      s.mutable_model()->mutable_mlp()->add_hidden(8);
                      s.mutable_model()->mutable_mlp()->add_hidden(0);
                    }),
      SubmitInvalid("model.mlp.hidden[0]",
                    [](S& s) { s.mutable_model()->mutable_mlp()->add_hidden(kMax32); }),
      SubmitInvalid("model.mlp.input_dim",
                    [](S& s) { s.mutable_model()->mutable_mlp()->set_input_dim(7); }),
      SubmitInvalid("model.mlp.num_classes",
                    [](S& s) { s.mutable_model()->mutable_mlp()->set_num_classes(3); }),
      SubmitInvalid("model.cnn.channels[0]",
                    [](S& s) { s.mutable_model()->mutable_cnn()->add_channels(0); }),
      SubmitInvalid("model.cnn.channels[0]",
                    [](S& s) { s.mutable_model()->mutable_cnn()->add_channels(kMax32); }),
      SubmitInvalid("model.cnn.channels",
                    [](S& s) {
                      for (int i = 0; i < 9; ++i) s.mutable_model()->mutable_cnn()->add_channels(4);
                    }),
      SubmitInvalid("model.cnn", [](S& s) { s.mutable_model()->mutable_cnn(); }),
      SubmitInvalid("model.resnet", [](S& s) { s.mutable_model()->mutable_resnet(); }),
      SubmitInvalid("model.gpt", [](S& s) { s.mutable_model()->mutable_gpt(); }),
      SubmitInvalid("model.resnet.depth",
                    [](S& s) { s.mutable_model()->mutable_resnet()->set_depth(19); }),
      SubmitInvalid("model.resnet.depth",
                    [](S& s) { s.mutable_model()->mutable_resnet()->set_depth(kMax32); }),
      SubmitInvalid("model.gpt.layers",
                    [](S& s) { s.mutable_model()->mutable_gpt()->set_layers(kMax32); }),
      SubmitInvalid("model.gpt.width",
                    [](S& s) { s.mutable_model()->mutable_gpt()->set_width(kMax32); }),
      SubmitInvalid("model.gpt.heads",
                    [](S& s) { s.mutable_model()->mutable_gpt()->set_heads(7); }),
      SubmitInvalid("model.gpt.heads",
                    [](S& s) { s.mutable_model()->mutable_gpt()->set_heads(kMax32); }),
      SubmitInvalid("model.torchscript.path",
                    [](S& s) { s.mutable_model()->mutable_torchscript(); }),
      SubmitInvalid("model.torchscript.path",
                    [](S& s) { s.mutable_model()->mutable_torchscript()->set_path("model.pt"); }),
      SubmitInvalid("optimizer.sgd.nesterov",
                    [](S& s) { s.mutable_optimizer()->mutable_sgd()->set_nesterov(true); }),
      SubmitInvalid("request_id", [](S&) {}),  // replaced below
  };
  cases.pop_back();
  // Jobs that cannot allocate (model_size.h).
  cases.push_back(SubmitInvalid("model.mlp.hidden[1]", [](S& s) {
    s.mutable_model()->mutable_mlp()->add_hidden(1u << 20);
    s.mutable_model()->mutable_mlp()->add_hidden(1u << 20);
  }));
  cases.push_back(SubmitInvalid("model.mlp", [](S& s) {
    for (uint32_t d : {4096u, 4096u, 4096u})
      s.mutable_data()->mutable_synthetic()->add_image_shape(d);
  }));
  cases.push_back(SubmitInvalid("model.gpt", [](S& s) {
    s.mutable_model()->mutable_gpt()->set_width(4096);
    s.mutable_model()->mutable_gpt()->set_heads(32);
    s.mutable_model()->mutable_gpt()->set_layers(64);
    s.mutable_data()->mutable_synthetic()->set_vocab_size(50257);
  }));
  cases.push_back(SubmitInvalid("training.batch_size", [](S& s) {
    s.mutable_model()->mutable_resnet();
    for (uint32_t d : {3u, 4096u, 4096u}) s.mutable_data()->mutable_synthetic()->add_image_shape(d);
    s.mutable_data()->mutable_synthetic()->set_samples_per_epoch(1u << 20);
    s.mutable_training()->set_batch_size(4096);
  }));
  cases.push_back({"SubmitJob without spec",
                   Unary(&v1::Coordinator::Stub::SubmitJob, v1::SubmitJobRequest()),
                   grpc::StatusCode::INVALID_ARGUMENT, "spec"});
  {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = ValidSpec();
    request.set_request_id(std::string(v1::kMaxIdBytes + 1, 'r'));
    cases.push_back({"SubmitJob request_id too long",
                     Unary(&v1::Coordinator::Stub::SubmitJob, request),
                     grpc::StatusCode::INVALID_ARGUMENT, "request_id"});
  }
  // Fractions and rates: each field with the values outside its range.
  struct FloatField {
    std::string field;
    std::function<void(S&, double)> set;
    std::vector<double> bad;
  };
  const std::vector<FloatField> floats = {
      {"model.mlp.dropout",
       [](S& s, double v) { s.mutable_model()->mutable_mlp()->set_dropout(v); },
       {-0.1, 1.0, kNaN, kInf}},
      {"model.cnn.dropout",
       [](S& s, double v) { s.mutable_model()->mutable_cnn()->set_dropout(v); },
       {-0.1, 1.0, kNaN}},
      {"model.gpt.dropout",
       [](S& s, double v) { s.mutable_model()->mutable_gpt()->set_dropout(v); },
       {1.5, kNaN}},
      {"optimizer.lr",
       [](S& s, double v) { s.mutable_optimizer()->set_lr(v); },
       {-1e-3, kNaN, kInf, -kInf, 1e308, 11.0}},
      {"optimizer.weight_decay",
       [](S& s, double v) { s.mutable_optimizer()->set_weight_decay(v); },
       {-1, kNaN, kInf, 1e300}},
      {"optimizer.grad_clip_norm",
       [](S& s, double v) { s.mutable_optimizer()->set_grad_clip_norm(v); },
       {-1, kNaN, kInf}},
      {"optimizer.min_lr_ratio",
       [](S& s, double v) { s.mutable_optimizer()->set_min_lr_ratio(v); },
       {-0.5, 1.5, kNaN}},
      {"optimizer.adamw.beta1",
       [](S& s, double v) { s.mutable_optimizer()->mutable_adamw()->set_beta1(v); },
       {1.0, -0.1, kNaN}},
      {"optimizer.adamw.beta2",
       [](S& s, double v) { s.mutable_optimizer()->mutable_adamw()->set_beta2(v); },
       {1.0, kNaN}},
      {"optimizer.adamw.eps",
       [](S& s, double v) { s.mutable_optimizer()->mutable_adamw()->set_eps(v); },
       {0, -1e-8, kInf, kNaN}},
      {"optimizer.sgd.momentum",
       [](S& s, double v) { s.mutable_optimizer()->mutable_sgd()->set_momentum(v); },
       {1.0, -0.5, kNaN}},
      {"training.loss_scale.initial",
       [](S& s, double v) {
         s.mutable_training()->set_precision(v1::PRECISION_FP16);
         s.mutable_training()->mutable_loss_scale()->set_initial(v);
       },
       {-1, kNaN, kInf}},
  };
  for (const auto& f : floats) {
    for (double v : f.bad) {
      cases.push_back(SubmitInvalid(f.field, [set = f.set, v](S& s) { set(s, v); }));
      cases.back().name += absl::StrCat(" = ", v);
    }
  }
  return cases;
}

// ------------------------------------------------------------------ data files

std::vector<Case> DataCases(const std::string& root, const std::string& outside) {
  using S = v1::JobSpec;
  auto tokens = [](std::string path) {
    return [path](S& s) {
      s.mutable_model()->mutable_gpt();
      s.mutable_data()->mutable_tokens()->set_train_path(path);
    };
  };
  auto mnist = [](std::string path) {
    return [path](S& s) { s.mutable_data()->mutable_mnist()->set_path(path); };
  };
  auto cifar = [](std::string path) {
    return [path](S& s) {
      s.mutable_model()->mutable_cnn();
      s.mutable_data()->mutable_cifar10()->set_path(path);
    };
  };
  std::vector<Case> cases = {
      SubmitInvalid("data.tokens.train_path", tokens("")),
      SubmitInvalid("data.tokens.train_path", tokens("tokens.bin")),
      SubmitInvalid("data.tokens.train_path", tokens(root + "/missing.bin")),
      SubmitInvalid("data.tokens.train_path", tokens(root + "/fifo.bin")),
      SubmitInvalid("data.tokens.train_path", tokens(root + "/folder")),
      SubmitInvalid("data.tokens.train_path", tokens(root + "/empty.bin")),
      SubmitInvalid("data.tokens.train_path", tokens(root + "/odd.bin")),
      SubmitInvalid("data.tokens.train_path", tokens(root + "/link-out.bin")),
      SubmitInvalid("data.tokens.train_path", tokens(outside + "/tokens.bin")),
      SubmitInvalid("data.tokens.train_path", tokens(root + "/../outside/tokens.bin")),
      SubmitInvalid("data.tokens.train_path",
                    tokens(root + "/tokens.bin" + std::string(1, '\0') + "/../../etc/passwd")),
      SubmitInvalid("data.tokens.val_path",
                    [t = tokens(root + "/tokens.bin"), root](S& s) {
                      t(s);
                      s.mutable_data()->mutable_tokens()->set_val_path(root + "/fifo.bin");
                    }),
      SubmitInvalid("data.tokens.train_path",  // ids above the vocabulary
                    [t = tokens(root + "/tokens.bin")](S& s) {
                      t(s);
                      s.mutable_data()->mutable_tokens()->set_vocab_size(2);
                    }),
      SubmitInvalid("model.gpt.vocab_size",
                    [t = tokens(root + "/tokens.bin")](S& s) {
                      t(s);
                      s.mutable_model()->mutable_gpt()->set_vocab_size(10);
                    }),
      SubmitInvalid("model.gpt.context",
                    [t = tokens(root + "/tokens.bin")](S& s) {
                      t(s);
                      s.mutable_data()->mutable_tokens()->set_context(64);
                      s.mutable_model()->mutable_gpt()->set_context(8);
                    }),
      SubmitInvalid("model.mlp", tokens(root + "/tokens.bin")),  // replaced below
      SubmitInvalid("data.mnist.path", mnist("")),
      SubmitInvalid("data.mnist.path", mnist(root + "/missing")),
      SubmitInvalid("data.mnist.path", mnist(root + "/tokens.bin")),
      SubmitInvalid("data.mnist.path", mnist(root + "/folder")),
      SubmitInvalid("data.mnist.path", mnist(root + "/bad-mnist")),
      SubmitInvalid("data.mnist.path", mnist("/etc")),
      SubmitInvalid("data.cifar10.path", cifar(root + "/folder")),
      SubmitInvalid("data.cifar10.path", cifar(root + "/bad-cifar")),
      SubmitInvalid("data.cifar10.path", cifar("relative/cifar")),
      SubmitInvalid("model.torchscript.path",
                    [root](S& s) {
                      s.mutable_model()->mutable_torchscript()->set_path(root + "/missing.pt");
                    }),
      SubmitInvalid("model.torchscript.path",
                    [outside](S& s) {
                      s.mutable_model()->mutable_torchscript()->set_path(outside + "/tokens.bin");
                    }),
  };
  cases[15] = SubmitInvalid("model.mlp", [t = tokens(root + "/tokens.bin")](S& s) {
    t(s);
    s.mutable_model()->mutable_mlp();
  });
  return cases;
}

// ------------------------------------------------------------------ ids and pages

std::vector<std::string> MalformedIds() {
  return {"01",   "013", "+1",  "-1",   "0",    "1e3",      " 1",          "1 ",
          "0x1",  "abc", "1/2", "../1", "\x01", "\xd9\xa1", "99999999999", "184467440737095516160",
          "1\n2", "%31"};
}

std::vector<Case> IdCases() {
  std::vector<Case> cases;
  const std::string too_long(v1::kMaxIdBytes + 1, '1');
  const std::string huge(5 << 20, '7');
  struct Id {
    std::string value;
    grpc::StatusCode code;
    std::string names;
  };
  std::vector<Id> ids = {{"", grpc::StatusCode::INVALID_ARGUMENT, "id"},
                         {too_long, grpc::StatusCode::INVALID_ARGUMENT, "id"},
                         {huge, grpc::StatusCode::INVALID_ARGUMENT, "id"}};
  for (const auto& id : MalformedIds()) ids.push_back({id, grpc::StatusCode::NOT_FOUND, "job"});
  for (const Id& id : ids) {
    const std::string label =
        absl::StrCat(" id of ", id.value.size(), " bytes (", id.value.substr(0, 8), ")");
    v1::GetJobRequest get;
    get.set_id(id.value);
    cases.push_back(
        {"GetJob" + label, Unary(&v1::Coordinator::Stub::GetJob, get), id.code, id.names});
    v1::CancelJobRequest cancel;
    cancel.set_id(id.value);
    cases.push_back(
        {"CancelJob" + label, Unary(&v1::Coordinator::Stub::CancelJob, cancel), id.code, id.names});
    v1::WatchJobRequest watch;
    watch.set_id(id.value);
    cases.push_back({"WatchJob" + label, Streaming(&v1::Coordinator::Stub::WatchJob, watch),
                     id.code, id.names});
    v1::ListCheckpointsRequest checkpoints;
    checkpoints.set_id(id.value);
    cases.push_back({"ListCheckpoints" + label,
                     Unary(&v1::Coordinator::Stub::ListCheckpoints, checkpoints), id.code,
                     id.names});
    v1::DownloadModelRequest download;
    download.set_id(id.value);
    download.set_step(1);
    cases.push_back({"DownloadModel" + label,
                     Streaming(&v1::Coordinator::Stub::DownloadModel, download), id.code,
                     id.names});
  }
  return cases;
}

// Calls on the stored job whose other fields are wrong.
std::vector<Case> StoredJobCases() {
  std::vector<Case> cases;
  auto on_job = [](std::function<grpc::Status(Api&, const std::string&)> call) {
    return [call](Api& api) { return call(api, api.job_id); };
  };
  for (size_t bytes : {v1::kMaxReasonBytes + 1, size_t{10} << 20}) {
    cases.push_back({absl::StrCat("CancelJob reason of ", bytes, " bytes"),
                     on_job([bytes](Api& api, const std::string& id) {
                       v1::CancelJobRequest request;
                       request.set_id(id);
                       request.set_reason(std::string(bytes, 'r'));
                       return Unary(&v1::Coordinator::Stub::CancelJob, request)(api);
                     }),
                     grpc::StatusCode::INVALID_ARGUMENT, "reason"});
  }
  for (uint64_t step : {uint64_t{1}, std::numeric_limits<uint64_t>::max()}) {
    cases.push_back({absl::StrCat("DownloadModel step ", step, " of a job without checkpoints"),
                     on_job([step](Api& api, const std::string& id) {
                       v1::DownloadModelRequest request;
                       request.set_id(id);
                       request.set_step(step);
                       return Streaming(&v1::Coordinator::Stub::DownloadModel, request)(api);
                     }),
                     grpc::StatusCode::FAILED_PRECONDITION, "checkpoints"});
  }
  for (uint64_t from : {uint64_t{1} << 63, std::numeric_limits<uint64_t>::max(), uint64_t{1000}}) {
    cases.push_back({absl::StrCat("WatchJob from_seq ", from, " beyond the job's events"),
                     on_job([from](Api& api, const std::string& id) {
                       v1::WatchJobRequest request;
                       request.set_id(id);
                       request.set_from_seq(from);
                       return Streaming(&v1::Coordinator::Stub::WatchJob, request)(api);
                     }),
                     grpc::StatusCode::OUT_OF_RANGE, "from_seq"});
  }
  return cases;
}

std::vector<Case> PageCases() {
  std::vector<Case> cases;
  const std::vector<std::string> tokens = {"abc",
                                           "-1",
                                           "1.5",
                                           "0x10",
                                           " 5",
                                           "5 ",
                                           "\x01",
                                           "1e9",
                                           "99999999999999999999999",
                                           std::string(1 << 20, '9')};
  for (const auto& token : tokens) {
    const std::string label =
        absl::StrCat(" page_token of ", token.size(), " bytes (", token.substr(0, 8), ")");
    v1::ListJobsRequest jobs;
    jobs.set_page_token(token);
    cases.push_back({"ListJobs" + label, Unary(&v1::Coordinator::Stub::ListJobs, jobs),
                     grpc::StatusCode::INVALID_ARGUMENT, "page_token"});
    v1::ListAuditRequest audit;
    audit.set_page_token(token);
    cases.push_back({"ListAudit" + label, Unary(&v1::Coordinator::Stub::ListAudit, audit),
                     grpc::StatusCode::INVALID_ARGUMENT, "page_token"});
  }
  for (int state : {0, 9, 999, -1}) {
    v1::ListJobsRequest request;
    request.add_states(static_cast<v1::JobState>(state));
    cases.push_back({absl::StrCat("ListJobs states [", state, "]"),
                     Unary(&v1::Coordinator::Stub::ListJobs, request),
                     grpc::StatusCode::INVALID_ARGUMENT, "states"});
  }
  {
    v1::ListJobsRequest request;
    for (int i = 0; i < 100000; ++i) request.add_states(v1::JOB_STATE_PENDING);
    cases.push_back({"ListJobs with 100000 states",
                     Unary(&v1::Coordinator::Stub::ListJobs, request),
                     grpc::StatusCode::INVALID_ARGUMENT, "states"});
  }
  for (size_t bytes : {v1::kMaxIdBytes + 1, size_t{5} << 20}) {
    v1::ListJobsRequest request;
    request.set_owner(std::string(bytes, 'o'));
    cases.push_back({absl::StrCat("ListJobs owner of ", bytes, " bytes"),
                     Unary(&v1::Coordinator::Stub::ListJobs, request),
                     grpc::StatusCode::INVALID_ARGUMENT, "owner"});
  }
  return cases;
}

// ------------------------------------------------------------------ the worker link

v1::WorkerMessage Registration(const std::string& id) {
  v1::WorkerMessage m;
  m.mutable_register_()->set_worker_id(id);
  m.mutable_register_()->set_host("host");
  m.mutable_register_()->mutable_device()->set_type(v1::DEVICE_TYPE_CPU);
  return m;
}

std::vector<Case> WorkerLinkCases() {
  std::vector<Case> cases;
  // A first message gRPC cannot decode: a string in it that is no UTF-8.
  for (const std::string field : {"host", "device.name"}) {
    v1::WorkerMessage m = Registration("w-utf8");
    if (field == "host") m.mutable_register_()->set_host("MARKER");
    if (field == "device.name") m.mutable_register_()->mutable_device()->set_name("MARKER");
    std::string bytes = m.SerializeAsString();
    bytes.replace(bytes.find("MARKER"), 6, std::string("MA\xffKER"));
    cases.push_back({"Attach register." + field + " invalid UTF-8",
                     [bytes](Api& api) { return RawLink(api, {bytes}); },
                     grpc::StatusCode::INVALID_ARGUMENT,
                     "register." + field + ": not valid UTF-8"});
  }
  cases.push_back({"Attach with a truncated message",
                   [](Api& api) { return RawLink(api, {std::string("\x0a\x7f\x31")}); },
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "request: not a valid encoding of stoke.v1.WorkerMessage"});
  auto refused = [&](std::string name, std::vector<v1::WorkerMessage> messages,
                     grpc::StatusCode code, std::string names) {
    cases.push_back({"Attach " + name, Link(std::move(messages)), code, std::move(names)});
  };
  v1::WorkerMessage heartbeat;
  heartbeat.mutable_heartbeat();
  refused("heartbeat before register", {heartbeat}, grpc::StatusCode::FAILED_PRECONDITION,
          "register");
  refused("message of no kind first", {v1::WorkerMessage()}, grpc::StatusCode::FAILED_PRECONDITION,
          "register");
  v1::WorkerMessage report;
  report.mutable_report()->set_job_id("1");
  refused("report before register", {report}, grpc::StatusCode::FAILED_PRECONDITION, "register");
  refused("empty worker_id", {Registration("")}, grpc::StatusCode::INVALID_ARGUMENT,
          "register.worker_id");
  for (int type : {0, 3, 999, -1}) {
    v1::WorkerMessage m = Registration(absl::StrCat("w-type-", type));
    m.mutable_register_()->mutable_device()->set_type(static_cast<v1::DeviceType>(type));
    refused(absl::StrCat("device.type ", type), {m}, grpc::StatusCode::INVALID_ARGUMENT,
            "register.device.type");
  }
  using Setter = std::function<void(v1::RegisterWorker&, const std::string&)>;
  const std::vector<std::pair<std::string, Setter>> strings = {
      {"worker_id", [](v1::RegisterWorker& r, const std::string& v) { r.set_worker_id(v); }},
      {"host", [](v1::RegisterWorker& r, const std::string& v) { r.set_host(v); }},
      {"version", [](v1::RegisterWorker& r, const std::string& v) { r.set_version(v); }},
      {"advertise_address",
       [](v1::RegisterWorker& r, const std::string& v) { r.set_advertise_address(v); }},
      {"device.name",
       [](v1::RegisterWorker& r, const std::string& v) { r.mutable_device()->set_name(v); }},
      {"device.uuid",
       [](v1::RegisterWorker& r, const std::string& v) { r.mutable_device()->set_uuid(v); }},
  };
  for (const auto& [field, set] : strings) {
    for (size_t bytes : {v1::kMaxIdBytes + 1, size_t{5} << 20}) {
      v1::WorkerMessage m = Registration("w-long-" + field);
      set(*m.mutable_register_(), std::string(bytes, 'x'));
      refused(absl::StrCat(field, " of ", bytes, " bytes"), {m}, grpc::StatusCode::INVALID_ARGUMENT,
              "register." + field);
    }
  }
  return cases;
}

// Every method, sent bytes that parse as no request: a field announcing more bytes than
// follow, and a string that is not UTF-8. Protobuf refuses both without saying where; the
// coordinator's handlers walk the bytes and name the field.
std::vector<Case> UnparsableCases() {
  std::vector<Case> cases;
  const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      v1::Coordinator::service_full_name());
  for (int i = 0; i < service->method_count(); ++i) {
    const auto* method = service->method(i);
    const std::string path = absl::StrCat("/", service->full_name(), "/", method->name());
    // A field 1 announcing 127 bytes and holding one.
    Case truncated;
    truncated.name = path + " truncated";
    truncated.call = RawBytes(path, std::string("\x0a\x7f\x31"));
    truncated.code = grpc::StatusCode::INVALID_ARGUMENT;
    truncated.names = "request: not a valid encoding of " + method->input_type()->full_name();
    cases.push_back(std::move(truncated));
    // Every top-level string field, holding bytes that are no UTF-8.
    for (int f = 0; f < method->input_type()->field_count(); ++f) {
      const FieldDescriptor* field = method->input_type()->field(f);
      if (field->type() != FieldDescriptor::TYPE_STRING) continue;
      const std::string tag(1, static_cast<char>(field->number() << 3 | 2));
      Case invalid;
      invalid.name = absl::StrCat(path, " ", field->name(), " invalid UTF-8");
      invalid.call = RawBytes(path, tag + std::string("\x02\xff\xfe"));
      invalid.code = grpc::StatusCode::INVALID_ARGUMENT;
      invalid.names = field->name() + ": not valid UTF-8";
      cases.push_back(std::move(invalid));
    }
  }
  return cases;
}

// `request` encoded, with the string `marker` it holds replaced by as many bytes that are
// no UTF-8 (one lone continuation byte after valid text, an overlong slash, a surrogate).
std::string WithInvalidUtf8(const Message& request, const std::string& marker,
                            const std::string& invalid) {
  std::string bytes = request.SerializeAsString();
  const size_t at = bytes.find(marker);
  EXPECT_NE(at, std::string::npos) << marker;
  EXPECT_EQ(marker.size(), invalid.size());
  if (at != std::string::npos) bytes.replace(at, marker.size(), invalid);
  return bytes;
}

// Strings that are no UTF-8 in nested fields of valid requests, for the streaming methods
// too: the message names the whole path.
std::vector<Case> NestedInvalidUtf8Cases() {
  std::vector<Case> cases;
  const std::string marker = "MARKER";
  const std::vector<std::string> invalid = {std::string("ok\x80ok!"), std::string("ab\xc0\xaf!!"),
                                            std::string("a\xed\xa0\x80!!")};
  using Set = std::function<void(v1::JobSpec&, const std::string&)>;
  const std::vector<std::pair<std::string, Set>> spec_fields = {
      {"spec.name", [](v1::JobSpec& s, const std::string& v) { s.set_name(v); }},
      {"spec.data.tokens.train_path",
       [](v1::JobSpec& s, const std::string& v) {
         s.mutable_data()->mutable_tokens()->set_train_path(v);
       }},
      {"spec.data.mnist.path",
       [](v1::JobSpec& s, const std::string& v) {
         s.mutable_data()->mutable_mnist()->set_path(v);
       }},
      {"spec.model.torchscript.path",
       [](v1::JobSpec& s, const std::string& v) {
         s.mutable_model()->mutable_torchscript()->set_path(v);
       }},
  };
  const std::string submit = "/stoke.v1.Coordinator/SubmitJob";
  for (size_t i = 0; i < spec_fields.size(); ++i) {
    const auto& [field, set] = spec_fields[i];
    v1::SubmitJobRequest request;
    *request.mutable_spec() = ValidSpec();
    set(*request.mutable_spec(), marker + "...");
    const std::string bad = invalid[i % invalid.size()].substr(0, marker.size()) + "...";
    cases.push_back({"SubmitJob " + field + " invalid UTF-8",
                     RawBytes(submit, WithInvalidUtf8(request, marker + "...", bad)),
                     grpc::StatusCode::INVALID_ARGUMENT, field + ": not valid UTF-8"});
  }
  {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = ValidSpec();
    request.set_request_id(marker);
    cases.push_back(
        {"SubmitJob request_id invalid UTF-8 after a valid spec",
         RawBytes(submit, WithInvalidUtf8(request, marker, invalid[0].substr(0, marker.size()))),
         grpc::StatusCode::INVALID_ARGUMENT, "request_id: not valid UTF-8"});
  }
  {
    v1::CancelJobRequest request;
    request.set_id("1");
    request.set_reason("because " + marker);
    cases.push_back({"CancelJob reason invalid UTF-8",
                     RawBytes("/stoke.v1.Coordinator/CancelJob",
                              WithInvalidUtf8(request, marker, invalid[1].substr(0, 6))),
                     grpc::StatusCode::INVALID_ARGUMENT, "reason: not valid UTF-8"});
  }
  {
    v1::ListJobsRequest request;
    request.add_states(v1::JOB_STATE_PENDING);
    request.set_page_size(5);
    request.set_owner(marker);
    cases.push_back({"ListJobs owner invalid UTF-8 after other fields",
                     RawBytes("/stoke.v1.Coordinator/ListJobs",
                              WithInvalidUtf8(request, marker, invalid[2].substr(0, 6))),
                     grpc::StatusCode::INVALID_ARGUMENT, "owner: not valid UTF-8"});
  }
  for (const char* method : {"WatchJob", "DownloadModel"}) {
    v1::WatchJobRequest request;  // DownloadModelRequest has the same id = 1
    request.set_id(marker);
    cases.push_back({absl::StrCat(method, " id invalid UTF-8 (a stream)"),
                     RawBytes(absl::StrCat("/stoke.v1.Coordinator/", method),
                              WithInvalidUtf8(request, marker, invalid[0].substr(0, 6))),
                     grpc::StatusCode::INVALID_ARGUMENT, "id: not valid UTF-8"});
  }
  return cases;
}

// ------------------------------------------------------------------ what is stored

// Every stored job and its events, as bytes, by id.
std::map<std::string, std::string> StoredJobs(server::JobStore& store) {
  std::map<std::string, std::string> out;
  server::JobQuery query;
  query.limit = 1000;
  auto page = store.ListJobs(query);
  EXPECT_TRUE(page.ok()) << page.status();
  if (!page.ok()) return out;
  for (const auto& job : page->jobs) {
    std::string bytes = job.SerializeAsString();
    auto events = store.ReadEvents(job.id(), 1, 100000);
    EXPECT_TRUE(events.ok()) << events.status();
    if (events.ok()) {
      for (const auto& e : *events) bytes += e.SerializeAsString();
    }
    out[job.id()] = bytes;
  }
  return out;
}

void MakeDataFiles(const std::string& root, const std::string& outside) {
  WriteTokens(root + "/tokens.bin", CountingTokens(20000, 0, 200));
  WriteTokens(outside + "/tokens.bin", CountingTokens(20000, 0, 200));
  WriteBytes(root + "/empty.bin", "");
  WriteBytes(root + "/odd.bin", "abc");
  ASSERT_EQ(mkfifo((root + "/fifo.bin").c_str(), 0600), 0);
  ASSERT_EQ(mkdir((root + "/folder").c_str(), 0700), 0);
  ASSERT_EQ(symlink((outside + "/tokens.bin").c_str(), (root + "/link-out.bin").c_str()), 0);
  ASSERT_EQ(mkdir((root + "/bad-mnist").c_str(), 0700), 0);
  for (const char* name :
       {kMnistTrainImages, kMnistTrainLabels, kMnistTestImages, kMnistTestLabels}) {
    WriteBytes(root + "/bad-mnist/" + name, IdxBytes({4, 2, 2}, {1, 2, 3}, 0x0803));
  }
  ASSERT_EQ(mkdir((root + "/bad-cifar").c_str(), 0700), 0);
  for (const char* name : {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                           "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"}) {
    WriteBytes(root + "/bad-cifar/" + name, CifarRecords({1, 2}) + "x");
  }
}

TEST(ApiCorpus, MalformedRequestsAreRefusedNamingTheFieldAndChangeNothing) {
  TempDir data;
  const std::string root = data.File("root");
  const std::string outside = data.File("outside");
  ASSERT_EQ(mkdir(root.c_str(), 0700), 0);
  ASSERT_EQ(mkdir(outside.c_str(), 0700), 0);
  MakeDataFiles(root, outside);
  InProcessCoordinator::Options options;
  options.data_roots = {root};
  InProcessCoordinator coordinator(options);

  Api api;
  api.channel = grpc::CreateChannel(coordinator.address(), grpc::InsecureChannelCredentials());
  api.stub = v1::Coordinator::NewStub(api.channel);
  api.link = v1::WorkerLink::NewStub(api.channel);
  // Stored jobs in three states: queued, cancelled, and one whose request id is known.
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = ValidSpec();
    if (i == 2) request.set_request_id("corpus-known");
    grpc::ClientContext context;
    v1::SubmitJobResponse response;
    ASSERT_TRUE(api.stub->SubmitJob(&context, request, &response).ok());
    ids.push_back(response.job().id());
  }
  {
    grpc::ClientContext context;
    v1::CancelJobRequest request;
    request.set_id(ids[1]);
    v1::Job job;
    ASSERT_TRUE(api.stub->CancelJob(&context, request, &job).ok());
  }
  api.job_id = ids[0];
  const auto before = StoredJobs(coordinator.store());
  ASSERT_EQ(before.size(), 3u);

  std::vector<Case> corpus;
  for (auto* make : {&EnumCases, &OversizedStringCases, &OversizedListCases, &PythonArgsCases,
                     &SpecRuleCases, &IdCases, &StoredJobCases, &PageCases, &WorkerLinkCases,
                     &UnparsableCases, &NestedInvalidUtf8Cases}) {
    for (Case& c : (*make)()) corpus.push_back(std::move(c));
  }
  for (Case& c : DataCases(root, outside)) corpus.push_back(std::move(c));
  ASSERT_GE(corpus.size(), 150u);

  int refused = 0;
  size_t stored = before.size();
  for (Case& c : corpus) {
    const grpc::Status status = c.call(api);
    if (const size_t now = StoredJobs(coordinator.store()).size(); now != stored) {
      ADD_FAILURE() << c.name << ": created a job";
      stored = now;
    }
    const std::string shown = status.error_message().substr(0, 300);
    EXPECT_EQ(status.error_code(), c.code)
        << c.name << ": got " << status.error_code() << " " << shown;
    EXPECT_NE(status.error_message().find(c.names), std::string::npos)
        << c.name << ": the message does not name " << c.names << ": " << shown;
    EXPECT_LT(status.error_message().size(), 4096u) << c.name;
    if (status.error_code() == c.code) ++refused;
  }
  std::cout << refused << " of " << corpus.size() << " malformed requests refused as expected\n";

  // Healthy: a valid job still submits, and the cluster answers.
  grpc::ClientContext submit_context;
  v1::SubmitJobRequest valid;
  *valid.mutable_spec() = ValidSpec();
  v1::SubmitJobResponse submitted;
  const grpc::Status submit = api.stub->SubmitJob(&submit_context, valid, &submitted);
  ASSERT_TRUE(submit.ok()) << submit.error_message();
  grpc::ClientContext cluster_context;
  v1::Cluster cluster;
  ASSERT_TRUE(api.stub->GetCluster(&cluster_context, v1::GetClusterRequest(), &cluster).ok());
  EXPECT_EQ(cluster.workers_size(), 0) << "a refused registration attached a worker";

  // Unchanged: the three jobs (and their events) exactly as before, plus the new one.
  auto after = StoredJobs(coordinator.store());
  ASSERT_EQ(after.size(), 4u) << "a malformed request created a job";
  EXPECT_EQ(after.count(submitted.job().id()), 1u);
  after.erase(submitted.job().id());
  for (const auto& [id, bytes] : before) {
    EXPECT_EQ(after[id], bytes) << "job " << id << " changed";
  }
}

// A call made with `token`.
std::function<grpc::Status(Api&)> As(std::string token, std::function<grpc::Status(Api&)> call) {
  return [token, call](Api& api) {
    Api& as = api;
    const std::string saved = as.token;
    as.token = token;
    grpc::Status status = call(as);
    as.token = saved;
    return status;
  };
}

std::vector<Case> AccessCases() {
  using Code = grpc::StatusCode;
  std::vector<Case> cases;
  auto on_job = [](std::function<grpc::Status(Api&, const std::string&)> call) {
    return [call](Api& api) { return call(api, api.job_id); };
  };
  auto get = on_job([](Api& api, const std::string& id) {
    v1::GetJobRequest r;
    r.set_id(id);
    return Unary(&v1::Coordinator::Stub::GetJob, r)(api);
  });
  auto cancel = on_job([](Api& api, const std::string& id) {
    v1::CancelJobRequest r;
    r.set_id(id);
    return Unary(&v1::Coordinator::Stub::CancelJob, r)(api);
  });
  auto checkpoints = on_job([](Api& api, const std::string& id) {
    v1::ListCheckpointsRequest r;
    r.set_id(id);
    return Unary(&v1::Coordinator::Stub::ListCheckpoints, r)(api);
  });
  auto download = on_job([](Api& api, const std::string& id) {
    v1::DownloadModelRequest r;
    r.set_id(id);
    return Streaming(&v1::Coordinator::Stub::DownloadModel, r)(api);
  });
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = ValidSpec();
  auto submit_call = Unary(&v1::Coordinator::Stub::SubmitJob, submit);
  auto audit = Unary(&v1::Coordinator::Stub::ListAudit, v1::ListAuditRequest());
  auto cluster = Unary(&v1::Coordinator::Stub::GetCluster, v1::GetClusterRequest());
  auto attach = Link({Registration("w-access")});
  for (const std::string& token : {std::string(""), std::string("not-a-token"),
                                   std::string(5000, 't'), std::string("two words")}) {
    const std::string who = absl::StrCat(" with a token of ", token.size(), " bytes");
    const std::string names = token.empty() ? "requires a token" : "token is not valid";
    cases.push_back({"GetJob" + who, As(token, get), Code::UNAUTHENTICATED, names});
    cases.push_back({"SubmitJob" + who, As(token, submit_call), Code::UNAUTHENTICATED, names});
    cases.push_back({"GetCluster" + who, As(token, cluster), Code::UNAUTHENTICATED, names});
    cases.push_back({"Attach" + who, As(token, attach), Code::UNAUTHENTICATED,
                     token.empty() ? "token" : "join token is not valid"});
  }
  cases.push_back({"SubmitJob as a viewer", As("viewer-secret", submit_call),
                   Code::PERMISSION_DENIED, "submitting jobs needs role submitter"});
  cases.push_back({"CancelJob as a viewer", As("viewer-secret", cancel), Code::PERMISSION_DENIED,
                   "cancelling jobs needs role submitter"});
  cases.push_back({"ListAudit as a submitter", As("bob-secret", audit), Code::PERMISSION_DENIED,
                   "reading the audit log needs role admin"});
  cases.push_back({"CancelJob of another's job", As("bob-secret", cancel), Code::PERMISSION_DENIED,
                   "for its owner"});
  cases.push_back({"ListCheckpoints of another's job", As("bob-secret", checkpoints),
                   Code::PERMISSION_DENIED, "for its owner"});
  cases.push_back({"DownloadModel of another's job", As("bob-secret", download),
                   Code::PERMISSION_DENIED, "for its owner"});
  cases.push_back({"GetJob with a worker's join token", As("worker-secret", get),
                   Code::PERMISSION_DENIED, "join token"});
  cases.push_back({"Attach with a user's token", As("alice-secret", attach),
                   Code::PERMISSION_DENIED, "workers join with a token of role worker"});
  return cases;
}

// A registered worker that sends a message gRPC cannot decode (a log line that is not
// UTF-8) has its link ended with the field named, and is no longer attached.
TEST(ApiCorpus, AWorkerMessageThatIsNotUtf8EndsItsLinkNamingTheField) {
  InProcessCoordinator coordinator;
  Api api;
  api.channel = grpc::CreateChannel(coordinator.address(), grpc::InsecureChannelCredentials());
  v1::WorkerMessage report;
  report.mutable_report()->set_job_id("1");
  report.mutable_report()->add_logs()->set_text("fine");
  report.mutable_report()->add_logs()->set_text("not MARKER");
  std::string bytes = report.SerializeAsString();
  bytes.replace(bytes.find("MARKER"), 6, std::string("\xf5\x80\x80\x80ok"));
  std::vector<v1::CoordinatorMessage> replies;
  const grpc::Status status =
      RawLink(api, {Registration("w-bad-log").SerializeAsString(), bytes}, &replies);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_TRUE(replies[0].has_registered());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_EQ(status.error_message(), "report.logs[1].text: not valid UTF-8");
  EXPECT_TRUE(WaitFor([&] { return coordinator.core().GetCluster().workers_size() == 0; }));
}

TEST(ApiCorpus, CallsWithoutTheRightCredentialAreRefusedAndChangeNothing) {
  InProcessCoordinator::Options options;
  for (auto [name, role] :
       {std::pair{"alice", security::Role::kSubmitter},
        std::pair{"bob", security::Role::kSubmitter}, std::pair{"viewer", security::Role::kViewer},
        std::pair{"worker", security::Role::kWorker}}) {
    options.tokens.push_back({name, role, security::HashToken(std::string(name) + "-secret")});
  }
  InProcessCoordinator coordinator(options);
  Api api;
  api.channel = grpc::CreateChannel(coordinator.address(), grpc::InsecureChannelCredentials());
  api.stub = v1::Coordinator::NewStub(api.channel);
  api.link = v1::WorkerLink::NewStub(api.channel);
  api.token = "alice-secret";
  {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = ValidSpec();
    grpc::ClientContext context;
    Authorize(api, context);
    v1::SubmitJobResponse response;
    ASSERT_TRUE(api.stub->SubmitJob(&context, request, &response).ok());
    api.job_id = response.job().id();
  }
  const auto before = StoredJobs(coordinator.store());
  const std::vector<Case> corpus = AccessCases();
  for (const Case& c : corpus) {
    const grpc::Status status = c.call(api);
    EXPECT_EQ(status.error_code(), c.code)
        << c.name << ": got " << status.error_code() << " " << status.error_message();
    EXPECT_NE(status.error_message().find(c.names), std::string::npos)
        << c.name << ": the message does not say " << c.names << ": " << status.error_message();
  }
  EXPECT_EQ(StoredJobs(coordinator.store()), before);
  EXPECT_EQ(coordinator.core().GetCluster().workers_size(), 0);
}

// A registered worker's stream carries no status per message: what it sends about tasks
// that are not its own (made-up ids, other attempts, jobs assigned elsewhere) is refused
// and counted, and changes no job.
TEST(ApiCorpus, AWorkersReportsAboutTasksNotItsOwnChangeNothing) {
  InProcessCoordinator coordinator;
  auto api = coordinator.Stub();
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = ValidSpec();
    grpc::ClientContext context;
    v1::SubmitJobResponse response;
    ASSERT_TRUE(api->SubmitJob(&context, request, &response).ok());
    ids.push_back(response.job().id());
  }
  // The first job runs on an honest worker, which then holds it.
  auto link = coordinator.WorkerStub();
  grpc::ClientContext honest_context;
  auto honest = link->Attach(&honest_context);
  ASSERT_TRUE(honest->Write(Registration("honest")));
  v1::CoordinatorMessage received;
  while (honest->Read(&received) && !received.has_assignment()) {
  }
  ASSERT_TRUE(received.has_assignment());
  const v1::Assignment assignment = received.assignment();
  v1::WorkerMessage started;
  started.mutable_started()->set_job_id(assignment.job_id());
  started.mutable_started()->set_attempt(assignment.attempt());
  ASSERT_TRUE(honest->Write(started));
  ASSERT_TRUE(WaitFor([&] {
    auto job = coordinator.core().GetJob(assignment.job_id());
    return job.ok() && job->state() == v1::JOB_STATE_RUNNING;
  }));
  // The other job is over before the forger attaches, so nothing is assigned to it.
  {
    grpc::ClientContext context;
    v1::CancelJobRequest cancel;
    cancel.set_id(ids[1]);
    v1::Job job;
    ASSERT_TRUE(api->CancelJob(&context, cancel, &job).ok());
  }
  const auto before = StoredJobs(coordinator.store());
  const uint64_t refused_before = coordinator.core().GetCluster().refused_worker_reports();

  grpc::ClientContext forger_context;
  auto forger = link->Attach(&forger_context);
  v1::WorkerMessage reg = Registration("forger");
  ASSERT_TRUE(forger->Write(reg));
  ASSERT_TRUE(forger->Read(&received));
  ASSERT_TRUE(received.has_registered());
  std::vector<v1::WorkerMessage> forged;
  for (const std::string& job :
       {assignment.job_id(), ids[1], std::string("999"), std::string(""), std::string(5000, '1')}) {
    for (uint32_t attempt : {assignment.attempt(), 0u, 4000000000u}) {
      v1::WorkerMessage m;
      m.mutable_started()->set_job_id(job);
      m.mutable_started()->set_attempt(attempt);
      forged.push_back(m);
      m.Clear();
      m.mutable_report()->set_job_id(job);
      m.mutable_report()->set_attempt(attempt);
      m.mutable_report()->add_metrics()->set_loss(std::numeric_limits<double>::quiet_NaN());
      m.mutable_report()->add_logs()->set_text("forged");
      forged.push_back(m);
      m.Clear();
      m.mutable_finished()->set_job_id(job);
      m.mutable_finished()->set_attempt(attempt);
      m.mutable_finished()->set_outcome(static_cast<v1::TaskOutcome>(attempt % 2 ? 999 : 1));
      forged.push_back(m);
    }
  }
  forged.push_back(Registration("honest"));  // a second registration on the same stream
  forged.push_back(v1::WorkerMessage());     // a message of no kind
  for (const auto& m : forged) ASSERT_TRUE(forger->Write(m));
  ASSERT_TRUE(WaitFor([&] {
    return coordinator.core().GetCluster().refused_worker_reports() >=
           // 5 jobs x 3 attempts x 3 kinds, but for "finished job '' attempt 0": that is
           // what an idle worker holds, and it is taken as a (harmless) no-op.
           refused_before + 44;
  })) << coordinator.core().GetCluster().refused_worker_reports() - refused_before;
  EXPECT_EQ(StoredJobs(coordinator.store()), before);
  auto held = coordinator.core().GetJob(assignment.job_id());
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(held->placement(0).worker_id(), "honest");
  forger_context.TryCancel();
  honest_context.TryCancel();
}

}  // namespace
}  // namespace stoke::testing

#include "spec/job_spec_file.h"

#include <fcntl.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/struct.pb.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spec/code_bundle.h"
#include "spec/data_paths.h"

namespace stoke::spec {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Converts one YAML document into a message, collecting every error with its place (a
// field in error is left out, and reading goes on), and where each field was written.
class SpecReader {
 public:
  explicit SpecReader(std::string source) : source_(std::move(source)) {}

  std::vector<JobFileProblem>& problems() { return problems_; }
  std::map<std::string, JobFilePosition>& positions() { return positions_; }

  absl::Status Fill(const YAML::Node& node, Message& message, const std::string& path) {
    if (node.IsNull()) return absl::OkStatus();  // "adamw:" with nothing under it
    if (!node.IsMap()) {
      return Error(node, path,
                   absl::StrCat("expected a mapping of ", message.GetDescriptor()->name(),
                                " fields, got ", Describe(node)));
    }
    const Descriptor* descriptor = message.GetDescriptor();
    std::map<const google::protobuf::OneofDescriptor*, std::string> oneofs_set;
    std::set<std::string> keys;
    for (const auto& entry : node) {
      const std::string key = entry.first.as<std::string>();
      // A key given twice is CheckDocument's problem; its second value is not read.
      if (!keys.insert(key).second) continue;
      const std::string field_path = path.empty() ? key : absl::StrCat(path, ".", key);
      const FieldDescriptor* field = descriptor->FindFieldByName(key);
      if (field == nullptr) field = FindByJsonName(descriptor, key);
      Place(entry.first, field_path);
      if (field == nullptr) {
        Error(entry.first, field_path, UnknownFieldMessage(descriptor, key)).IgnoreError();
        continue;
      }
      if (const auto* oneof = field->real_containing_oneof()) {
        auto [it, inserted] = oneofs_set.emplace(oneof, key);
        if (!inserted) {
          Error(entry.first, field_path,
                absl::StrCat("conflicts with ", it->second, ": set only one of ",
                             OneofMembers(oneof)))
              .IgnoreError();
          continue;
        }
      }
      SetField(entry.second, message, field, field_path).IgnoreError();  // recorded
    }
    return absl::OkStatus();
  }

 private:
  absl::Status SetField(const YAML::Node& node, Message& message, const FieldDescriptor* field,
                        const std::string& path) {
    const Reflection* reflection = message.GetReflection();
    if (field->is_map()) return Error(node, path, "map fields are not supported in job files");
    if (field->is_repeated()) {
      if (node.IsNull()) return absl::OkStatus();
      if (!node.IsSequence()) {
        return Error(node, path, absl::StrCat("expected a list, got ", Describe(node)));
      }
      for (size_t i = 0; i < node.size(); ++i) {
        const std::string element = absl::StrCat(path, "[", i, "]");
        Place(node[i], element);
        AddElement(node[i], message, field, element).IgnoreError();  // recorded
      }
      return absl::OkStatus();
    }
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      Message* child = reflection->MutableMessage(&message, field);
      if (auto* mapping = dynamic_cast<google::protobuf::Struct*>(child)) {
        if (node.IsNull()) return absl::OkStatus();
        if (!node.IsMap()) {
          return Error(node, path, absl::StrCat("expected a mapping, got ", Describe(node)));
        }
        return FillStruct(node, *mapping, path);
      }
      return Fill(node, *child, path);
    }
    // `batch_size: auto`: a number the worker chooses is the sibling bool `<name>_auto`.
    if (node.IsScalar() && absl::AsciiStrToLower(node.Scalar()) == "auto") {
      const FieldDescriptor* chooser =
          message.GetDescriptor()->FindFieldByName(field->name() + "_auto");
      if (chooser != nullptr && chooser->cpp_type() == FieldDescriptor::CPPTYPE_BOOL) {
        reflection->SetBool(&message, chooser, true);
        return absl::OkStatus();
      }
    }
    return StoreScalar(node, message, field, path);
  }

  // A mapping of plain values (model.python.args): YAML's own types, as JSON has them.
  absl::Status FillStruct(const YAML::Node& node, google::protobuf::Struct& out,
                          const std::string& path) {
    for (const auto& entry : node) {
      const std::string key = entry.first.as<std::string>();
      google::protobuf::Value value;
      if (auto s = FillValue(entry.second, value, absl::StrCat(path, ".", key)); !s.ok()) return s;
      (*out.mutable_fields())[key] = std::move(value);
    }
    return absl::OkStatus();
  }

  absl::Status FillValue(const YAML::Node& node, google::protobuf::Value& out,
                         const std::string& path) {
    if (node.IsNull()) {
      out.set_null_value(google::protobuf::NULL_VALUE);
    } else if (node.IsMap()) {
      return FillStruct(node, *out.mutable_struct_value(), path);
    } else if (node.IsSequence()) {
      for (size_t i = 0; i < node.size(); ++i) {
        if (auto s = FillValue(node[i], *out.mutable_list_value()->add_values(),
                               absl::StrCat(path, "[", i, "]"));
            !s.ok()) {
          return s;
        }
      }
      out.mutable_list_value();  // an empty list is a list
    } else {
      const std::string text = node.Scalar();
      const std::string lower = absl::AsciiStrToLower(text);
      double number;
      // A quoted scalar is a string whatever it spells ("1", "true").
      if (node.Tag() == "!") {
        out.set_string_value(text);
      } else if (lower == "true" || lower == "false") {
        out.set_bool_value(lower == "true");
      } else if (lower == "null" || lower == "~") {
        out.set_null_value(google::protobuf::NULL_VALUE);
      } else if (ParseDouble(text, &number)) {
        out.set_number_value(number);
      } else {
        out.set_string_value(text);
      }
    }
    return absl::OkStatus();
  }

  absl::Status AddElement(const YAML::Node& node, Message& message, const FieldDescriptor* field,
                          const std::string& path) {
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      return Fill(node, *message.GetReflection()->AddMessage(&message, field), path);
    }
    return StoreScalar(node, message, field, path);
  }

  // Parses a scalar for `field` and sets it, or appends it when the field is repeated.
  absl::Status StoreScalar(const YAML::Node& node, Message& message, const FieldDescriptor* field,
                           const std::string& path) {
    if (!node.IsScalar()) {
      return Error(node, path,
                   absl::StrCat("expected ", TypeName(field), ", got ", Describe(node)));
    }
    const Reflection* r = message.GetReflection();
    const bool add = field->is_repeated();
    const std::string text = node.Scalar();
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
      case FieldDescriptor::CPPTYPE_INT64: {
        const bool is32 = field->cpp_type() == FieldDescriptor::CPPTYPE_INT32;
        int64_t v;
        if (!ParseInt(
                text,
                is32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min(),
                is32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max(),
                &v)) {
          return BadValue(node, path, field, text);
        }
        if (is32) {
          add ? r->AddInt32(&message, field, static_cast<int32_t>(v))
              : r->SetInt32(&message, field, static_cast<int32_t>(v));
        } else {
          add ? r->AddInt64(&message, field, v) : r->SetInt64(&message, field, v);
        }
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_UINT32:
      case FieldDescriptor::CPPTYPE_UINT64: {
        const bool is32 = field->cpp_type() == FieldDescriptor::CPPTYPE_UINT32;
        uint64_t v;
        if (!ParseUint(
                text,
                is32 ? std::numeric_limits<uint32_t>::max() : std::numeric_limits<uint64_t>::max(),
                &v)) {
          return BadValue(node, path, field, text);
        }
        if (is32) {
          add ? r->AddUInt32(&message, field, static_cast<uint32_t>(v))
              : r->SetUInt32(&message, field, static_cast<uint32_t>(v));
        } else {
          add ? r->AddUInt64(&message, field, v) : r->SetUInt64(&message, field, v);
        }
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT: {
        double v;
        if (!ParseDouble(text, &v)) return BadValue(node, path, field, text);
        if (field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
          add ? r->AddDouble(&message, field, v) : r->SetDouble(&message, field, v);
        } else {
          add ? r->AddFloat(&message, field, static_cast<float>(v))
              : r->SetFloat(&message, field, static_cast<float>(v));
        }
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_BOOL: {
        const std::string lower = absl::AsciiStrToLower(text);
        if (lower != "true" && lower != "false") return BadValue(node, path, field, text);
        add ? r->AddBool(&message, field, lower == "true")
            : r->SetBool(&message, field, lower == "true");
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_STRING:
        add ? r->AddString(&message, field, text) : r->SetString(&message, field, text);
        return absl::OkStatus();
      case FieldDescriptor::CPPTYPE_ENUM: {
        const auto* value = FindEnumValue(field->enum_type(), text);
        if (value == nullptr) {
          return Error(node, path,
                       absl::StrCat("unknown value \"", text, "\"; expected one of ",
                                    EnumChoices(field->enum_type())));
        }
        add ? r->AddEnumValue(&message, field, value->number())
            : r->SetEnumValue(&message, field, value->number());
        return absl::OkStatus();
      }
      default:
        return Error(node, path, "unsupported field type");
    }
  }

  static bool ParseInt(const std::string& text, int64_t min, int64_t max, int64_t* out) {
    if (text.empty()) return false;
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(text.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max) return false;
    *out = v;
    return true;
  }

  static bool ParseUint(const std::string& text, uint64_t max, uint64_t* out) {
    if (text.empty() || text[0] == '-' || text[0] == '+') return false;
    errno = 0;
    char* end = nullptr;
    unsigned long long v = std::strtoull(text.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || v > max) return false;
    *out = v;
    return true;
  }

  static bool ParseDouble(const std::string& text, double* out) {
    if (text.empty()) return false;
    errno = 0;
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (errno != 0 || *end != '\0' || !std::isfinite(v)) return false;
    *out = v;
    return true;
  }

  static const FieldDescriptor* FindByJsonName(const Descriptor* descriptor,
                                               const std::string& key) {
    for (int i = 0; i < descriptor->field_count(); ++i) {
      if (descriptor->field(i)->json_name() == key) return descriptor->field(i);
    }
    return nullptr;
  }

  // "bf16", "BF16" and "PRECISION_BF16" all name PRECISION_BF16.
  // A switch (on, off, default) also takes true and false, as JSON and Python write them.
  static const google::protobuf::EnumValueDescriptor* FindEnumValue(const EnumDescriptor* type,
                                                                    const std::string& text) {
    std::string upper = absl::AsciiStrToUpper(text);
    if (const auto* v = type->FindValueByName(upper)) return v;
    const std::string prefix = EnumPrefix(type);
    if (upper == "TRUE" || upper == "FALSE") {
      const auto* on = type->FindValueByName(prefix + "ON");
      const auto* off = type->FindValueByName(prefix + "OFF");
      if (on != nullptr && off != nullptr) return upper == "TRUE" ? on : off;
    }
    return type->FindValueByName(prefix + upper);
  }

  // The prefix every value of the enum shares, up to an underscore: "RESNET_STEM_" for
  // RESNET_STEM_AUTO, RESNET_STEM_SMALL, ... (proto style names values so).
  static std::string EnumPrefix(const EnumDescriptor* type) {
    std::string prefix = type->value(0)->name();
    for (int i = 1; i < type->value_count(); ++i) {
      const std::string& name = type->value(i)->name();
      size_t n = 0;
      while (n < prefix.size() && n < name.size() && prefix[n] == name[n]) ++n;
      prefix.resize(n);
    }
    const auto underscore = prefix.rfind('_');
    return underscore == std::string::npos ? "" : prefix.substr(0, underscore + 1);
  }

  static std::string EnumChoices(const EnumDescriptor* type) {
    const std::string prefix = EnumPrefix(type);
    std::vector<std::string> names;
    for (int i = 0; i < type->value_count(); ++i) {
      std::string name = type->value(i)->name();
      if (absl::EndsWith(name, "_UNSPECIFIED")) continue;
      if (absl::StartsWith(name, prefix)) name = name.substr(prefix.size());
      names.push_back(absl::AsciiStrToLower(name));
    }
    return absl::StrJoin(names, ", ");
  }

  static std::string OneofMembers(const google::protobuf::OneofDescriptor* oneof) {
    std::vector<std::string> names;
    for (int i = 0; i < oneof->field_count(); ++i) names.push_back(oneof->field(i)->name());
    return absl::StrJoin(names, ", ");
  }

  static size_t EditDistance(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        size_t above = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
        diagonal = above;
      }
    }
    return row[b.size()];
  }

  static std::string UnknownFieldMessage(const Descriptor* descriptor, const std::string& key) {
    std::vector<std::string> names;
    std::string closest;
    size_t best = std::numeric_limits<size_t>::max();
    for (int i = 0; i < descriptor->field_count(); ++i) {
      const std::string& name = descriptor->field(i)->name();
      names.push_back(name);
      size_t d = EditDistance(key, name);
      if (d < best) {
        best = d;
        closest = name;
      }
    }
    std::string message = absl::StrCat("unknown field");
    if (best <= 2) return absl::StrCat(message, "; did you mean ", closest, "?");
    return absl::StrCat(message, "; expected one of ", absl::StrJoin(names, ", "));
  }

  static std::string TypeName(const FieldDescriptor* field) {
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
      case FieldDescriptor::CPPTYPE_INT64:
        return "an integer";
      case FieldDescriptor::CPPTYPE_UINT32:
      case FieldDescriptor::CPPTYPE_UINT64:
        return "a whole number >= 0";
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT:
        return "a number";
      case FieldDescriptor::CPPTYPE_BOOL:
        return "true or false";
      case FieldDescriptor::CPPTYPE_ENUM:
        return absl::StrCat("one of ", EnumChoices(field->enum_type()));
      case FieldDescriptor::CPPTYPE_STRING:
        return "a string";
      default:
        return "a mapping";
    }
  }

  static std::string Describe(const YAML::Node& node) {
    if (node.IsMap()) return "a mapping";
    if (node.IsSequence()) return "a list";
    if (node.IsNull()) return "nothing";
    return absl::StrCat("\"", node.Scalar(), "\"");
  }

  absl::Status BadValue(const YAML::Node& node, const std::string& path,
                        const FieldDescriptor* field, const std::string& text) {
    return Error(node, path, absl::StrCat("expected ", TypeName(field), ", got \"", text, "\""));
  }

  // Records the problem, and returns it for the caller to stop at.
  absl::Status Error(const YAML::Node& node, const std::string& path, const std::string& problem) {
    const YAML::Mark mark = node.Mark();
    JobFileProblem found{path, problem, 0, 0};
    if (!mark.is_null()) {
      found.line = mark.line + 1;
      found.column = mark.column + 1;
    }
    problems_.push_back(found);
    return absl::InvalidArgumentError(found.message);
  }

  void Place(const YAML::Node& node, const std::string& path) {
    const YAML::Mark mark = node.Mark();
    if (!mark.is_null()) positions_[path] = {mark.line + 1, mark.column + 1};
  }

  const std::string source_;
  std::vector<JobFileProblem> problems_;
  std::map<std::string, JobFilePosition> positions_;
};

// Values a job file may hold once its aliases are expanded. A real one holds hundreds; a
// "billion laughs" file of 1 KB, nine levels of nine aliases, holds 9^9, and reading it
// would take minutes.
constexpr uint64_t kMaxExpandedValues = 100'000;

// Where each document of a YAML stream starts, and how many values the first one holds
// with every alias expanded (counted, never built).
class DocumentShape final : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> marks;
  uint64_t expanded = 0;  // values of the documents read, aliases expanded; saturates

  void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t anchor) override { Value(anchor, 1); }
  void OnAlias(const YAML::Mark&, YAML::anchor_t anchor) override {
    const auto it = sizes_.find(anchor);
    Add(it == sizes_.end() ? 1 : it->second);
  }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t anchor,
                const std::string&) override {
    Value(anchor, 1);
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open_.push_back({anchor, 1});
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open_.push_back({anchor, 1});
  }
  void OnMapEnd() override { Close(); }

 private:
  struct Open {
    YAML::anchor_t anchor;
    uint64_t values;
  };
  // Counts saturate just past the limit, so that no sum overflows.
  void Add(uint64_t n) {
    uint64_t& to = open_.empty() ? expanded : open_.back().values;
    to = std::min(to + std::min(n, kMaxExpandedValues + 1), kMaxExpandedValues + 1);
  }
  void Value(YAML::anchor_t anchor, uint64_t n) {
    if (anchor != YAML::NullAnchor) sizes_[anchor] = n;
    Add(n);
  }
  void Close() {
    const Open done = open_.back();
    open_.pop_back();
    Value(done.anchor, done.values);
  }
  std::vector<Open> open_;
  std::map<YAML::anchor_t, uint64_t> sizes_;
};

// What yaml-cpp accepts but a job file must not hold, found before any field is read:
// a key given twice (yaml-cpp keeps both, and the last would silently win) and tags
// other than YAML's core ones (a !!binary value would be read as its base64 text).
void CheckDocument(const YAML::Node& node, std::vector<JobFileProblem>& problems) {
  auto error = [&](const YAML::Node& at, const std::string& problem) {
    const YAML::Mark mark = at.Mark();
    problems.push_back(
        {"", problem, mark.is_null() ? 0 : mark.line + 1, mark.is_null() ? 0 : mark.column + 1});
  };
  static const std::set<std::string> kCoreTags = {"",
                                                  "?",
                                                  "!",
                                                  "tag:yaml.org,2002:str",
                                                  "tag:yaml.org,2002:int",
                                                  "tag:yaml.org,2002:float",
                                                  "tag:yaml.org,2002:bool",
                                                  "tag:yaml.org,2002:null",
                                                  "tag:yaml.org,2002:map",
                                                  "tag:yaml.org,2002:seq"};
  if (!kCoreTags.count(node.Tag())) {
    error(node, absl::StrCat("the tag ", node.Tag(),
                             " is not supported in job files (write the value plainly)"));
  }
  if (node.IsSequence()) {
    for (const auto& element : node) CheckDocument(element, problems);
  } else if (node.IsMap()) {
    std::map<std::string, int> seen;  // key -> line
    for (const auto& entry : node) {
      CheckDocument(entry.first, problems);
      if (entry.first.IsScalar()) {
        const int line = entry.first.Mark().line + 1;
        auto [it, inserted] = seen.emplace(entry.first.Scalar(), line);
        if (!inserted) {
          error(entry.first, absl::StrCat(entry.first.Scalar(), ": given twice (first on line ",
                                          it->second, "); keep one"));
        }
      }
      CheckDocument(entry.second, problems);
    }
  }
}

// The YAML document of a job file, or the one problem that stops it being read: not YAML,
// two documents, aliases that expand past reason, nothing at all.
YAML::Node LoadDocument(const std::string& text, std::vector<JobFileProblem>& problems) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
    // Documents are counted with the parser, at most two: YAML::LoadAll loops forever on
    // some malformed input (its parser keeps reporting empty documents it never consumes;
    // found by tests/fuzz/job_file_fuzz).
    std::istringstream stream(text);
    YAML::Parser parser(stream);
    DocumentShape shape;
    for (int i = 0; i < 2 && parser.HandleNextDocument(shape); ++i) {
    }
    if (shape.marks.size() > 1) {
      problems.push_back({"", "a second YAML document (after ---); a job file holds one job",
                          shape.marks[1].line + 1, 0});
      return {};
    }
    if (shape.expanded > kMaxExpandedValues) {
      problems.push_back(
          {"",
           absl::StrCat("its aliases (*name) expand it to more than ", kMaxExpandedValues,
                        " values; a job file is far smaller: write the repeated "
                        "parts out"),
           0, 0});
      return {};
    }
  } catch (const YAML::Exception& e) {
    problems.push_back(
        {"", absl::StrCat("not valid YAML or JSON: ", e.msg), e.mark.line + 1, e.mark.column + 1});
    return {};
  }
  if (!root || root.IsNull()) {
    problems.push_back({"", "the file is empty", 0, 0});
    return {};
  }
  return root;
}

}  // namespace

JobFilePosition ParsedJobFile::PositionOf(std::string field) const {
  while (!field.empty()) {
    if (const auto it = positions.find(field); it != positions.end()) return it->second;
    // "model.mlp.hidden[1]" -> "model.mlp.hidden" -> "model.mlp" -> "model".
    const size_t cut = field.find_last_of(".[");
    field.resize(cut == std::string::npos ? 0 : cut);
  }
  return {};
}

ParsedJobFile ParseJobFile(const std::string& text, const std::string& source) {
  ParsedJobFile parsed;
  parsed.source = source;
  const YAML::Node root = LoadDocument(text, parsed.problems);
  if (!parsed.problems.empty()) return parsed;
  try {
    CheckDocument(root, parsed.problems);
    SpecReader reader(source);
    reader.Fill(root, parsed.spec, "").IgnoreError();  // its problems are recorded
    parsed.problems.insert(parsed.problems.end(), reader.problems().begin(),
                           reader.problems().end());
    parsed.positions = std::move(reader.positions());
  } catch (const YAML::Exception& e) {
    parsed.problems.push_back({"", e.msg, e.mark.line + 1, e.mark.column + 1});
  }
  return parsed;
}

std::string DescribeProblem(const std::string& source, const JobFileProblem& problem) {
  std::string where = source;
  if (problem.line > 0) absl::StrAppend(&where, ":", problem.line);
  if (problem.line > 0 && problem.column > 0) absl::StrAppend(&where, ":", problem.column);
  if (where.empty()) where = "job";
  return absl::StrCat(where, ": ", problem.field.empty() ? "" : problem.field + ": ",
                      problem.message);
}

JobFileProblem ProblemOfStatus(const absl::Status& status) {
  const std::string message(status.message());
  // Rules word a problem "FIELD: what is wrong"; FIELD is a dotted path with indexes.
  const size_t colon = message.find(": ");
  const std::string head = message.substr(0, colon == std::string::npos ? 0 : colon);
  const bool field_like = !head.empty() && std::all_of(head.begin(), head.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '[' ||
           c == ']';
  });
  if (!field_like) return {"", message, 0, 0};
  return {head, message.substr(colon + 2), 0, 0};
}

absl::StatusOr<v1::JobSpec> ParseJobSpec(const std::string& text, const std::string& source) {
  ParsedJobFile parsed = ParseJobFile(text, source);
  if (parsed.problems.empty()) return std::move(parsed.spec);
  std::vector<std::string> lines;
  lines.reserve(parsed.problems.size());
  for (const JobFileProblem& p : parsed.problems) lines.push_back(DescribeProblem(source, p));
  return absl::InvalidArgumentError(absl::StrJoin(lines, "\n"));
}

void ResolveRelativePaths(v1::JobSpec& spec, const std::string& base_dir) {
  // A file named without a folder ("job.yaml") has an empty parent: its folder is the
  // current one. std::filesystem::absolute("") throws, so it is never called with it.
  std::error_code ec;
  std::filesystem::path base = base_dir.empty() ? std::filesystem::current_path(ec)
                                                : std::filesystem::absolute(base_dir, ec);
  if (ec) base = base_dir.empty() ? "." : base_dir;
  // "data:REL" is the coordinator's to resolve, against its data roots.
  spec::ForEachPath(spec, [&](const std::string& /*field*/, std::string* path) {
    if ((*path)[0] == '/' || spec::IsDataRootPath(*path)) return;
    *path = (base / *path).lexically_normal().string();
  });
}

absl::StatusOr<std::string> ReadJobFile(const std::string& path) {
  // Non-blocking open and a regular-file check: `stoke submit /dev/zero` or a FIFO must
  // fail at once rather than read forever or wait for a writer.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot read job file: ", std::strerror(errno)));
  }
  std::unique_ptr<int, void (*)(int*)> closer(new int(fd), [](int* f) {
    close(*f);
    delete f;
  });
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot read job file: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file; a job file is a YAML or JSON file"));
  }
  if (st.st_size > kMaxJobFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", st.st_size, " bytes; a job file may hold at most ", kMaxJobFileBytes));
  }
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::NotFoundError(
          absl::StrCat(path, ": cannot read job file: ", std::strerror(errno)));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (static_cast<int64_t>(text.size()) > kMaxJobFileBytes) {  // it grew while read
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a job file may hold at most ", kMaxJobFileBytes, " bytes"));
    }
  }
  return text;
}

absl::StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path) {
  auto text = ReadJobFile(path);
  if (!text.ok()) return text.status();
  auto spec = ParseJobSpec(*text, path);
  if (!spec.ok()) return spec;
  ResolveRelativePaths(*spec, std::filesystem::path(path).parent_path().string());
  return spec;
}

absl::StatusOr<v1::CodeBundle> ReadJobCode(const v1::JobSpec& spec) {
  if (spec.model().has_python()) {
    return spec::ReadCodeBundle(spec.model().python().file(), "model.python.file");
  }
  // A working folder that is not here is one on the workers, beneath a data root.
  const std::string& workdir = spec.command().workdir();
  struct stat st;
  if (spec.has_command() && !workdir.empty() && stat(workdir.c_str(), &st) == 0) {
    return spec::ReadWorkdir(workdir);
  }
  return v1::CodeBundle();
}

}  // namespace stoke::spec

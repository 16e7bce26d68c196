// Stoke's side of the speed benchmark (bench/speed.sh): trains the job a spec file
// describes on one device, through the same path a submitted job takes (the job file
// reader, the coordinator's spec rules and defaults, the worker's task translation and
// training engine), and prints one JSON line: the median samples/s of the timed windows
// after warm-up, each window timed on the device with CUDA events by the engine's own
// metrics, with step time, peak memory, FLOP/s and MFU.
//
//   stoke-bench bench/specs/mlp.yaml --set data.synthetic.features=1024
//       --set model.mlp.hidden=[4096,1024] --warmup-steps 40 --windows 6 --window-steps 20
//
// With --trace FILE it then records a Kineto trace of --trace-steps more steps (after the
// timed windows, so tracing never slows what is timed) for bench/python/trace_summary.py.
#include <signal.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "spec/code_bundle.h"
#include "spec/data_checks.h"
#include "spec/job_spec_file.h"
#include "spec/job_spec_rules.h"
#include "stoke/v1/worker_link.pb.h"
#include "worker/engine/trainer.h"
#include "worker/link/task_translation.h"
#include "worker/link/trainer_process.h"
#include "worker/runtime/devices.h"
#include "worker/runtime/kernel_trace.h"
#include "worker/runtime/memory_history.h"

namespace stoke {

// Sets `dotted.key` in a YAML document to `value` (itself YAML: 512, bf16, [4096,1024]).
void Override(YAML::Node root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos) throw std::invalid_argument("--set wants key=value: " + assignment);
  std::vector<std::string> keys;
  std::stringstream path(assignment.substr(0, eq));
  for (std::string key; std::getline(path, key, '.');) keys.push_back(key);
  YAML::Node node = root;
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    YAML::Node child = node[keys[i]];
    if (!child.IsMap()) {
      node[keys[i]] = YAML::Node(YAML::NodeType::Map);
      child = node[keys[i]];
    }
    node.reset(child);
  }
  node[keys.back()] = YAML::Load(assignment.substr(eq + 1));
}

class Collector final : public worker::TrainingObserver {
 public:
  void OnStarted() override {}
  void OnMetrics(const worker::MetricSample& sample) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!sample.eval) samples.push_back(sample);
  }
  void OnLog(const std::string& line) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::fprintf(stderr, "%s\n", line.c_str());
    notes.push_back(line);
  }
  std::vector<worker::MetricSample> samples;
  std::vector<std::string> notes;

 private:
  std::mutex mu_;
};

// A JSON object written by hand: the GPU machine has no JSON library of ours.
class JsonLine {
 public:
  void Add(const std::string& key, const std::string& value) { Raw(key, Quote(value)); }
  void Add(const std::string& key, const char* value) { Raw(key, Quote(value)); }
  void Add(const std::string& key, double value) {
    char text[64];
    std::snprintf(text, sizeof text, "%.6g", value);
    Raw(key, text);
  }
  void Add(const std::string& key, uint64_t value) { Raw(key, std::to_string(value)); }
  void Add(const std::string& key, int64_t value) { Raw(key, std::to_string(value)); }
  void Add(const std::string& key, bool value) { Raw(key, value ? "true" : "false"); }
  void Add(const std::string& key, const std::vector<std::string>& values) {
    std::string list = "[";
    for (size_t i = 0; i < values.size(); ++i) list += (i ? "," : "") + Quote(values[i]);
    Raw(key, list + "]");
  }
  void Add(const std::string& key, const std::vector<double>& values) {
    std::string list = "[";
    for (size_t i = 0; i < values.size(); ++i) {
      char text[64];
      std::snprintf(text, sizeof text, "%s%.6g", i ? "," : "", values[i]);
      list += text;
    }
    Raw(key, list + "]");
  }
  std::string Text() const { return "{" + body_ + "}"; }

 private:
  static std::string Quote(const std::string& text) {
    std::string out = "\"";
    for (char c : text) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        char escaped[8];
        std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
        out += escaped;
      } else {
        out += c;
      }
    }
    return out + "\"";
  }
  void Raw(const std::string& key, const std::string& value) {
    body_ += (body_.empty() ? "" : ",") + Quote(key) + ":" + value;
  }
  std::string body_;
};

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Enough for a whole benchmark run of ResNet-50 (about a thousand allocations and frees
// a step); what comes before the last this many is dropped.
constexpr int64_t kMemoryHistoryEvents = 4'000'000;

int Run(int argc, char** argv) {
  CLI::App app{"Stoke's engine on one device, timed: one JSON line on stdout"};
  std::string spec_path;
  std::vector<std::string> overrides;
  std::string device_text = "cuda:0";
  uint32_t warmup_steps = 40, windows = 6, window_steps = 20, trace_steps = 5;
  std::string trace_path;
  std::string memory_history_path;
  app.add_option("spec", spec_path, "job spec (YAML)")->required()->check(CLI::ExistingFile);
  app.add_option("--set", overrides, "dotted.key=value overrides of the spec");
  app.add_option("--device", device_text, "cuda:N or cpu");
  app.add_option("--warmup-steps", warmup_steps, "steps before the first timed window");
  app.add_option("--windows", windows, "timed windows");
  app.add_option("--window-steps", window_steps, "steps per window");
  app.add_option("--trace", trace_path,
                 "write a Kineto trace (Chrome JSON) of steps after the windows");
  app.add_option("--trace-steps", trace_steps, "steps the trace records")
      ->check(CLI::Range(1, 1000));
  app.add_option("--memory-history", memory_history_path,
                 "write every device allocation and free of the run as PyTorch's memory "
                 "snapshot (bench/python/memory_peak.py reads it)");
  CLI11_PARSE(app, argc, argv);
  // Windows end on multiples of window_steps: warm-up is rounded up to one.
  warmup_steps = (warmup_steps + window_steps - 1) / window_steps * window_steps;

  YAML::Node root = YAML::LoadFile(spec_path);
  for (const auto& o : overrides) Override(root, o);
  root["metrics"]["interval_steps"] = window_steps;
  YAML::Node training = root["training"];
  training.remove("epochs");
  const uint64_t timed_end = warmup_steps + windows * window_steps;
  // One step more than traced: the trace stops before it begins, after the last traced one.
  training["steps"] = timed_end + (trace_path.empty() ? 0 : trace_steps + 1);
  YAML::Emitter emitter;
  emitter << root;
  auto spec = spec::ParseJobSpec(emitter.c_str(), spec_path);
  if (!spec.ok()) throw std::invalid_argument(std::string(spec.status().message()));
  const std::string dir =
      spec_path.find('/') == std::string::npos ? "." : spec_path.substr(0, spec_path.rfind('/'));
  spec::ResolveRelativePaths(*spec, dir);
  if (auto s = spec::ValidateJobSpec(*spec); !s.ok()) {
    throw std::invalid_argument(std::string(s.message()));
  }
  // A Python model's code travels as a submitted job's does.
  auto code = spec::ReadJobCode(*spec);
  if (!code.ok()) throw std::invalid_argument(std::string(code.status().message()));
  if (spec->model().has_python()) {
    if (auto s = spec::RecordCode(*code, *spec->mutable_model()->mutable_python()); !s.ok()) {
      throw std::invalid_argument(std::string(s.message()));
    }
  }
  auto facts = spec::InspectData(*spec, spec::DataRoots({"/"}));
  if (!facts.ok()) throw std::invalid_argument(std::string(facts.status().message()));
  if (auto s = spec::ValidateAgainstData(*spec, *facts); !s.ok()) {
    throw std::invalid_argument(std::string(s.message()));
  }
  spec::ApplyJobSpecDefaults(*spec, *facts);
  v1::Assignment assignment;
  assignment.set_job_id("bench");
  *assignment.mutable_spec() = *spec;
  assignment.set_world_size(1);
  // The worker opens the files the spec names beneath the roots they were checked under.
  assignment.add_data_roots("/");
  assignment.mutable_spec()->mutable_eval()->set_batches(2);  // the end-of-run evaluation is
                                                              // not what is measured
  auto task = worker::TaskFromAssignment(assignment);
  if (!task.ok()) throw std::invalid_argument(std::string(task.status().message()));
  if (code->files_size() > 0) *assignment.mutable_code() = *code;

  const auto parsed_device = worker::ParseDeviceLabel(device_text);
  if (!parsed_device)
    throw std::invalid_argument("--device " + device_text + ": expected cuda:N or cpu");
  const worker::DeviceRef device = *parsed_device;
  Collector collector;
  worker::TaskStops stops;
  worker::TrainingProbe probe;
  std::unique_ptr<worker::KernelTrace> trace;
  std::string trace_error;
  if (!trace_path.empty()) {
    probe.before_step = [&](uint64_t step) {
      try {
        if (step == timed_end + 1) trace = worker::KernelTrace::Start();
        if (step == timed_end + 1 + trace_steps && trace) trace->Stop(trace_path);
      } catch (const std::exception& e) {
        trace_error = e.what();
      }
    };
  }
  worker::TrainOutcome outcome;
  if (worker::IsUserCode(task->model)) {
    // In a training process, as the worker trains it (traces and memory histories are
    // taken in this process only, so not of these models).
    worker::TrainerProcessOptions trainer;
    trainer.trainer_path = worker::TrainerBesideThisProgram();
    trainer.device = device.Label();
    outcome = worker::TrainInChildProcess(trainer, assignment, collector, stops);
  } else {
    if (!memory_history_path.empty()) worker::MemoryHistory::Start(kMemoryHistoryEvents);
    outcome = worker::RunTraining(*task, device, collector, stops.cancel, probe);
    if (!memory_history_path.empty()) worker::MemoryHistory::Write(memory_history_path);
  }

  JsonLine out;
  out.Add("impl", "stoke");
  out.Add("model", spec->name());
  out.Add("notes", collector.notes);
  if (outcome.kind != worker::TrainOutcome::Kind::kSucceeded) {
    out.Add("error", outcome.message);
    std::cout << out.Text() << std::endl;
    return 1;
  }
  std::vector<double> rates, step_seconds, flops, mfu, waits;
  uint64_t peak = 0;
  for (const auto& s : collector.samples) {
    peak = std::max(peak, s.memory_peak_bytes);
    if (s.step < warmup_steps + window_steps) continue;  // a window that began in warm-up
    if (s.step > timed_end) continue;                    // the traced steps
    rates.push_back(s.samples_per_second);
    step_seconds.push_back(s.step_seconds);
    flops.push_back(s.achieved_flops);
    mfu.push_back(s.mfu);
    waits.push_back(s.data_wait_ratio);
  }
  bool graphed = false;
  int64_t batch = task->training.batch_size;
  for (const auto& note : collector.notes) {
    if (note.find("captured as a CUDA graph") != std::string::npos) graphed = true;
    // The engine's "training <name> on <device> (...): N parameters, batch B" line names
    // the batch it used (batch_size: auto included).
    const auto at = note.find(" parameters, batch ");
    if (note.rfind("training ", 0) == 0 && at != std::string::npos) {
      batch = std::stoll(note.substr(at + 19));
    }
  }
  out.Add("batch", batch);
  out.Add("samples_per_second", Median(rates));
  out.Add("step_ms", Median(step_seconds) * 1e3);
  out.Add("peak_memory_bytes", peak);
  out.Add("tflops", Median(flops) / 1e12);
  out.Add("mfu", Median(mfu));
  out.Add("data_wait_ratio", Median(waits));
  out.Add("cuda_graph", graphed);
  out.Add("windows", rates);
  if (!trace_path.empty())
    out.Add("trace", trace_error.empty() ? trace_path : "error: " + trace_error);
  std::cout << out.Text() << std::endl;
  return 0;
}

}  // namespace stoke

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);  // a training process that dies is reported, not fatal here
  try {
    return stoke::Run(argc, argv);
  } catch (const std::exception& e) {
    stoke::JsonLine out;
    out.Add("impl", "stoke");
    out.Add("error", e.what());
    std::cout << out.Text() << std::endl;
    return 1;
  }
}

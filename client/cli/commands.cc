#include "client/cli/commands.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/cli/format.h"
#include "client/cli/progress.h"
#include "formats/token_file.h"
#include "spec/job_spec_file.h"
#include "spec/preemptible.h"

namespace stoke::client {
namespace {

// A queued job's place and predicted start: "#2, in ~4:05", "#3" (no prediction yet);
// empty for a job not queued.
std::string QueueBrief(const v1::Job& job) {
  if (job.queue_position() == 0) return "";
  std::string text = absl::StrCat("#", job.queue_position());
  if (job.has_predicted_start_time()) {
    const double in = absl::ToDoubleSeconds(
        absl::FromUnixSeconds(job.predicted_start_time().seconds()) - absl::Now());
    absl::StrAppend(&text, in <= 1 ? ", starting" : absl::StrCat(", in ~", FormatSeconds(in)));
  }
  return text;
}

std::string Progress(const v1::Job& job) {
  if (std::string queued = QueueBrief(job); !queued.empty()) return queued;
  const auto& m = job.latest_metrics();
  if (m.total_steps() == 0) return "-";
  return absl::StrFormat("%d/%d", m.step(), m.total_steps());
}

// The newest evaluation, briefly: "88.10%" (accuracy), "ppl 12.31" (perplexity) or
// "loss 0.3312" (neither), "-" without one.
std::string EvalBrief(const v1::Job& job) {
  if (!job.has_latest_eval() || !job.latest_eval().has_eval()) return "-";
  const v1::EvalResult& e = job.latest_eval().eval();
  if (e.accuracy() > 0) return absl::StrFormat("%.2f%%", 100 * e.accuracy());
  if (e.perplexity() > 0) return absl::StrFormat("ppl %.2f", e.perplexity());
  return absl::StrFormat("loss %.4f", e.loss());
}

// One line per rank: which worker, on which host, on which device; and whether it holds
// the others back.
std::string Placement(const v1::Job& job) {
  std::vector<std::string> where;
  for (const auto& p : job.placement()) {
    std::string line = absl::StrCat("rank ", p.rank(), ": ", p.worker_id(), " on ", p.host(), " ",
                                    DeviceLabel(p.device()));
    for (const auto& s : job.stragglers()) {
      if (s.rank() == p.rank()) absl::StrAppend(&line, "  [straggler: ", StragglerCause(s), "]");
    }
    where.push_back(std::move(line));
  }
  return where.empty() ? "-" : absl::StrJoin(where, "\n             ");
}

int ExitForFinalState(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED ? kExitOk : kExitJobFailed;
}

}  // namespace

int Report(const CliContext& cli, const absl::Status& status) {
  const std::string message = Printable(std::string(status.message()));
  switch (status.code()) {
    case absl::StatusCode::kUnauthenticated:
      std::fprintf(stderr, "stoke: not authenticated: %s\n", message.c_str());
      return kExitUnauthenticated;
    case absl::StatusCode::kPermissionDenied:
      std::fprintf(stderr, "stoke: permission denied: %s\n", message.c_str());
      return kExitPermissionDenied;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      std::fprintf(
          stderr,
          "stoke: cannot reach a coordinator at %s: %s\n"
          "  start one with `stoke-coordinator`, or point --address / STOKE_ADDRESS at it\n",
          cli.address.c_str(), message.c_str());
      return kExitUnavailable;
    case absl::StatusCode::kInvalidArgument:
      std::fprintf(stderr, "stoke: invalid: %s\n", message.c_str());
      return kExitUsage;
    case absl::StatusCode::kNotFound:
      std::fprintf(stderr, "stoke: %s\n", message.c_str());
      return kExitNotFound;
    default:
      std::fprintf(stderr, "stoke: %s\n", message.c_str());
      return kExitError;
  }
}

namespace {

// Prints each problem as "FILE:LINE:COLUMN: FIELD: what is wrong", a line each.
int ReportProblems(const std::string& file, const std::vector<spec::JobFileProblem>& problems) {
  for (const spec::JobFileProblem& p : problems) {
    std::fprintf(stderr, "%s\n", spec::DescribeProblem(file, p).c_str());
  }
  std::fprintf(stderr, "stoke: %s: %zu problem%s; nothing was submitted\n", file.c_str(),
               problems.size(), problems.size() == 1 ? "" : "s");
  return kExitUsage;
}

// The coordinator's verdict on the job, every problem at once, placed in the file (its
// grammar's problems too: it reads the file with the same code). Sets *answered false for a
// coordinator too old to answer, or a caller it refuses (SubmitJob still checks).
absl::Status ValidateOnCoordinator(CliContext& cli, const std::string& file,
                                   const std::string& text, const v1::CodeBundle& code,
                                   bool* answered, std::vector<spec::JobFileProblem>* problems,
                                   v1::JobSpec* completed) {
  v1::ValidateJobRequest request;
  request.set_job_file(text);
  request.set_job_file_name(file);
  std::error_code ec;  // no folder to resolve against (the current one is gone): none sent
  const std::filesystem::path absolute = std::filesystem::absolute(file, ec);
  if (!ec) request.set_base_dir(absolute.parent_path().string());
  *request.mutable_code() = code;
  auto answer = cli.client.ValidateJob(request);
  // A caller who may not submit is refused by the submission itself, which the audit log
  // records.
  *answered = !absl::IsUnimplemented(answer.status()) && !absl::IsPermissionDenied(answer.status());
  if (!*answered) return absl::OkStatus();
  if (!answer.ok()) return answer.status();
  for (const v1::SpecProblem& p : answer->problems()) {
    problems->push_back(
        {p.field(), p.message(), static_cast<int>(p.line()), static_cast<int>(p.column())});
  }
  *completed = answer->completed();
  return absl::OkStatus();
}

}  // namespace

int SubmitCommand(CliContext& cli, const std::string& file, bool watch, bool dry_run) {
  auto text = spec::ReadJobFile(file);
  if (!text.ok()) {
    const std::string why(text.status().message());
    std::fprintf(stderr, "stoke: %s\n", why.c_str());
    return kExitUsage;
  }
  // Read here too, for the code to send with the job, and for a coordinator too old to
  // read job files.
  spec::ParsedJobFile parsed = spec::ParseJobFile(*text, file);
  spec::ResolveRelativePaths(parsed.spec, std::filesystem::path(file).parent_path().string());
  absl::StatusOr<v1::CodeBundle> code = v1::CodeBundle();
  if (parsed.problems.empty()) code = spec::ReadJobCode(parsed.spec);
  if (!code.ok()) {
    const std::string why(code.status().message());
    std::fprintf(stderr, "stoke: %s: %s\n", file.c_str(), why.c_str());
    return kExitUsage;
  }
  bool answered = false;
  std::vector<spec::JobFileProblem> problems;
  v1::JobSpec completed;
  if (auto s = ValidateOnCoordinator(cli, file, *text, *code, &answered, &problems, &completed);
      !s.ok()) {
    return Report(cli, s);
  }
  if (!answered) problems = parsed.problems;
  if (!problems.empty()) return ReportProblems(file, problems);
  if (dry_run && !answered) {
    std::fprintf(stderr, "stoke: the coordinator at %s cannot check a job without storing it\n",
                 cli.address.c_str());
    return kExitError;
  }
  if (dry_run) {
    if (cli.json) {
      std::cout << ToJson(completed) << std::endl;
    } else {
      std::fprintf(stderr, "%s: a valid job; nothing was submitted (--dry-run)\n", file.c_str());
    }
    return kExitOk;
  }
  auto job = cli.client.SubmitJob(parsed.spec, "", *code);
  if (!job.ok()) return Report(cli, job.status());
  if (cli.json) {
    std::cout << ToJson(*job) << std::endl;
  } else {
    std::fprintf(stderr, "submitted job %s (%s)\n", job->id().c_str(), job->spec().name().c_str());
    // The bare id is for scripts (id=$(stoke submit job.yaml)); a terminal has the line above.
    if (!isatty(STDOUT_FILENO)) {
      std::printf("%s\n", job->id().c_str());
      std::fflush(stdout);
    }
  }
  if (!watch) return kExitOk;
  return WatchCommand(cli, job->id(), 1);
}

int WatchCommand(CliContext& cli, const std::string& id, uint64_t from_seq) {
  ProgressView view(stdout, !cli.json && isatty(STDOUT_FILENO), id);
  std::optional<v1::JobState> final_state;
  WatchOptions options;
  options.from_seq = from_seq;
  auto next_device_poll = std::chrono::steady_clock::now();
  auto status = cli.client.WatchJob(
      id, options,
      [&](const v1::JobEvent& event) {
        if (cli.json) {
          std::cout << ToJsonLine(event) << std::endl;
          if (event.has_state_change()) {
            auto s = event.state_change().state();
            if (s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
                s == v1::JOB_STATE_CANCELLED) {
              final_state = s;
            }
          }
        } else {
          // The job's devices, from the workers' readings, every few seconds.
          if (event.has_metrics() && std::chrono::steady_clock::now() >= next_device_poll) {
            next_device_poll = std::chrono::steady_clock::now() + std::chrono::seconds(2);
            auto job = cli.client.GetJob(id);
            auto cluster = cli.client.GetCluster();
            if (job.ok() && cluster.ok()) {
              view.SetDeviceSummary(ProgressView::DeviceSummary(*job, *cluster));
            }
          }
          view.OnEvent(event);
        }
        return true;
      },
      [&](const absl::Status& why) {
        if (!cli.json) view.OnReconnect(std::string(why.message()));
      });
  view.Close();
  if (!status.ok()) return Report(cli, status);
  if (!final_state) final_state = view.final_state();
  return final_state ? ExitForFinalState(*final_state) : kExitError;
}

int ListCommand(CliContext& cli, const std::vector<std::string>& states, uint32_t limit, bool all,
                bool mine) {
  v1::ListJobsRequest request;
  if (mine) {
    auto me = cli.client.WhoAmI();
    if (!me.ok()) return Report(cli, me.status());
    if (!me->authentication_required()) {
      std::fprintf(stderr,
                   "stoke: --mine: this coordinator has no --auth-tokens, so jobs have no "
                   "owners; listing every job\n");
    } else {
      request.set_owner(me->name());
    }
  }
  for (const auto& text : states) {
    v1::JobState state;
    if (!v1::JobState_Parse("JOB_STATE_" + absl::AsciiStrToUpper(text), &state)) {
      std::fprintf(stderr,
                   "stoke: --state %s: expected pending, scheduled, running, succeeded, failed, "
                   "cancelled or restarting\n",
                   text.c_str());
      return kExitUsage;
    }
    request.add_states(state);
  }
  request.set_page_size(limit);
  auto pages = ReadPages<v1::ListJobsRequest, v1::ListJobsResponse>(
      request, all, [&](const v1::ListJobsRequest& r) { return cli.client.ListJobs(r); },
      [](v1::ListJobsResponse& r) { return r.mutable_jobs(); });
  if (!pages.ok()) return Report(cli, pages.status());
  const v1::ListJobsResponse& everything = *pages;
  if (cli.json) {
    std::cout << ToJson(everything) << std::endl;
    return kExitOk;
  }
  const bool colour = UseColour(STDOUT_FILENO);
  Table table(
      {"ID", "NAME", "OWNER", "STATE", "GPUS", "PROGRESS", "LOSS", "EVAL", "SUBMITTED", "MESSAGE"});
  for (const auto& job : everything.jobs()) {
    const auto& m = job.latest_metrics();
    table.AddRow({job.id(), Printable(job.spec().name()), job.owner().empty() ? "-" : job.owner(),
                  StateWord(job.state(), colour), std::to_string(job.spec().resources().gpus()),
                  Progress(job), m.total_steps() ? absl::StrFormat("%.4f", m.loss()) : "-",
                  EvalBrief(job), FormatAge(job.create_time()), Printable(job.message())});
  }
  std::cout << table.Render();
  if (!everything.next_page_token().empty()) {
    std::cout << "(more jobs: --all, or --limit N)\n";
  }
  return kExitOk;
}

int StatusCommand(CliContext& cli, const std::string& id) {
  auto job = cli.client.GetJob(id);
  if (!job.ok()) return Report(cli, job.status());
  if (cli.json) {
    std::cout << ToJson(*job) << std::endl;
    return kExitOk;
  }
  const auto& spec = job->spec();
  const auto& m = job->latest_metrics();
  std::printf("job %s (%s)\n", job->id().c_str(), spec.name().c_str());
  std::printf("  state      %s%s\n", StateWord(job->state(), UseColour(STDOUT_FILENO)).c_str(),
              job->message().empty() ? "" : ("  " + Printable(job->message())).c_str());
  std::printf("  submitted  %s\n", FormatAge(job->create_time()).c_str());
  if (job->queue_position() > 0) {
    std::string when = "no predicted start yet (a job it waits for has no step time yet)";
    if (job->has_predicted_start_time()) {
      const absl::Time at = absl::FromUnixSeconds(job->predicted_start_time().seconds());
      const double in = absl::ToDoubleSeconds(at - absl::Now());
      when = absl::StrCat("predicted to start ",
                          in <= 1 ? "now" : absl::StrCat("in about ", FormatSeconds(in)), " (",
                          absl::FormatTime("%H:%M:%S UTC", at, absl::UTCTimeZone()), ")");
    }
    std::printf("  queue      #%u; %s\n", job->queue_position(), when.c_str());
  }
  std::printf("  attempt    %u  (restarts %u of %u)\n", job->attempt(), job->restarts(),
              spec.max_restarts());
  std::printf("  devices    %u, priority %d%s\n", spec.resources().gpus(),
              spec.resources().priority(),
              spec::IsPreemptible(spec.resources()) ? ", preemptible" : "");
  if (job->preemptions() > 0) {
    std::printf("  preempted  %u time%s, %.0f device seconds lost\n", job->preemptions(),
                job->preemptions() == 1 ? "" : "s", job->preemption_lost_seconds());
  }
  if (spec.model().has_python()) {
    // Which code ran: its digest says it is the code the submitter sent.
    const auto& python = spec.model().python();
    std::printf("  model      %s.%s, code sha256 %s (%s)\n", python.module().c_str(),
                python.factory().c_str(), python.code_sha256().c_str(),
                FormatBytes(python.code_bytes()).c_str());
  }
  if (spec.has_command()) {
    const auto& command = spec.command();
    std::printf("  command    %s\n", Printable(absl::StrJoin(command.argv(), " ")).c_str());
    if (!command.code_sha256().empty()) {
      std::printf("  workdir    %s, sha256 %s (%s)\n", Printable(command.workdir()).c_str(),
                  command.code_sha256().c_str(), FormatBytes(command.code_bytes()).c_str());
    } else if (!command.workdir().empty()) {
      std::printf("  workdir    %s (on the workers)\n", Printable(command.workdir()).c_str());
    }
  }
  std::printf("  placement  %s\n", Placement(*job).c_str());
  for (const auto& straggler : job->stragglers()) {
    std::printf("  straggler  %s\n", Printable(straggler.summary()).c_str());
  }
  const std::vector<std::string> startup = DescribeStartup(*job);
  for (size_t i = 0; i < startup.size(); ++i) {
    std::printf("  %s%s\n", i == 0 ? "" : "  ", startup[i].c_str());
  }
  if (job->placement_size() > 1 && !job->rendezvous_address().empty()) {
    std::printf("  rendezvous %s\n", job->rendezvous_address().c_str());
  }
  if (m.total_steps() > 0) {
    std::printf("  progress   step %llu/%llu, loss %.4f, %s samples/s, %s elapsed\n",
                static_cast<unsigned long long>(m.step()),
                static_cast<unsigned long long>(m.total_steps()), m.loss(),
                FormatRate(m.samples_per_second()).c_str(),
                FormatClock(m.elapsed_seconds()).c_str());
    if (!spec.has_command()) {  // Stoke's loop measures these; a script does not
      std::printf("  step time  %.1f ms, waiting for data %.1f%%", m.step_seconds() * 1e3,
                  m.data_wait_ratio() * 100);
      if (m.samples_skipped() > 0) {
        std::printf(", %llu damaged samples skipped",
                    static_cast<unsigned long long>(m.samples_skipped()));
      }
      if (job->placement_size() > 1) {
        std::printf(", waiting for gradient all-reduce %.1f%%", m.comm_wait_ratio() * 100);
      }
      std::printf("\n");
    }
  }
  if (job->has_latest_eval() && job->latest_eval().has_eval()) {
    std::printf("  eval       %s\n", ProgressView::EvalText(job->latest_eval()).c_str());
  }
  if (m.scalars_size() > 0) {
    // Sorted, so that the line reads the same from one call to the next.
    const std::map<std::string, double> scalars(m.scalars().begin(), m.scalars().end());
    std::string text;
    for (const auto& [name, value] : scalars) {
      absl::StrAppend(&text, text.empty() ? "" : ", ", name, " ", absl::StrFormat("%.4g", value));
    }
    std::printf("  reported   %s\n", Printable(text).c_str());
  }
  return kExitOk;
}

int CancelCommand(CliContext& cli, const std::string& id, const std::string& reason) {
  auto job = cli.client.CancelJob(id, reason);
  if (!job.ok()) return Report(cli, job.status());
  if (cli.json) {
    std::cout << ToJson(*job) << std::endl;
  } else {
    std::printf("job %s %s\n", job->id().c_str(), ShortStateName(job->state()).c_str());
  }
  return kExitOk;
}

int PriorityCommand(CliContext& cli, const std::string& id, int32_t priority) {
  auto job = cli.client.SetJobPriority(id, priority);
  if (!job.ok()) return Report(cli, job.status());
  if (cli.json) {
    std::cout << ToJson(*job) << std::endl;
  } else {
    std::printf("job %s priority %d (%s)\n", job->id().c_str(), job->spec().resources().priority(),
                ShortStateName(job->state()).c_str());
  }
  return kExitOk;
}

int ClusterCommand(CliContext& cli) {
  auto cluster = cli.client.GetCluster();
  if (!cluster.ok()) return Report(cli, cluster.status());
  if (cli.json) {
    std::cout << ToJson(*cluster) << std::endl;
    return kExitOk;
  }
  Table table({"WORKER", "HOST", "DEVICE", "NAME", "MEMORY", "STATE", "JOB", "LAST SEEN"});
  int busy = 0;
  for (const auto& w : cluster->workers()) {
    if (w.state() != v1::WORKER_STATE_IDLE) ++busy;
    table.AddRow({w.id(), w.host(), DeviceLabel(w.device()), w.device().name(),
                  FormatBytes(w.device().memory_total_bytes()), ShortWorkerState(w.state()),
                  w.job_id().empty() ? "-" : absl::StrCat(w.job_id(), " (rank ", w.rank(), ")"),
                  FormatAge(w.last_heartbeat())});
  }
  std::cout << table.Render();
  std::printf("%d workers (%d busy), %u jobs running, %u queued; coordinator %s\n",
              cluster->workers_size(), busy, cluster->running_jobs(), cluster->queued_jobs(),
              cluster->coordinator_version().c_str());
  return kExitOk;
}

int QuotaCommand(CliContext& cli) {
  auto cluster = cli.client.GetCluster();
  if (!cluster.ok()) return Report(cli, cluster.status());
  if (cli.json) {
    v1::Cluster sharing;
    *sharing.mutable_quotas() = cluster->quotas();
    *sharing.mutable_owners() = cluster->owners();
    std::cout << ToJson(sharing) << std::endl;
    return kExitOk;
  }
  if (cluster->quotas_size() == 0) {
    std::printf("no quota groups (stoke-coordinator --quotas FILE sets them)\n");
  } else {
    Table groups(
        {"GROUP", "OWNERS", "GPUS USED", "GPUS GUARANTEED", "CPUS USED", "CPUS GUARANTEED"});
    for (const auto& q : cluster->quotas()) {
      groups.AddRow({q.group(), absl::StrJoin(q.owners(), ","), absl::StrCat(q.used_gpus()),
                     absl::StrCat(q.guaranteed_gpus()), absl::StrCat(q.used_cpus()),
                     absl::StrCat(q.guaranteed_cpus())});
    }
    std::cout << groups.Render();
  }
  // Fair share: the less recent use, the sooner an owner's job goes among equal priorities.
  Table owners({"OWNER", "GROUP", "RUNNING", "QUEUED", "RECENT DEVICE-HOURS"});
  for (const auto& o : cluster->owners()) {
    owners.AddRow({o.owner().empty() ? "(anonymous)" : o.owner(),
                   o.group().empty() ? "-" : o.group(), absl::StrCat(o.running_jobs()),
                   absl::StrCat(o.queued_jobs()),
                   absl::StrFormat("%.2f", o.recent_device_hours())});
  }
  std::cout << owners.Render();
  return kExitOk;
}

namespace {

// --since: "10m" back from now, or an RFC 3339 time.
absl::StatusOr<absl::Time> ParseSince(const std::string& since) {
  absl::Duration back;
  if (absl::ParseDuration(since, &back) && back >= absl::ZeroDuration()) return absl::Now() - back;
  absl::Time when;
  std::string error;
  if (absl::ParseTime(absl::RFC3339_full, since, &when, &error)) return when;
  return absl::InvalidArgumentError(
      absl::StrCat("--since: ", since,
                   " is neither a duration (10m, 1h30m) nor an RFC 3339 time "
                   "(2026-12-06T10:00:00Z)"));
}

}  // namespace

int LogsCommand(CliContext& cli, const std::string& id, bool follow, const LogsOptions& options) {
  absl::Time since = absl::InfinitePast();
  if (!options.since.empty()) {
    auto parsed = ParseSince(options.since);
    if (!parsed.ok()) {
      std::fprintf(stderr, "stoke: %s\n", absl::StrCat(parsed.status().message()).c_str());
      return kExitUsage;
    }
    since = *parsed;
  }
  uint64_t last_seq = 0;
  if (!follow) {
    auto job = cli.client.GetJob(id);
    if (!job.ok()) return Report(cli, job.status());
    last_seq = job->last_event_seq();
    if (last_seq == 0) return kExitOk;
  }
  auto status = cli.client.WatchJob(id, WatchOptions{}, [&](const v1::JobEvent& event) {
    const absl::Time time =
        absl::FromUnixSeconds(event.time().seconds()) + absl::Nanoseconds(event.time().nanos());
    const bool shown = (event.has_log() || event.has_state_change()) && time >= since;
    if (shown && cli.json) {
      std::printf("%s\n", ToJsonLine(event).c_str());
    } else if (shown) {
      const std::string when =
          options.timestamps
              ? absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone()),
                             " ")
              : "";
      if (event.has_log()) {
        std::printf("%s[rank %u] %s\n", when.c_str(), event.log().rank(),
                    Printable(event.log().text()).c_str());
      } else {
        const auto& change = event.state_change();
        std::printf("%s-- %s%s%s\n", when.c_str(), ShortStateName(change.state()).c_str(),
                    change.message().empty() ? "" : ": ", Printable(change.message()).c_str());
      }
    }
    std::fflush(stdout);
    return follow || event.seq() < last_seq;
  });
  if (!status.ok()) return Report(cli, status);
  return kExitOk;
}

int CheckpointsCommand(CliContext& cli, const std::string& id) {
  auto checkpoints = cli.client.ListCheckpoints(id);
  if (!checkpoints.ok()) return Report(cli, checkpoints.status());
  if (cli.json) {
    std::cout << ToJson(*checkpoints) << std::endl;
    return kExitOk;
  }
  if (checkpoints->checkpoints().empty()) {
    std::printf("job %s has no checkpoints yet\n", id.c_str());
    return kExitOk;
  }
  Table table({"STEP", "WRITTEN", "SIZE", "PATH"});
  for (const auto& c : checkpoints->checkpoints()) {
    table.AddRow({std::to_string(c.step()), FormatAge(c.write_time()), FormatBytes(c.size_bytes()),
                  c.path()});
  }
  std::cout << table.Render();
  return kExitOk;
}

int ExportCommand(CliContext& cli, const std::string& id, const std::string& path, uint64_t step,
                  const std::string& format) {
  const v1::ModelFormat chosen = format == "state_dict"    ? v1::MODEL_FORMAT_STATE_DICT
                                 : format == "safetensors" ? v1::MODEL_FORMAT_SAFETENSORS
                                 : format == "torchscript" ? v1::MODEL_FORMAT_TORCHSCRIPT
                                 : format == "libtorch"    ? v1::MODEL_FORMAT_LIBTORCH_ARCHIVE
                                                           : v1::MODEL_FORMAT_UNSPECIFIED;
  auto download = cli.client.DownloadModel(id, step, path, chosen);
  if (!download.ok()) return Report(cli, download.status());
  std::printf("wrote the model of job %s at step %llu (%s) to %s\n", id.c_str(),
              static_cast<unsigned long long>(download->step), FormatBytes(download->bytes).c_str(),
              path.c_str());
  return kExitOk;
}

int TokenizeCommand(const std::string& text_path, const std::string& token_path) {
  auto tokens = data::TokenizeBytes(text_path, token_path);
  if (!tokens.ok()) {
    std::fprintf(stderr, "stoke: %s\n", std::string(tokens.status().message()).c_str());
    return tokens.status().code() == absl::StatusCode::kNotFound ? kExitUsage : kExitError;
  }
  std::printf("wrote %lld byte-level tokens (vocabulary 256) to %s\n",
              static_cast<long long>(*tokens), token_path.c_str());
  return kExitOk;
}

}  // namespace stoke::client

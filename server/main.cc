// stoke-coordinator: reads its flags (coordinator_flags.h), then runs the process that
// wires the job store, the core, the gRPC services, /metrics and the local workers
// together and takes them down in order on SIGINT or SIGTERM (coordinator_process.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <utility>

#include "server/coordinator_flags.h"
#include "server/coordinator_process.h"
#include "spec/flag_sources.h"

int main(int argc, char** argv) {
  try {
    CLI::App app{
        "stoke-coordinator: queues training jobs and gang-schedules them onto GPU workers"};
    stoke::server::CoordinatorFlags flags;
    stoke::server::AddCoordinatorFlags(app, &flags);
    stoke::spec::AddFlagSources(app, "STOKE_COORDINATOR_");
    if (const auto exit = stoke::spec::ParseFlags(app, argc, argv)) return *exit;
    stoke::server::CoordinatorProcess process(std::move(flags));
    return process.Run(argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoke-coordinator: %s\n", e.what());
    return 1;
  }
}

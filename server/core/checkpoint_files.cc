#include "server/core/checkpoint_files.h"

#include <algorithm>
#include <filesystem>

namespace fs = std::filesystem;

namespace stoke::server {

std::vector<CheckpointFiles> ListCheckpointFiles(const std::string& job_dir) {
  std::vector<CheckpointFiles> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(job_dir) / "checkpoints", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || name.size() == 5 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos) {
      continue;  // in-progress temporaries and anything else
    }
    if (!fs::exists(entry.path() / "state.pt", ec)) continue;
    CheckpointFiles files;
    files.step = std::stoull(name.substr(5));
    files.path = entry.path().string();
    for (const auto& file : fs::directory_iterator(entry.path(), ec)) {
      files.size_bytes += fs::file_size(file.path(), ec);
    }
    const auto mtime = fs::last_write_time(entry.path() / "state.pt", ec);
    // file_clock to system time: the difference of "now" on both clocks.
    const auto system =
        std::chrono::system_clock::now() + (mtime - fs::file_time_type::clock::now());
    files.write_time = absl::FromChrono(system);
    found.push_back(std::move(files));
  }
  std::sort(found.begin(), found.end(),
            [](const CheckpointFiles& a, const CheckpointFiles& b) { return a.step < b.step; });
  return found;
}

}  // namespace stoke::server

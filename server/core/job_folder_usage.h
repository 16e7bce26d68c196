// What job folders hold on disk, per owner: the measure behind --max-job-bytes-per-owner.
// Folders are walked without following links, so a link planted in one (any worker host
// may write there) neither counts what it points at nor leads the walk out of the folder.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace stoke::server {

// Bytes the regular files beneath `dir` take on disk (allocated blocks, so a sparse file
// counts what it holds). Unreadable entries count nothing; 0 if `dir` is no folder.
uint64_t FolderBytes(const std::string& dir);

// The bytes of each <jobs_dir>/<id> folder, summed by the owner `owner_of` gives for the
// id. A folder it knows no owner for (nullopt) is left out.
std::map<std::string, uint64_t> BytesPerOwner(
    const std::string& jobs_dir,
    const std::function<std::optional<std::string>(const std::string& job_id)>& owner_of);

}  // namespace stoke::server

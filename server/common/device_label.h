// How the coordinator names a device in logs, diagnoses and metric labels: "cuda:0", "cpu:1".
#pragma once

#include <string>

#include "absl/strings/str_cat.h"
#include "stoke/v1/job.pb.h"

namespace stoke::server {

inline std::string DeviceLabel(const v1::Device& device) {
  return absl::StrCat(device.type() == v1::DEVICE_TYPE_CUDA ? "cuda:" : "cpu:", device.index());
}

}  // namespace stoke::server

#include "formats/array_set.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace stoke::data {
namespace {

absl::Status Invalid(const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat("data.arrays.", field, ": ", problem));
}

// A reader's status with the field in front; its code kept (NOT_FOUND may yet appear).
absl::Status InField(const std::string& field, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("data.arrays.", field, ": ", status.message()));
}

absl::StatusOr<std::shared_ptr<const ArrayFile>> OpenField(const std::string& field,
                                                           const std::string& name,
                                                           const ReadOptions& options) {
  if (name.empty()) return Invalid(field, "required");
  auto file = ArrayFile::Open(name, options);
  if (!file.ok()) return InField(field, file.status());
  return file;
}

bool IsChannelCount(int64_t c) { return c == 1 || c == 3 || c == 4; }

// The validation arrays must hold samples like the training ones.
absl::Status SameRows(const std::string& field, const ArrayFile& val, const ArrayFile& train) {
  if (val.dtype() != train.dtype() || val.row_shape() != train.row_shape()) {
    return Invalid(
        field, absl::StrCat(val.name(), " is ", DescribeArray(val),
                            "; its rows must be like the training rows of ", DescribeArray(train)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string DescribeArray(const ArrayFile& array) {
  return absl::StrCat(DtypeName(array.dtype()), " [", absl::StrJoin(array.shape(), ", "), "]");
}

SampleLayout LayoutOfSample(ArrayDtype dtype, const std::vector<int64_t>& row) {
  SampleLayout layout;
  layout.sample = row;
  if (dtype != ArrayDtype::kUInt8 || (row.size() != 2 && row.size() != 3)) return layout;
  layout.images = true;
  if (row.size() == 2) {
    layout.sample = {1, row[0], row[1]};
  } else if (!IsChannelCount(row[0]) && IsChannelCount(row[2])) {
    layout.channels_last = true;
    layout.sample = {row[2], row[0], row[1]};
  }
  return layout;
}

absl::StatusOr<ArraySet> OpenArraySet(const ArrayNames& names, const ReadOptions& options) {
  ArraySet set;
  auto inputs = OpenField("inputs", names.inputs, options);
  if (!inputs.ok()) return inputs.status();
  auto targets = OpenField("targets", names.targets, options);
  if (!targets.ok()) return targets.status();
  set.inputs = *inputs;
  set.targets = *targets;
  if (set.inputs->rows() != set.targets->rows()) {
    return Invalid("targets",
                   absl::StrCat(set.targets->name(), " has ", set.targets->rows(),
                                " rows and data.arrays.inputs ", set.inputs->name(), " has ",
                                set.inputs->rows(), ": row i of each is sample i"));
  }
  if (names.val_inputs.empty() != names.val_targets.empty()) {
    return Invalid(names.val_inputs.empty() ? "val_inputs" : "val_targets",
                   "required with the other: held-out samples need both");
  }
  if (!names.val_inputs.empty()) {
    auto val_inputs = OpenField("val_inputs", names.val_inputs, options);
    if (!val_inputs.ok()) return val_inputs.status();
    auto val_targets = OpenField("val_targets", names.val_targets, options);
    if (!val_targets.ok()) return val_targets.status();
    set.val_inputs = *val_inputs;
    set.val_targets = *val_targets;
    if (auto s = SameRows("val_inputs", *set.val_inputs, *set.inputs); !s.ok()) return s;
    if (auto s = SameRows("val_targets", *set.val_targets, *set.targets); !s.ok()) return s;
    if (set.val_inputs->rows() != set.val_targets->rows()) {
      return Invalid("val_targets",
                     absl::StrCat(set.val_targets->name(), " has ", set.val_targets->rows(),
                                  " rows and data.arrays.val_inputs has ", set.val_inputs->rows()));
    }
    set.train_rows = set.inputs->rows();
    set.val_end = set.val_inputs->rows();
  } else {
    if (!(names.val_fraction > 0 && names.val_fraction < 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.arrays.val_fraction: must lie between 0 and 1, not ", names.val_fraction));
    }
    const int64_t rows = set.inputs->rows();
    const int64_t held_out = std::max<int64_t>(
        1, static_cast<int64_t>(std::floor(static_cast<double>(rows) * names.val_fraction)));
    if (rows - held_out < 1) {
      return Invalid("inputs", absl::StrCat(set.inputs->name(), " has ", rows,
                                            " rows: too few to hold out a validation share"));
    }
    set.val_inputs = set.inputs;
    set.val_targets = set.targets;
    set.train_rows = rows - held_out;
    set.val_begin = set.train_rows;
    set.val_end = rows;
  }

  // What the inputs are.
  const std::vector<int64_t> row = set.inputs->row_shape();
  if (row.empty()) {
    return Invalid("inputs", absl::StrCat(set.inputs->name(), " is ", DescribeArray(*set.inputs),
                                          ": each sample needs at least one feature"));
  }
  const SampleLayout layout = LayoutOfSample(set.inputs->dtype(), row);
  set.images = layout.images;
  set.channels_last = layout.channels_last;
  set.sample = layout.sample;

  // What the targets are.
  if (IsInteger(set.targets->dtype())) {
    int64_t min = 0, max = 0;
    if (auto s = set.targets->IntegerRange(0, set.targets->rows(), &min, &max, options); !s.ok()) {
      return InField("targets", s);
    }
    if (set.val_targets != set.targets) {
      int64_t val_min = 0, val_max = 0;
      if (auto s = set.val_targets->IntegerRange(0, set.val_targets->rows(), &val_min, &val_max,
                                                 options);
          !s.ok()) {
        return InField("val_targets", s);
      }
      min = std::min(min, val_min);
      max = std::max(max, val_max);
    }
    if (min < 0) {
      return Invalid("targets", absl::StrCat(set.targets->name(), " holds label ", min,
                                             ": class indices start at 0"));
    }
    if (max < 1) {
      return Invalid("targets",
                     absl::StrCat(set.targets->name(), " holds one class only (every label is 0)"));
    }
    set.num_classes = max + 1;
  } else {
    const std::vector<int64_t> target = set.targets->row_shape();
    set.regression = target.empty() ? std::vector<int64_t>{1} : target;
  }
  return set;
}

}  // namespace stoke::data

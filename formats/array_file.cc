#include "formats/array_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace stoke::data {
namespace {

constexpr const char* kTrainable = "uint8, int32, int64, float16, bfloat16 or float32";
// A safetensors header larger than this is no header: the format caps it at 100 MB.
constexpr uint64_t kMaxSafetensorsHeader = 100u << 20;
// More dimensions than this are no array's: NumPy's own limit (NPY_MAXDIMS in NumPy 2;
// 32 before) and PyTorch's. Refused before the shape is kept or quoted in a message.
constexpr size_t kMaxDimensions = 64;

struct Layout {
  ArrayDtype dtype = ArrayDtype::kUInt8;
  std::vector<int64_t> shape;
  size_t offset = 0;  // of the first element, from the start of the file
};

absl::Status Bad(const std::string& name, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", problem));
}

// A safetensors header nests three deep at most (the header object, a tensor's entry, its
// shape or data_offsets) and holds a few values per tensor: more than kMaxHeaderValues of
// them (tens of thousands of tensors; a data set holds a few) is no header Stoke reads.
// Checked by walking the JSON before it is parsed into a document, which costs ten to
// twenty times its text (a 100 MB header of "[]," would take 2 GB).
constexpr int kMaxHeaderDepth = 3;
constexpr int64_t kMaxHeaderValues = int64_t{1} << 18;

class HeaderBounds : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool exceeded() const { return exceeded_; }

  bool null() override { return Value(); }
  bool boolean(bool /*value*/) override { return Value(); }
  bool number_integer(number_integer_t /*value*/) override { return Value(); }
  bool number_unsigned(number_unsigned_t /*value*/) override { return Value(); }
  bool number_float(number_float_t /*value*/, const string_t& /*text*/) override { return Value(); }
  bool string(string_t& /*value*/) override { return Value(); }
  bool binary(binary_t& /*value*/) override { return Value(); }
  bool key(string_t& /*value*/) override { return Value(); }
  bool start_object(std::size_t /*elements*/) override { return Open(); }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t /*elements*/) override { return Open(); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t /*position*/, const std::string& /*token*/,
                   const nlohmann::detail::exception& /*error*/) override {
    return false;
  }

 private:
  bool Value() {
    exceeded_ = ++values_ > kMaxHeaderValues;
    return !exceeded_;
  }
  bool Open() {
    exceeded_ = ++depth_ > kMaxHeaderDepth;
    return !exceeded_ && Value();
  }
  bool Close() {
    --depth_;
    return true;
  }

  int depth_ = 0;
  int64_t values_ = 0;
  bool exceeded_ = false;
};

// The header's JSON as a document; INVALID_ARGUMENT naming `name` when it is no JSON
// object, or larger than any safetensors header Stoke reads (HeaderBounds).
absl::StatusOr<nlohmann::json> ParseHeaderJson(const std::string& name, const uint8_t* begin,
                                               const uint8_t* end) {
  HeaderBounds bounds;
  nlohmann::json::sax_parse(begin, end, &bounds);
  if (bounds.exceeded()) {
    return Bad(name, absl::StrCat("a safetensors header nested deeper than ", kMaxHeaderDepth,
                                  " or of more than ", kMaxHeaderValues,
                                  " values: more than Stoke reads"));
  }
  auto header = nlohmann::json::parse(begin, end, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return Bad(name, "not a safetensors file (its header is not a JSON object)");
  }
  return header;
}

// The elements `shape` holds, or -1 when a dimension is negative or the product exceeds
// what any file holds.
int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

// The data after the header must be exactly the array: a shorter file was cut off; a
// longer one is not what its header says.
absl::Status CheckSize(const std::string& name, const Layout& layout, size_t file_bytes) {
  const int64_t elements = Elements(layout.shape);
  int64_t bytes = 0;
  if (elements < 0 || __builtin_mul_overflow(elements, ElementBytes(layout.dtype), &bytes)) {
    return Bad(name, "its shape is larger than any file");
  }
  const uint64_t available = file_bytes - layout.offset;
  if (static_cast<uint64_t>(bytes) > available) {
    return Bad(name, absl::StrCat("the header promises ", bytes, " bytes of data, the file holds ",
                                  available, "; was it cut off?"));
  }
  if (layout.shape.empty()) return Bad(name, "a scalar: arrays of samples need a first dimension");
  if (layout.shape[0] == 0) return Bad(name, "holds no samples (its first dimension is 0)");
  // Rows of no bytes would let the first dimension claim any count (2^62 rows in a file
  // of a hundred bytes) that readers then loop over or size buffers by: the rows must be
  // in the file.
  for (size_t i = 1; i < layout.shape.size(); ++i) {
    if (layout.shape[i] == 0) {
      return Bad(name, absl::StrCat("its samples hold no values (dimension ", i, " is 0)"));
    }
  }
  return absl::OkStatus();
}

// The value of `key` in a .npy header, a Python dict literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }.
std::string NpyValue(const std::string& header, const std::string& key) {
  const size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) return "";
  size_t begin = header.find(':', at);
  if (begin == std::string::npos) return "";
  begin = header.find_first_not_of(' ', begin + 1);
  if (begin == std::string::npos) return "";
  const char open = header[begin];
  const char close = open == '(' ? ')' : open == '\'' ? '\'' : ',';
  const size_t end = header.find(close, begin + 1);
  if (end == std::string::npos) return "";
  return open == '(' || open == '\'' ? header.substr(begin, end - begin + 1)
                                     : header.substr(begin, end - begin);
}

// `size` bytes of a .npy file or member of `whole` bytes (its head, when fewer).
absl::StatusOr<Layout> ParseNpy(const std::string& name, const uint8_t* p, size_t size,
                                uint64_t whole) {
  if (size < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0) {
    return Bad(name, "not a .npy file (it does not start with NumPy's magic bytes)");
  }
  const int major = p[6];
  size_t header_bytes = 0;
  size_t header_at = 0;
  if (major == 1) {
    header_bytes = p[8] | (size_t{p[9]} << 8);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) return Bad(name, "a .npy header cut off");
    header_bytes = p[8] | (size_t{p[9]} << 8) | (size_t{p[10]} << 16) | (size_t{p[11]} << 24);
    header_at = 12;
  } else {
    return Bad(name, absl::StrCat(".npy format version ", major, " is not one Stoke reads (1-3)"));
  }
  if (header_bytes > whole - header_at) return Bad(name, "a .npy header cut off");
  if (header_bytes > size - header_at) {
    return Bad(name, absl::StrCat("a .npy header of ", header_bytes, " bytes, more than the ",
                                  size - header_at, " Stoke reads of one"));
  }
  const std::string header(reinterpret_cast<const char*>(p + header_at), header_bytes);
  const std::string descr = NpyValue(header, "descr");
  const std::string fortran = NpyValue(header, "fortran_order");
  const std::string shape = NpyValue(header, "shape");
  if (descr.size() < 3 || shape.size() < 2) {
    return Bad(name, "a .npy header without descr and shape");
  }
  if (fortran.find("True") != std::string::npos) {
    return Bad(name,
               "saved in Fortran order; save it in C order (numpy.ascontiguousarray) to train "
               "from it");
  }
  Layout layout;
  layout.offset = header_at + header_bytes;
  const std::string type = descr.substr(1, descr.size() - 2);
  if (type == "|u1" || type == "<u1" || type == "u1") {
    layout.dtype = ArrayDtype::kUInt8;
  } else if (type == "<i4") {
    layout.dtype = ArrayDtype::kInt32;
  } else if (type == "<i8") {
    layout.dtype = ArrayDtype::kInt64;
  } else if (type == "<f2") {
    layout.dtype = ArrayDtype::kFloat16;
  } else if (type == "<f4") {
    layout.dtype = ArrayDtype::kFloat32;
  } else {
    return Bad(name, absl::StrCat("dtype ", type, " is not one Stoke trains on (", kTrainable,
                                  type == "<f8" ? "; save float64 as float32" : "", ")"));
  }
  // "(3, 4)", "(5,)", "()".
  for (size_t i = 1; i + 1 < shape.size();) {
    while (i + 1 < shape.size() && (shape[i] == ' ' || shape[i] == ',')) ++i;
    if (i + 1 >= shape.size()) break;
    char* end = nullptr;
    const int64_t d = std::strtoll(shape.c_str() + i, &end, 10);
    if (end == shape.c_str() + i) return Bad(name, "a .npy header whose shape is not numbers");
    if (layout.shape.size() == kMaxDimensions) {
      return Bad(name, absl::StrCat("a shape of more than ", kMaxDimensions, " dimensions"));
    }
    layout.shape.push_back(d);
    i = static_cast<size_t>(end - shape.c_str());
  }
  return layout;
}

absl::StatusOr<Layout> ParseSafetensors(const std::string& name, const std::string& tensor,
                                        const uint8_t* p, size_t size) {
  uint64_t header_bytes = 0;
  if (size >= 8) std::memcpy(&header_bytes, p, 8);  // little-endian, as every host is
  if (size < 8 || header_bytes > kMaxSafetensorsHeader || header_bytes > size - 8) {
    return Bad(name, "not a safetensors file (its first 8 bytes give no header length that fits)");
  }
  auto parsed = ParseHeaderJson(name, p + 8, p + 8 + header_bytes);
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& header = *parsed;
  std::vector<std::string> names;
  for (const auto& [key, value] : header.items()) {
    if (key != "__metadata__") names.push_back(key);
  }
  std::string chosen = tensor;
  if (chosen.empty()) {
    if (names.size() != 1) {
      return Bad(name, absl::StrCat("holds ", names.size(),
                                    " tensors; name one after a colon (FILE:NAME): ",
                                    absl::StrJoin(names, ", ")));
    }
    chosen = names[0];
  } else if (!header.contains(chosen) || chosen == "__metadata__") {
    return Bad(
        name, absl::StrCat("no tensor named ", chosen, "; it holds: ", absl::StrJoin(names, ", ")));
  }
  const auto& entry = header[chosen];
  static const std::pair<const char*, ArrayDtype> kDtypes[] = {
      {"U8", ArrayDtype::kUInt8},      {"I32", ArrayDtype::kInt32},
      {"I64", ArrayDtype::kInt64},     {"F16", ArrayDtype::kFloat16},
      {"BF16", ArrayDtype::kBFloat16}, {"F32", ArrayDtype::kFloat32}};
  if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
      !entry.contains("shape") || !entry["shape"].is_array() || !entry.contains("data_offsets") ||
      !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
    return Bad(name, absl::StrCat("tensor ", chosen,
                                  ": its header entry lacks dtype, shape or "
                                  "data_offsets"));
  }
  const std::string dtype = entry["dtype"].get<std::string>();
  const auto known = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                                  [&](const auto& d) { return dtype == d.first; });
  if (known == std::end(kDtypes)) {
    return Bad(name, absl::StrCat("tensor ", chosen, ": dtype ", dtype,
                                  " is not one Stoke trains on (", kTrainable, ")"));
  }
  Layout layout;
  layout.dtype = known->second;
  if (entry["shape"].size() > kMaxDimensions) {
    return Bad(name, absl::StrCat("tensor ", chosen, ": a shape of more than ", kMaxDimensions,
                                  " dimensions"));
  }
  for (const auto& d : entry["shape"]) {
    if (!d.is_number_integer()) return Bad(name, absl::StrCat("tensor ", chosen, ": bad shape"));
    layout.shape.push_back(d.get<int64_t>());
  }
  const auto& offsets = entry["data_offsets"];
  if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
    return Bad(name, absl::StrCat("tensor ", chosen, ": bad data_offsets"));
  }
  const uint64_t begin = offsets[0].get<uint64_t>();
  const uint64_t end = offsets[1].get<uint64_t>();
  const uint64_t data_bytes = size - 8 - header_bytes;
  if (begin > end || end > data_bytes) {
    return Bad(name, absl::StrCat("tensor ", chosen, ": its data_offsets [", begin, ", ", end,
                                  ") lie outside the file's ", data_bytes, " bytes of data"));
  }
  const int64_t elements = Elements(layout.shape);
  if (elements < 0 || static_cast<uint64_t>(elements) * ElementBytes(layout.dtype) != end - begin) {
    return Bad(name, absl::StrCat("tensor ", chosen, ": its shape and dtype take other than the ",
                                  end - begin, " bytes its data_offsets span"));
  }
  layout.offset = 8 + header_bytes + begin;
  return layout;
}

template <typename T>
void Widen(const uint8_t* p, int64_t n, int64_t* min, int64_t* max) {
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    *min = std::min<int64_t>(*min, v);
    *max = std::max<int64_t>(*max, v);
  }
}

}  // namespace

const char* DtypeName(ArrayDtype dtype) {
  switch (dtype) {
    case ArrayDtype::kUInt8:
      return "uint8";
    case ArrayDtype::kInt32:
      return "int32";
    case ArrayDtype::kInt64:
      return "int64";
    case ArrayDtype::kFloat16:
      return "float16";
    case ArrayDtype::kBFloat16:
      return "bfloat16";
    case ArrayDtype::kFloat32:
      return "float32";
  }
  return "?";
}

int64_t ElementBytes(ArrayDtype dtype) {
  switch (dtype) {
    case ArrayDtype::kUInt8:
      return 1;
    case ArrayDtype::kFloat16:
    case ArrayDtype::kBFloat16:
      return 2;
    case ArrayDtype::kInt32:
    case ArrayDtype::kFloat32:
      return 4;
    case ArrayDtype::kInt64:
      return 8;
  }
  return 1;
}

absl::StatusOr<NpyHeader> ReadNpyHeader(const std::string& name, const uint8_t* bytes, size_t size,
                                        int64_t whole) {
  const uint64_t all = whole < 0 ? size : std::max<uint64_t>(static_cast<uint64_t>(whole), size);
  auto layout = ParseNpy(name, bytes, size, all);
  if (!layout.ok()) return layout.status();
  NpyHeader header;
  header.dtype = layout->dtype;
  header.shape = layout->shape;
  header.data_offset = layout->offset;
  const int64_t elements = Elements(layout->shape);
  if (elements < 0 ||
      __builtin_mul_overflow(elements, ElementBytes(layout->dtype), &header.data_bytes)) {
    return Bad(name, "its shape is larger than any file");
  }
  if (static_cast<uint64_t>(header.data_bytes) > all - layout->offset) {
    return Bad(name, absl::StrCat("the header promises ", header.data_bytes, " bytes of data, ",
                                  all - layout->offset, " follow; was it cut off?"));
  }
  return header;
}

std::pair<std::string, std::string> SplitArrayName(const std::string& name) {
  const std::string suffix = ".safetensors:";
  const size_t at = name.rfind(suffix);
  if (at == std::string::npos) return {name, ""};
  return {name.substr(0, at + suffix.size() - 1), name.substr(at + suffix.size())};
}

absl::StatusOr<std::vector<std::string>> ListArrays(const std::string& path,
                                                    const ReadOptions& options) {
  if (path.size() < 12 || path.rfind(".safetensors") != path.size() - 12) return {{path}};
  long long size = 0;  // NOLINT(google-runtime-int): OpenDataFile's type
  auto opened = OpenDataFile(path, options, &size);
  if (!opened.ok()) return opened.status();
  uint64_t header_bytes = 0;
  std::string header;
  bool read = size >= 8 && pread(*opened, &header_bytes, 8, 0) == 8 &&
              header_bytes <= kMaxSafetensorsHeader &&
              header_bytes <= static_cast<uint64_t>(size) - 8;
  if (read) {
    header.resize(header_bytes);
    read = pread(*opened, header.data(), header_bytes, 8) == static_cast<ssize_t>(header_bytes);
  }
  close(*opened);
  if (!read) return Bad(path, "not a safetensors file (no JSON header that fits)");
  const auto* text = reinterpret_cast<const uint8_t*>(header.data());
  auto parsed = ParseHeaderJson(path, text, text + header.size());
  if (!parsed.ok()) return parsed.status();
  std::vector<std::string> names;
  for (const auto& [key, value] : parsed->items()) {
    if (key != "__metadata__") names.push_back(absl::StrCat(path, ":", key));
  }
  return names;
}

absl::StatusOr<std::shared_ptr<const ArrayFile>> ArrayFile::Open(const std::string& name,
                                                                 const ReadOptions& options) {
  const auto [path, tensor] = SplitArrayName(name);
  const bool safetensors = path.size() >= 12 && path.rfind(".safetensors") == path.size() - 12;
  const bool npy = path.size() >= 4 && path.rfind(".npy") == path.size() - 4;
  if (!safetensors && !npy) {
    return Bad(name, "not an array file Stoke reads (.npy, or .safetensors[:TENSOR])");
  }
  long long size = 0;  // NOLINT(google-runtime-int): OpenDataFile's type
  auto opened = OpenDataFile(path, options, &size);
  if (!opened.ok()) return opened.status();
  if (size == 0) {
    close(*opened);
    return Bad(name, "empty");
  }
  void* map = mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, *opened, 0);
  close(*opened);
  if (map == MAP_FAILED) {
    return absl::UnavailableError(absl::StrCat(path, ": cannot map: ", std::strerror(errno)));
  }
  std::shared_ptr<ArrayFile> file(new ArrayFile());
  file->name_ = name;
  file->map_ = map;
  file->map_bytes_ = static_cast<size_t>(size);
  const auto* bytes = static_cast<const uint8_t*>(map);
  auto layout = safetensors ? ParseSafetensors(name, tensor, bytes, file->map_bytes_)
                            : ParseNpy(name, bytes, file->map_bytes_, file->map_bytes_);
  if (!layout.ok()) return layout.status();
  if (auto s = CheckSize(name, *layout, file->map_bytes_); !s.ok()) return s;
  file->dtype_ = layout->dtype;
  file->shape_ = layout->shape;
  file->data_ = bytes + layout->offset;
  file->row_bytes_ = ElementBytes(layout->dtype) * Elements(file->row_shape());
  // Samples are read in random order: read-ahead would fetch what no batch wants.
  madvise(map, file->map_bytes_, MADV_RANDOM);
  return std::shared_ptr<const ArrayFile>(std::move(file));
}

ArrayFile::~ArrayFile() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

absl::Status ArrayFile::IntegerRange(int64_t begin, int64_t end, int64_t* min, int64_t* max,
                                     const ReadOptions& options) const {
  if (!IsInteger(dtype_)) {
    return Bad(name_, absl::StrCat("holds ", DtypeName(dtype_), ", not integers"));
  }
  *min = std::numeric_limits<int64_t>::max();
  *max = std::numeric_limits<int64_t>::min();
  const int64_t per_row = row_bytes_ / ElementBytes(dtype_);
  constexpr int64_t kPieceRows = int64_t{1} << 16;
  for (int64_t first = begin; first < end; first += kPieceRows) {
    if (options.cancelled()) return ReadCancelled(name_);
    const int64_t n = std::min(end - first, kPieceRows) * per_row;
    switch (dtype_) {
      case ArrayDtype::kUInt8:
        Widen<uint8_t>(row(first), n, min, max);
        break;
      case ArrayDtype::kInt32:
        Widen<int32_t>(row(first), n, min, max);
        break;
      default:
        Widen<int64_t>(row(first), n, min, max);
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace stoke::data

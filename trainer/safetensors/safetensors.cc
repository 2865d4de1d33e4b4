// safetensors reading (validate everything before use) and atomic writing.
// Not a tensor library: no dtype conversion here (see float_convert.h).
#include "trainer/safetensors/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/core/error.h"
#include "engine/core/util/crc32c.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader copies bytes as they are");

namespace meridian::safetensors {
namespace {

struct DtypeInfo {
  Dtype dtype;
  std::string_view name;
  std::size_t size;
};

constexpr std::array<DtypeInfo, 15> kDtypes{{
    {Dtype::kBool, "BOOL", 1},
    {Dtype::kU8, "U8", 1},
    {Dtype::kI8, "I8", 1},
    {Dtype::kF8E5M2, "F8_E5M2", 1},
    {Dtype::kF8E4M3, "F8_E4M3", 1},
    {Dtype::kI16, "I16", 2},
    {Dtype::kU16, "U16", 2},
    {Dtype::kF16, "F16", 2},
    {Dtype::kBF16, "BF16", 2},
    {Dtype::kI32, "I32", 4},
    {Dtype::kU32, "U32", 4},
    {Dtype::kF32, "F32", 4},
    {Dtype::kF64, "F64", 8},
    {Dtype::kI64, "I64", 8},
    {Dtype::kU64, "U64", 8},
}};

const DtypeInfo& info(Dtype d) {
  for (const auto& i : kDtypes)
    if (i.dtype == d) return i;
  MERIDIAN_CHECK(false);
  return kDtypes[0];
}

[[noreturn]] void bad_file(const std::string& source, const std::string& problem) {
  throw ProtocolError("safetensors file '" + source + "': " + problem);
}

// *out = product(shape) × elem_size; false on a negative dimension or overflow.
bool byte_size(const std::vector<std::int64_t>& shape, std::size_t elem_size, std::uint64_t* out) {
  std::uint64_t n = elem_size;
  for (std::int64_t d : shape) {
    if (d < 0) return false;
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n)) return false;
  }
  *out = n;
  return true;
}

std::string hex8(std::uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

// nlohmann keeps the last of duplicate keys; the format forbids them, so a parse callback
// tracks the keys of every open object and refuses a repeat.
nlohmann::json parse_header_json(std::string_view text, const std::string& source) {
  std::vector<std::set<std::string>> open_objects;
  auto callback = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& value) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) {
      open_objects.emplace_back();
    } else if (event == E::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == E::key && !open_objects.empty()) {
      const std::string key = value.get<std::string>();
      if (!open_objects.back().insert(key).second)
        bad_file(source, "header JSON has the key \"" + key + "\" twice");
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::exception& e) {
    bad_file(source, std::string("header is not valid JSON: ") + e.what());
  }
}

// The declared header length must fit in the file and under kMaxHeaderBytes (checked before any
// allocation sized by it).
void check_header_len(std::uint64_t header_len, std::uint64_t file_size,
                      const std::string& source) {
  if (header_len > kMaxHeaderBytes)
    bad_file(source, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                         std::to_string(kMaxHeaderBytes) + " bytes");
  if (header_len > file_size - 8)
    bad_file(source, "header length " + std::to_string(header_len) + " runs past the end of the " +
                         std::to_string(file_size) + "-byte file (truncated?)");
}

std::uint64_t json_u64(const nlohmann::json& v, const std::string& source,
                       const std::string& what) {
  const bool negative =
      v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0;
  if (!v.is_number_integer() || negative)
    bad_file(source, what + " must be a non-negative integer, got " + v.dump());
  return v.get<std::uint64_t>();
}

struct Entry {
  Tensor tensor;
  std::uint64_t begin = 0, end = 0;
};

Entry parse_entry(const std::string& name, const nlohmann::json& v, const std::string& source) {
  const std::string where = "tensor \"" + name + "\"";
  if (!v.is_object()) bad_file(source, where + ": expected an object, got " + v.dump());
  for (const auto& [key, _] : v.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      bad_file(source, where + ": unknown key \"" + key + "\"");
  if (!v.contains("dtype") || !v["dtype"].is_string())
    bad_file(source, where + ": \"dtype\" must be a string");
  if (!v.contains("shape") || !v["shape"].is_array())
    bad_file(source, where + ": \"shape\" must be an array of integers");
  if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
    bad_file(source, where + ": \"data_offsets\" must be [begin, end]");
  Entry e;
  e.tensor.name = name;
  try {
    e.tensor.dtype = parse_dtype(v["dtype"].get<std::string>(), source);
  } catch (const ConfigError& err) {
    bad_file(source, where + ": " + err.what());
  }
  for (const auto& d : v["shape"]) {
    const std::uint64_t dim = json_u64(d, source, where + " shape dimension");
    if (dim > static_cast<std::uint64_t>(INT64_MAX))
      bad_file(source, where + ": dimension too large");
    e.tensor.shape.push_back(static_cast<std::int64_t>(dim));
  }
  e.begin = json_u64(v["data_offsets"][0], source, where + " data_offsets[0]");
  e.end = json_u64(v["data_offsets"][1], source, where + " data_offsets[1]");
  if (e.end < e.begin)
    bad_file(source, where + ": data_offsets end " + std::to_string(e.end) + " < begin " +
                         std::to_string(e.begin));
  std::uint64_t expect = 0;
  if (!byte_size(e.tensor.shape, dtype_size(e.tensor.dtype), &expect))
    bad_file(source, where + ": shape × dtype size overflows");
  if (e.end - e.begin != expect)
    bad_file(source, where + ": data_offsets span " + std::to_string(e.end - e.begin) +
                         " bytes but shape × " + std::string(dtype_name(e.tensor.dtype)) +
                         " needs " + std::to_string(expect));
  return e;
}

// Writes all of `data` to `fd`, retrying short writes.
void write_all(int fd, const std::byte* data, std::size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error("safetensors: writing '" + path + "' failed: " + std::strerror(errno));
    }
    data += w;
    n -= static_cast<std::size_t>(w);
  }
}

}  // namespace

std::size_t dtype_size(Dtype d) { return info(d).size; }
std::string_view dtype_name(Dtype d) { return info(d).name; }

Dtype parse_dtype(std::string_view name, std::string_view context) {
  for (const auto& i : kDtypes)
    if (i.name == name) return i.dtype;
  throw ConfigError(std::string(context) + ": unknown safetensors dtype \"" + std::string(name) +
                    "\" (expected one of BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, "
                    "I32, U32, F32, F64, I64, U64)");
}

std::int64_t Tensor::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

const Tensor* File::find(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const Tensor& File::at(std::string_view name) const {
  if (const Tensor* t = find(name)) return *t;
  throw ConfigError("safetensors file '" + source_ + "': no tensor named \"" + std::string(name) +
                    "\"");
}

File parse(std::vector<std::byte> bytes, std::string source, bool verify_checksum) {
  if (bytes.size() < 8)
    bad_file(source, "truncated: " + std::to_string(bytes.size()) +
                         " bytes, fewer than the 8-byte header length");
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  check_header_len(header_len, bytes.size(), source);
  if (header_len < 2)
    bad_file(source,
             "header length " + std::to_string(header_len) + " is too short for a JSON object");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, header_len);
  if (text.front() != '{') bad_file(source, "header does not start with '{'");

  const nlohmann::json header = parse_header_json(text, source);
  if (!header.is_object()) bad_file(source, "header is not a JSON object");

  File f;
  f.source_ = source;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) bad_file(source, "__metadata__ must be an object of strings");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          bad_file(source,
                   "__metadata__ value of \"" + mk + "\" must be a string, got " + mv.dump());
        f.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(key, value, source));
  }

  // The data section must be covered exactly: sorted by offset, each tensor starts where the
  // previous one ends, and the last ends at the end of the file.
  const std::uint64_t data_len = bytes.size() - 8 - header_len;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t cursor = 0;
  for (const auto& e : entries) {
    const std::string where = "tensor \"" + e.tensor.name + "\"";
    if (e.end > data_len)
      bad_file(source, where + ": data_offsets [" + std::to_string(e.begin) + ", " +
                           std::to_string(e.end) + "] beyond the " + std::to_string(data_len) +
                           "-byte data section (truncated?)");
    if (e.begin < cursor)
      bad_file(source, where + ": data_offsets [" + std::to_string(e.begin) + ", " +
                           std::to_string(e.end) + "] overlap the previous tensor ending at " +
                           std::to_string(cursor));
    if (e.begin > cursor)
      bad_file(source, where + ": a hole of " + std::to_string(e.begin - cursor) +
                           " bytes before it in the data section (offsets must be contiguous)");
    cursor = e.end;
  }
  if (cursor != data_len)
    bad_file(source, std::to_string(data_len - cursor) +
                         " trailing bytes after the last tensor (data section is " +
                         std::to_string(data_len) + " bytes, tensors cover " +
                         std::to_string(cursor) + ")");

  const std::byte* data = bytes.data() + 8 + header_len;
  if (verify_checksum) {
    if (auto it = f.metadata_.find(std::string(kChecksumKey)); it != f.metadata_.end()) {
      const std::string want = it->second;
      const std::string got = hex8(crc32c(std::span<const std::byte>(data, data_len)));
      if (want.size() != 8 || want.find_first_not_of("0123456789abcdef") != std::string::npos)
        bad_file(source, std::string(kChecksumKey) + " must be 8 lowercase hex digits, got \"" +
                             want + "\"");
      if (want != got)
        bad_file(source, "checksum mismatch: " + std::string(kChecksumKey) + " says " + want +
                             " but the data section hashes to " + got + " (corrupted file)");
    }
  }

  f.buffer_ = std::move(bytes);
  const std::byte* base = f.buffer_.data() + 8 + header_len;
  for (auto& e : entries) {
    e.tensor.data = std::span<const std::byte>(base + e.begin, e.end - e.begin);
    f.tensors_.push_back(std::move(e.tensor));
  }
  return f;
}

File read(const std::filesystem::path& path, ReadOptions options) {
  const std::string source = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ConfigError("safetensors file '" + source + "': cannot open (" + std::strerror(errno) +
                      ")");
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec)
    throw ConfigError("safetensors file '" + source + "': cannot stat (" + ec.message() + ")");
  // Check the declared header length against the file size before reading the file.
  if (size >= 8) {
    std::uint64_t header_len = 0;
    in.read(reinterpret_cast<char*>(&header_len), 8);
    check_header_len(header_len, size, source);
    in.seekg(0);
  }
  std::vector<std::byte> bytes(size);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (static_cast<std::uintmax_t>(in.gcount()) != size)
    throw ConfigError("safetensors file '" + source + "': short read");
  File f = parse(std::move(bytes), source, options.verify_checksum);
  if (options.require_checksum && !f.metadata().count(std::string(kChecksumKey)))
    bad_file(source, "no " + std::string(kChecksumKey) + " in __metadata__ but one is required");
  return f;
}

void write(const std::filesystem::path& path, std::span<const TensorView> tensors,
           const std::map<std::string, std::string>& metadata, WriteOptions options) {
  const std::string target = path.string();
  std::set<std::string> names;
  std::uint32_t crc = 0;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::map<std::string, std::string> meta = metadata;
  std::uint64_t offset = 0;
  nlohmann::ordered_json entries = nlohmann::ordered_json::object();
  for (const auto& t : tensors) {
    const std::string where = "safetensors write '" + target + "': tensor \"" + t.name + "\"";
    if (t.name.empty()) throw ConfigError("safetensors write '" + target + "': empty tensor name");
    if (t.name == "__metadata__") throw ConfigError(where + ": the name is reserved");
    if (!names.insert(t.name).second) throw ConfigError(where + ": duplicate name");
    std::uint64_t expect = 0;
    if (!byte_size(t.shape, dtype_size(t.dtype), &expect))
      throw ConfigError(where + ": negative dimension or size overflow");
    if (expect != t.data.size())
      throw ConfigError(where + ": " + std::to_string(t.data.size()) + " bytes given but shape × " +
                        std::string(dtype_name(t.dtype)) + " needs " + std::to_string(expect));
    entries[t.name] = {{"dtype", dtype_name(t.dtype)},
                       {"shape", t.shape},
                       {"data_offsets", {offset, offset + expect}}};
    offset += expect;
    crc = crc32c(t.data, crc);
  }
  if (options.checksum) meta[std::string(kChecksumKey)] = hex8(crc);
  if (!meta.empty()) header["__metadata__"] = meta;
  for (auto& [k, v] : entries.items()) header[k] = v;

  // Pad the header with spaces to a multiple of 8 so the data section is aligned (as the
  // reference writer does).
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::uint64_t header_len = text.size();

  const std::filesystem::path tmp =
      path.parent_path() / (path.filename().string() + ".tmp." + std::to_string(::getpid()));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error("safetensors: cannot create '" + tmp.string() + "': " + std::strerror(errno));
  try {
    write_all(fd, reinterpret_cast<const std::byte*>(&header_len), 8, tmp.string());
    write_all(fd, reinterpret_cast<const std::byte*>(text.data()), text.size(), tmp.string());
    for (const auto& t : tensors) write_all(fd, t.data.data(), t.data.size(), tmp.string());
    if (::fsync(fd) != 0)
      throw Error("safetensors: fsync of '" + tmp.string() + "' failed: " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw Error("safetensors: closing '" + tmp.string() + "' failed: " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error("safetensors: renaming to '" + target + "' failed: " + std::strerror(err));
  }
  // Make the rename durable.
  const std::filesystem::path dir = path.parent_path().empty() ? "." : path.parent_path();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace meridian::safetensors

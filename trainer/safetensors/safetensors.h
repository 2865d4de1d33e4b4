// A standard-library safetensors reader and writer (the Hugging Face format: 8-byte little-endian
// header length, a JSON header, then the raw little-endian tensor bytes), so checkpoints are
// readable by the Python ecosystem. Not a tensor library: bytes in, bytes out, validated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meridian::safetensors {

// The element types of the safetensors specification, with their on-disk names.
enum class Dtype {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64
};

std::size_t dtype_size(Dtype d);       // bytes per element
std::string_view dtype_name(Dtype d);  // "F32", "BF16", ...
// Parses an on-disk name; throws ConfigError naming `context` (e.g. the file) when unknown.
Dtype parse_dtype(std::string_view name, std::string_view context);

// The metadata key under which write() stores the CRC-32C of the data section (8 hex digits)
// and read() verifies it when present.
inline constexpr std::string_view kChecksumKey = "meridian.crc32c";

// Header limit, as the reference implementation: a larger header is refused before allocation.
inline constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;

// One tensor to write; `data` must hold exactly product(shape) × dtype_size(dtype) bytes,
// little-endian, row-major. The bytes are not copied before write() returns.
struct TensorView {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;
};

// One tensor read from a file; `data` points into the owning File's buffer.
struct Tensor {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;

  std::int64_t numel() const;
};

// The contents of one safetensors file. Owns the bytes the tensors' spans point to: movable
// (moving a std::vector keeps its buffer) but not copyable.
class File {
 public:
  File() = default;
  File(File&&) = default;
  File& operator=(File&&) = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // Tensors in data-offset order (the on-disk order).
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when there is no tensor of that name.
  const Tensor* find(std::string_view name) const;
  // Like find() but throws ConfigError naming the file and the tensor.
  const Tensor& at(std::string_view name) const;
  const std::string& source() const { return source_; }

 private:
  friend File parse(std::vector<std::byte> bytes, std::string source, bool verify_checksum);
  std::string source_;
  std::vector<std::byte> buffer_;  // the whole file
  std::vector<Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct WriteOptions {
  bool checksum = true;  // store kChecksumKey in __metadata__
};

struct ReadOptions {
  bool verify_checksum = true;    // check kChecksumKey when the file has it
  bool require_checksum = false;  // a file without kChecksumKey is a ProtocolError
};

// Writes atomically: a temporary file beside `path`, fsync, rename, fsync of the directory.
// Tensors are laid out in the order given. Bad input (duplicate or reserved names, a data size
// that does not match the shape) is a ConfigError naming the tensor; I/O failure is an Error.
void write(const std::filesystem::path& path, std::span<const TensorView> tensors,
           const std::map<std::string, std::string>& metadata = {}, WriteOptions options = {});

// Reads and validates a file: header length within the file and kMaxHeaderBytes, well-formed
// JSON object without duplicate keys, known dtypes, sizes = product(shape) × dtype size without
// overflow, offsets in range, non-overlapping and covering the data section exactly, and the
// checksum when present. A missing or unreadable file is a ConfigError; a malformed one a
// ProtocolError; both name the file and the problem.
File read(const std::filesystem::path& path, ReadOptions options = {});

// Validates and takes ownership of a whole file's bytes; `source` names it in errors.
File parse(std::vector<std::byte> bytes, std::string source, bool verify_checksum = true);

}  // namespace meridian::safetensors

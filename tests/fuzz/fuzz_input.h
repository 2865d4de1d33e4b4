// Fuzz-target support: a cursor over libFuzzer's input that hands out small parameters and the
// rest of the bytes, and an in-memory file for parsers that only read paths. Not a structured
// input format: each target documents how it reads its bytes.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "engine/core/error.h"

namespace meridian::fuzz {

// Takes bytes from the front; past the end every read yields zeros.
class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
  std::uint32_t u32() { return u16() | (std::uint32_t{u16()} << 16); }
  // Up to `n` bytes (fewer at the end).
  std::string bytes(std::size_t n) {
    n = std::min(n, size_ - pos_);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  std::string rest() { return bytes(size_ - pos_); }
  bool empty() const { return pos_ >= size_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// A file that lives in memory (memfd), for parsers that take a path: write() replaces its
// contents; path() names it through /proc/self/fd.
class MemoryFile {
 public:
  explicit MemoryFile(const char* name) : fd_(::memfd_create(name, 0)) {
    MERIDIAN_CHECK(fd_ >= 0);
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  void write(const std::string& contents) {
    MERIDIAN_CHECK_EQ(::ftruncate(fd_, 0), 0);
    MERIDIAN_CHECK_EQ(::pwrite(fd_, contents.data(), contents.size(), 0),
                      static_cast<ssize_t>(contents.size()));
  }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

}  // namespace meridian::fuzz

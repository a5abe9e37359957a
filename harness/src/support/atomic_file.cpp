#include "support/atomic_file.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <system_error>

#include "support/text.h"

namespace kvfuzz {

namespace {

// A name no other writer uses at the same time, this process's threads included.
std::filesystem::path temporary_name(const std::filesystem::path& path) {
  static std::atomic<unsigned> counter{0};
  std::filesystem::path temp = path;
  temp += ".tmp." + std::to_string(static_cast<long>(::getpid())) + "." +
          std::to_string(counter.fetch_add(1));
  return temp;
}

}  // namespace

FileWriteError::FileWriteError(const std::filesystem::path& file, std::string reason)
    : std::runtime_error(escape_controls(file.string() + ": cannot write (" + reason + ")")),
      file_(file),
      reason_(std::move(reason)) {}

void write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  std::error_code ec;
  const std::filesystem::path parent = path.parent_path();
  if (!parent.empty()) {
    std::filesystem::create_directories(parent, ec);
    if (ec) throw FileWriteError(path, ec.message());
  }
  const std::filesystem::path temp = temporary_name(path);
  {
    errno = 0;
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) throw FileWriteError(path, errno_text(errno != 0 ? errno : EIO));
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.flush();
    int error = out ? 0 : (errno != 0 ? errno : EIO);
    out.close();
    if (error == 0 && !out) error = errno != 0 ? errno : EIO;
    if (error != 0) {
      std::filesystem::remove(temp, ec);  // best effort: the write's error is the news
      throw FileWriteError(path, errno_text(error));
    }
  }
  std::filesystem::rename(temp, path, ec);
  if (ec) {
    const std::string reason = ec.message();
    std::filesystem::remove(temp, ec);  // best effort: the rename's error is the news
    throw FileWriteError(path, reason);
  }
}

}  // namespace kvfuzz

// Writing a file so that a reader, or a crash, never sees half of it: the text goes to a
// temporary file in the same folder (so the rename stays on one file system), which is
// then renamed over the file in one step. A reader sees the old file or the new one.
//
// One policy for every file kvfuzz writes this way (fixtures, campaign records and
// reports, the fuzz targets' event counts): every error is reported, none is ignored, and
// the old file is left as it was.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kvfuzz {

// Why a file could not be written. what(): "FILE: cannot write (REASON)", one line.
class FileWriteError : public std::runtime_error {
 public:
  FileWriteError(const std::filesystem::path& file, std::string reason);

  const std::filesystem::path& file() const { return file_; }
  // The system's words, e.g. "No such file or directory".
  const std::string& reason() const { return reason_; }

 private:
  std::filesystem::path file_;
  std::string reason_;
};

// Replaces `path` with `contents`, creating its folders first. Throws FileWriteError
// naming `path` when a folder, the temporary file or the rename fails; the temporary file
// is then removed and the old file, if any, is untouched.
void write_file_atomically(const std::filesystem::path& path, std::string_view contents);

}  // namespace kvfuzz

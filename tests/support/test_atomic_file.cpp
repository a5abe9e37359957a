// Atomic file writes (support/atomic_file.h): the new text replaces the old in one step,
// and every way the write can fail is reported, naming the file, with the old file left
// as it was and no temporary file left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "support/atomic_file.h"

namespace kvfuzz {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class AtomicFile : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    folder_ = fs::temp_directory_path() /
              ("kvfuzz-atomic-" + std::to_string(::getpid()) + "-" + info->name());
    fs::remove_all(folder_);
    fs::create_directories(folder_);
  }
  void TearDown() override {
    fs::permissions(folder_, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(folder_);
  }

  // The error of `write`, which must fail with a FileWriteError naming `file`.
  std::string error_of(const fs::path& file, const std::function<void()>& write) {
    try {
      write();
    } catch (const FileWriteError& error) {
      EXPECT_EQ(error.file(), file);
      EXPECT_FALSE(error.reason().empty());
      const std::string message = error.what();
      EXPECT_EQ(message.rfind(file.string() + ": cannot write (", 0), 0u) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      return message;
    }
    ADD_FAILURE() << "the write of " << file << " succeeded";
    return "";
  }

  size_t files_in(const fs::path& dir) {
    size_t files = 0;
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir)) ++files;
    return files;
  }

  fs::path folder_;
};

TEST_F(AtomicFile, WritesCreatesFoldersAndReplaces) {
  const fs::path path = folder_ / "a" / "b" / "file.txt";
  write_file_atomically(path, "first\n");
  EXPECT_EQ(read_file(path), "first\n");
  write_file_atomically(path, std::string("sec\0nd", 6));
  EXPECT_EQ(read_file(path), std::string("sec\0nd", 6));
  EXPECT_EQ(files_in(path.parent_path()), 1u);  // no temporary file left
}

// RLIMIT_FSIZE makes the write itself fail (EFBIG), whoever runs the test, root included.
TEST_F(AtomicFile, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  const fs::path path = folder_ / "record.json";
  write_file_atomically(path, "old");
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto old_handler = signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 16;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string message =
      error_of(path, [&] { write_file_atomically(path, std::string(1 << 16, 'x')); });
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, old_handler);
  EXPECT_NE(message.find("too large"), std::string::npos) << message;  // EFBIG's words
  EXPECT_EQ(read_file(path), "old");
  EXPECT_EQ(files_in(folder_), 1u);
}

TEST_F(AtomicFile, AFailedRenameIsReportedAndCleansUp) {
  // A folder that is not empty cannot be replaced by a file.
  const fs::path path = folder_ / "taken";
  fs::create_directories(path / "inside");
  error_of(path, [&] { write_file_atomically(path, "text"); });
  EXPECT_TRUE(fs::is_directory(path / "inside"));
  EXPECT_EQ(files_in(folder_), 1u);
}

TEST_F(AtomicFile, AFolderThatCannotBeMadeIsReported) {
  write_file_atomically(folder_ / "plain", "a file, not a folder");
  const fs::path path = folder_ / "plain" / "file.txt";
  error_of(path, [&] { write_file_atomically(path, "text"); });
  EXPECT_EQ(read_file(folder_ / "plain"), "a file, not a folder");
}

}  // namespace
}  // namespace kvfuzz

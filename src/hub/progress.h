// Download progress on stderr: on a terminal one live line with a bar for the current file and one
// for the whole pull (bytes, files, rate); in a pipe or log, one plain line per finished file.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace vkf::hub {

class Progress {
 public:
  Progress(int total_files, int64_t total_bytes, bool quiet);
  void start_file(const std::string& name, int64_t size, int64_t already);  // already: resumed bytes
  void advance(int64_t bytes);
  void finish_file(bool downloaded);  // downloaded=false: it was in the cache
  void done();                        // clears the live line

 private:
  void draw(bool force);
  int total_files_, files_done_ = 0;
  int64_t total_bytes_, bytes_done_ = 0;  // whole pull (finished files + current)
  std::string name_;
  int64_t size_ = 0, got_ = 0, start_got_ = 0;
  bool quiet_, tty_;
  std::chrono::steady_clock::time_point begin_, last_draw_;
};

std::string human_bytes(int64_t n);

}  // namespace vkf::hub

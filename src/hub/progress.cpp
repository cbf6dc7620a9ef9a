// Progress lines for downloads (see progress.h).
#include "hub/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace vkf::hub {

std::string human_bytes(int64_t n) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.1f} {}", v, units[u]);
}

namespace {
std::string bar(double fraction, int width) {
  const int filled = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * width);
  return std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(width - filled), '.');
}
}  // namespace

Progress::Progress(int total_files, int64_t total_bytes, bool quiet)
    : total_files_(total_files), total_bytes_(total_bytes), quiet_(quiet), tty_(::isatty(STDERR_FILENO) != 0),
      begin_(std::chrono::steady_clock::now()), last_draw_(begin_) {}

void Progress::start_file(const std::string& name, int64_t size, int64_t already) {
  name_ = name;
  size_ = size;
  got_ = start_got_ = already;
  bytes_done_ += already;
  draw(true);
}

void Progress::advance(int64_t bytes) {
  got_ += bytes;
  bytes_done_ += bytes;
  draw(false);
}

void Progress::finish_file(bool downloaded) {
  ++files_done_;
  if (!downloaded) bytes_done_ += std::max<int64_t>(0, size_ - got_);
  if (quiet_) return;
  if (tty_) {
    draw(true);
  } else if (downloaded) {
    std::fprintf(stderr, "fetched %s (%s%s) [%d/%d]\n", name_.c_str(), human_bytes(size_ >= 0 ? size_ : got_).c_str(),
                 start_got_ > 0 ? fmt::format(", resumed at {}", human_bytes(start_got_)).c_str() : "", files_done_,
                 total_files_);
  }
}

void Progress::done() {
  if (!quiet_ && tty_) std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

void Progress::draw(bool force) {
  if (quiet_ || !tty_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double secs = std::chrono::duration<double>(now - begin_).count();
  const double rate = secs > 0 ? static_cast<double>(bytes_done_) / secs : 0.0;
  std::string shown = name_.size() > 32 ? "..." + name_.substr(name_.size() - 29) : name_;
  std::fprintf(stderr, "\r\033[K%s [%s] %s/%s | total [%s] %d/%d files %s/%s %s/s", shown.c_str(),
               bar(size_ > 0 ? static_cast<double>(got_) / static_cast<double>(size_) : 1.0, 16).c_str(),
               human_bytes(got_).c_str(), human_bytes(std::max<int64_t>(size_, 0)).c_str(),
               bar(total_bytes_ > 0 ? static_cast<double>(bytes_done_) / static_cast<double>(total_bytes_) : 0.0, 16).c_str(),
               files_done_, total_files_, human_bytes(bytes_done_).c_str(), human_bytes(total_bytes_).c_str(),
               human_bytes(static_cast<int64_t>(rate)).c_str());
  std::fflush(stderr);
}

}  // namespace vkf::hub

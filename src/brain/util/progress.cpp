#include "brain/util/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include <fmt/format.h>

namespace scaleinv {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  long t = std::lround(s);
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
  return fmt::format("{}:{:02}", t / 60, t % 60);
}

std::string format_rate(double r) {
  if (r >= 1e6) return fmt::format("{:.1f}M", r / 1e6);
  if (r >= 1e4) return fmt::format("{:.0f}k", r / 1e3);
  if (r >= 1e3) return fmt::format("{:.1f}k", r / 1e3);
  if (r >= 10) return fmt::format("{:.0f}", r);
  return fmt::format("{:.2f}", r);
}

Progress::Progress(long total, std::string label, std::string unit)
    : total_(total > 0 ? total : 1), label_(std::move(label)), unit_(std::move(unit)), tty_(::isatty(2) != 0) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::draw(long done, const std::string& status, bool final_line) {
  const double el = elapsed_s();
  const double rate = el > 0 ? done / el : 0;
  const double eta = rate > 0 ? (total_ - done) / rate : NAN;
  const int width = 24;
  const int filled = static_cast<int>(width * std::min(1.0, static_cast<double>(done) / total_));
  std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
  std::string line = fmt::format("{} [{}] {}/{} {} {}/s ETA {} {}", label_, bar, done, total_, unit_,
                                 format_rate(rate), final_line ? format_duration(0) : format_duration(eta), status);
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final_line ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

void Progress::update(long done, const std::string& status) {
  const auto now = std::chrono::steady_clock::now();
  if (tty_) {
    if (now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
  } else {
    const long decile = done * 10 / total_;
    if (decile == last_decile_ && now - last_draw_ < std::chrono::seconds(30)) return;
    last_decile_ = decile;
  }
  last_draw_ = now;
  draw(done, status, false);
}

void Progress::finish(const std::string& status) {
  if (finished_) return;
  finished_ = true;
  draw(total_, status, true);
}

}  // namespace scaleinv

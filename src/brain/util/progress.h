#pragma once
// A progress bar for long commands: done/total, rate, ETA and a free-text status, on stderr.
// On a terminal it redraws one line (at most ~10 times a second); otherwise (CI, logs) it prints
// a plain line every 10% or 30 s, so logs stay short.
#include <chrono>
#include <string>

namespace scaleinv {

class Progress {
 public:
  Progress(long total, std::string label, std::string unit = "it");
  // `done` items finished; `status` e.g. "loss 2.31 | 5.1k tok/s".
  void update(long done, const std::string& status = "");
  void finish(const std::string& status = "");
  double elapsed_s() const;

 private:
  void draw(long done, const std::string& status, bool final_line);
  long total_;
  std::string label_, unit_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  long last_decile_ = -1;
  bool finished_ = false;
};

std::string format_duration(double seconds);  // "1:05", "1:02:03"
std::string format_rate(double per_s);        // "950", "12.3k", "1.2M"

}  // namespace scaleinv

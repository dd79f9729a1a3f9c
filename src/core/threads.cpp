#include "core/threads.h"

#include <thread>

namespace scaleinv {

int configure_threads(int requested) {
  int n = requested > 0 ? requested : static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
  torch::set_num_threads(n);
  return n;
}

}  // namespace scaleinv

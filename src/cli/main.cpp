// scaleinv: scale-invariant parameterizations of neural networks (docs/design.md).
#include <climits>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <cstdint>
#include <cstdlib>
#include <new>

#include <malloc.h>
#include <sys/mman.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "brain/util/errors.h"
#include "engine/runtime/threads.h"
#include "engine/runtime/torch_compat.h"
#include "engine/dist/dist.h"

namespace {
constexpr size_t kHugeArena = size_t{4} << 30;
}  // namespace

int main(int argc, char** argv) {
  // libtorch's CPU tensors come from malloc, and glibc serves every block above 32 MiB by a fresh
  // mmap that free() unmaps: each width-8192 temporary (256 MiB) then page-faults its 65536 pages
  // again, which in a VM cost more than the arithmetic (coordcheck --model mlp at widths 4096 and
  // 8192: 84 s, 31 s of them in the kernel; 30 s with freed blocks kept). Keep them in the heap.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, -1);  // as size_t: never give the heap's top back
  // The heap's first GiBs in transparent huge pages where the kernel offers them on request
  // (THP "madvise"): one fault per 2 MiB instead of per 4 KiB (the same grid: 31 s -> 17 s).
  // Address space only: pages are touched, and counted, as tensors use them.
  if (void* arena = std::malloc(kHugeArena)) {
    constexpr uintptr_t kHuge = uintptr_t{2} << 20;
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(arena) + kHuge - 1) & ~(kHuge - 1);
    madvise(reinterpret_cast<void*>(begin), kHugeArena - (begin - reinterpret_cast<uintptr_t>(arena)), MADV_HUGEPAGE);
    std::free(arena);
  }
  CLI::App app{"scaleinv: hold hyperparameters fixed from a small model to a wide, deep one"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "cores to use (default: all): the matmuls' BLAS pool gets them, libtorch's elementwise ops run on 1 (docs/speed.md)");
  int exit_code = 0;
  scaleinv::add_param_command(app, exit_code);
  scaleinv::add_theory_command(app, exit_code);
  scaleinv::add_train_command(app, exit_code);
  scaleinv::add_demo_command(app, exit_code);
  scaleinv::add_diagnose_command(app, exit_code);
  scaleinv::add_coordcheck_command(app, exit_code);
  scaleinv::add_launch_command(app, exit_code);
  scaleinv::add_bench_command(app, exit_code);
  scaleinv::add_sweep_command(app, exit_code);
  scaleinv::add_transfer_report_command(app, exit_code);
  scaleinv::add_predict_command(app, exit_code);
  scaleinv::add_scales_command(app, exit_code);
  scaleinv::add_precision_command(app, exit_code);
  scaleinv::add_weights_commands(app, exit_code);
  scaleinv::add_import_results_command(app, exit_code);
  app.parse_complete_callback([&] {
    if (threads < 0 || threads > 4096)
      throw scaleinv::UserError("command line", "--threads", fmt::format("{} cores", threads),
                                "use 0 (all cores) or a positive count");
    scaleinv::configure_threads(threads);
    scaleinv::refuse_outputs_over_inputs();  // before any command writes (cli_options.h)
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: command line: %s (fix: see scaleinv --help)\n", e.what());
    return scaleinv::UserError::kExitCode;
  } catch (const scaleinv::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return scaleinv::UserError::kExitCode;
  } catch (const scaleinv::RankLost& e) {  // data-parallel: a rank was lost (one line naming it)
    std::fprintf(stderr, "error: %s\n", e.what());
    return scaleinv::RankLost::kExitCode;
  } catch (const scaleinv::Diverged& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return scaleinv::Diverged::kExitCode;
  } catch (const std::bad_alloc&) {  // sizes the config asks for that this machine cannot hold
    std::fprintf(stderr, "error: out of memory (fix: use a smaller model.width, model.depth or train.batch_size)\n");
    return scaleinv::UserError::kExitCode;
  } catch (const std::filesystem::filesystem_error& e) {  // an output path a user gave
    std::fprintf(stderr, "error: %s: %s (fix: give a writable path whose parents are directories)\n",
                 e.path1().string().c_str(), e.code().message().c_str());
    return scaleinv::UserError::kExitCode;
  } catch (const c10::Error& e) {
    // A libtorch error that escaped the library's own checks: keep it to one line. An allocation
    // that failed is the user's size; anything else is ours (exit 1).
    std::string msg = e.what_without_backtrace();
    if (const auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    if (scaleinv::compat::is_out_of_memory(e)) {
      std::fprintf(stderr,
                   "error: out of memory: %s (fix: use a smaller model.width, model.depth or train.batch_size; in a "
                   "sweep, fewer members per batched chunk: [sweep] ensemble, or --batch off)\n",
                   msg.c_str());
      return scaleinv::UserError::kExitCode;
    }
    std::fprintf(stderr, "error: libtorch: %s\n", msg.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return exit_code;
}

// `scaleinv export --checkpoint P --out F.safetensors` and
// `scaleinv import --safetensors F [--config C.toml] --out P`: weights in the safetensors format,
// readable from PyTorch without scaleinv (engine/train/safetensors.h).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "engine/train/safetensors.h"

namespace scaleinv {

void add_weights_commands(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string checkpoint, out, file, config;
  };
  auto o = std::make_shared<Opts>();
  auto* ex = app.add_subcommand("export", "Write a checkpoint's weights as safetensors (table and config in __metadata__)");
  reads(ex->add_option("--checkpoint", o->checkpoint, "a checkpoint written by train")->required());
  writes(ex->add_option("--out", o->out, "the .safetensors file to write")->required());
  ex->callback([o, &exit_code] {
    const size_t n = export_checkpoint(o->checkpoint, o->out);
    std::printf("wrote %zu tensors to %s\n", n, o->out.c_str());
    exit_code = 0;
  });
  auto* im = app.add_subcommand("import", "Make a checkpoint (step 0, fresh optimizer state) from safetensors weights");
  reads(im->add_option("--safetensors", o->file, "the .safetensors file")->required());
  reads(im->add_option("--config", o->config, "the model's run config (default: the file's scaleinv metadata)"));
  writes(im->add_option("--out", o->out, "the checkpoint to write")->required());
  im->callback([o, &exit_code] {
    const size_t n = import_safetensors(o->file, o->config, o->out);
    std::printf("wrote a checkpoint with %zu tensors to %s\n", n, o->out.c_str());
    exit_code = 0;
  });
}

}  // namespace scaleinv

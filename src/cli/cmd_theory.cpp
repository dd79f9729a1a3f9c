// `scaleinv theory --param NAME|FILE [--optimizer sgd|adam|adafactor|muon] [--muon-scale spectral|rms] [--depth L]
//                  [--omega-hidden X] [--omega-readout X] [--align-alpha X] [--align-u X]
//                  [--rmsnorm] [--json PATH]`
// Prints the predicted width exponents (seed 000 section 1), verdicts and the depth classification
// (seed 004) of a parameterization; optionally writes them as JSON (brain/theory/theory_report.h).
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"
#include "brain/util/fraction.h"
#include "brain/optim/optimizer_kinds.h"
#include "brain/param/table.h"
#include "brain/theory/depth_theory.h"
#include "brain/theory/theory_report.h"
#include "brain/theory/width_theory.h"

namespace scaleinv {

void add_theory_command(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string param, optimizer = "adam", json, muon_scale = "spectral";
    int depth = 3;
    std::string omega_hidden = "1/2", omega_readout = "1", align_alpha = "1", align_u = "1";
    bool rmsnorm = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "theory", "Predict how activations, gradients and updates scale with width and depth (seed 000, seed 004)");
  reads(cmd->add_option("--param", o->param, "preset name or .toml file")->required());
  cmd->add_option("--optimizer", o->optimizer, "sgd, adam, adafactor or muon (default adam)");
  cmd->add_option("--muon-scale", o->muon_scale,
                  "muon's update scale: spectral, max(1, fan_out/fan_in)^1/2, or rms, 0.2 sqrt(max fan) (default spectral)");
  cmd->add_option("--depth", o->depth, "L, the number of hidden layers of the bigram model (default 3)");
  cmd->add_option("--omega-hidden", o->omega_hidden, "alignment of W_l with dh_l, hidden layers (eq. 18; default 1/2)");
  cmd->add_option("--omega-readout", o->omega_readout, "alignment at the readout (eq. 18; default 1, as muP)");
  cmd->add_option("--align-alpha", o->align_alpha, "alignment of dW_l with h_l (eq. 19; default 1)");
  cmd->add_option("--align-u", o->align_u, "alignment of dW_l with dh_l (eq. 20; default 1)");
  cmd->add_flag("--rmsnorm", o->rmsnorm, "RMSNorm between layers (seed 000 A.1.3, Lemma E.3)");
  writes(cmd->add_option("--json", o->json, "also write the prediction as JSON to this path"));
  cmd->callback([o, &exit_code] {
    // The kind's family: the table's column (adam, adamw and sign share Adam's LR exponents).
    const OptFamily family = optimizer_kind(o->optimizer, "command line", "--optimizer").family;
    MuonScale ms;
    if (!parse_muon_scale(o->muon_scale, &ms))
      throw UserError("command line", "--muon-scale", fmt::format("unknown scale rule '{}'", o->muon_scale),
                      "use spectral or rms");
    if (o->depth < 1 || o->depth > 10000)
      throw UserError("command line", "--depth", fmt::format("L = {} hidden layers", o->depth),
                      "give from 1 to 10000 hidden layers");
    Alignment al;
    al.omega_hidden = alignment_value("--omega-hidden", o->omega_hidden);
    al.omega_readout = alignment_value("--omega-readout", o->omega_readout);
    al.alpha = alignment_value("--align-alpha", o->align_alpha);
    al.u = alignment_value("--align-u", o->align_u);
    const ParamTable t = load_param(o->param);

    const WidthTheory w = width_theory(t, family, o->depth, al, o->rmsnorm, ms);
    const DepthTheory d = depth_theory(t, family);
    std::fputs(theory_table(w, d).c_str(), stdout);
    if (!o->json.empty()) write_file_atomic(o->json, theory_json(w, d).dump(2) + "\n");
    exit_code = 0;
  });
}

}  // namespace scaleinv

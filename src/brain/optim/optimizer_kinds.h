#pragma once
// Optimizer kinds as data: one row per update rule, read by every caller that needs to know what an
// optimizer is (which column of the table scales it, how it decays, whether ensembles step it, how
// it takes epsilon, which config fields it reads, which torch class Python hands out for it). No code
// outside src/brain/optim/ and src/engine/optim/ compares an optimizer's name (Structure.NoKindComparisons counts them); it asks
// optimizer_kind(name) for a trait.
//
// Adding an optimizer: its step in src/engine/optim/ (optim_detail::make_<kind>), one row in
// optimizer_kinds.cpp and its builder beside the others in optimizer.cpp's list (Optim.EveryKindBuilds
// builds every row).
//
// Torch-free: the brain (docs/design.md "Build shape") builds this file.
#include <string>
#include <string_view>
#include <vector>

#include "brain/param/table.h"

namespace scaleinv {

// How a kind applies optim.weight_decay.
enum class DecayMode {
  None,       // no decay term
  Coupled,    // L2: wd * W joins the gradient (and, in an adaptive rule, its normalisation)
  Decoupled,  // W *= 1 - fraction beside the update (optim.wd_mode: coupled lr_t*wd, independent wd):
              // the decay has a timescale of its own (brain/report/transfer.h)
};

// How a kind takes optim.eps (times the table's per-tensor eps factor).
enum class EpsMode {
  None,       // the rule reads no epsilon
  AddedToRms, // added to sqrt(v) (Adam); 0 allowed
  Squared,    // (eps * eps_mult)^2 added to g^2 (Adafactor); must be > 0
};

struct OptimizerKind {
  std::string kind;
  std::string summary;                  // one line: the update
  OptFamily family = OptFamily::Adam;   // the table's column (its LR exponent c) and the theory's
  DecayMode decay = DecayMode::Decoupled;
  EpsMode eps = EpsMode::AddedToRms;
  double default_eps = 1e-8;            // what a diagnostic without a config uses
  bool ensemble = false;                // batched ensembles step it (engine/train/ensemble.h)
  // Seed 000 eq. 28 on a model scaleinv did not write (brain/adapt/own_model.h): empty when the shift is
  // exact, else why not (the refusal's message).
  std::string own_model_refusal;
  // [optim] fields its update reads besides lr, wd_mode, clip_grad_norm and the schedule; the config
  // writes a group of fields (muon_*) only for a kind that reads them (brain/train/config.cpp).
  std::vector<std::string> fields;
  // The torch.optim class scaleinv.apply builds for it ("" when Python has none: python/scaleinv/_apply.py).
  std::string python_class;

  bool reads(std::string_view field) const;
  // Coupled L2 inside a rule that normalises the gradient: eq. 28 does not leave its training unchanged.
  bool l2_in_normalisation() const { return decay == DecayMode::Coupled && eps != EpsMode::None; }
};

// Every row, in the order error messages list them.
const std::vector<OptimizerKind>& optimizer_kind_rows();
// The row of `kind`; UserError (file `file`, field `field`) naming the kinds when there is none.
const OptimizerKind& optimizer_kind(const std::string& kind, const std::string& file = "config",
                                    const std::string& field = "optim.kind");
// The row of `kind`, or null (for code that must not throw on an unvalidated config or a store's JSON).
const OptimizerKind* find_optimizer_kind(const std::string& kind);
// The table's family for an optimizer kind (UserError on an unknown kind, field "optim.kind").
OptFamily optimizer_family(const std::string& kind);
// "sgd, adam, adamw, sign, adafactor, muon": the kinds, for help texts and error fixes.
const char* optimizer_kinds();
// Names of the rows with a trait, e.g. "sgd, adam, adamw" for those Python builds.
std::string optimizer_kind_list(bool (*pred)(const OptimizerKind&));
const char* decay_mode_name(DecayMode m);  // "none", "coupled", "decoupled"
const char* eps_mode_name(EpsMode m);      // "none", "added", "squared"

}  // namespace scaleinv

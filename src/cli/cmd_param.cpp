// `scaleinv param show NAME|FILE [--json PATH] [--toml PATH]`
// `scaleinv param shift NAME|FILE --theta ROLE=VALUE... [--json PATH] [--toml PATH]`
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"
#include "brain/util/fraction.h"
#include "brain/param/table.h"

namespace scaleinv {

namespace {

std::string render_table(const ParamTable& t) {
  std::string s = fmt::format("parameterization: {}\nsource: {}\nbase width {}, base depth {}; "
                              "residual branch k^-{}, post-LN shortcut L^{}, attention logits d_head^-{}\n",
                              t.name, t.source, t.base_width, t.base_depth, format_fraction(t.branch),
                              format_fraction(t.shortcut), format_fraction(t.attn_logit));
  s += "exponents of m = width/base_width (and, inside residual blocks, k = depth/base_depth):\n";
  // One cell per shown column of brain/param/table.h's role_columns() (a per-family column: one per family).
  auto row_of = [](const std::string& first, const std::function<std::string(const RoleColumn&, int)>& cell) {
    std::string line = fmt::format("{:<10}", first);
    for (const RoleColumn& col : role_columns()) {
      if (!col.shown) continue;
      if (col.group_start) line += " |";
      for (int f = 0; f < (col.families ? kNumFamilies : 1); ++f) line += fmt::format(" {:>5}", cell(col, f));
    }
    return line + "\n";
  };
  const std::string header = row_of("role", [](const RoleColumn& col, int f) {
    return col.families ? fmt::format("{}_{}", col.label, family_abbrev(static_cast<OptFamily>(f))) : std::string(col.label);
  });
  s += header + std::string(header.size() - 1, '-') + "\n";
  bool moe = false;
  for (Role r : all_roles()) {
    if (role_is_default(t, r)) continue;  // a dense table's implied rows
    moe = moe || r >= Role::Router;
    const RoleExponents& e = t.row(r);
    s += row_of(role_name(r), [&e](const RoleColumn& col, int f) {
      return format_fraction(col.families ? (e.*col.families)[static_cast<size_t>(f)] : e.*col.scalar);
    });
  }
  if (moe) {
    // The mixture-of-experts part (docs/moe.md): printed only for tables that set it.
    s += fmt::format("mixture of experts: base experts E_0 = {}; LR e^-x, e = E/E_0:", t.base_experts);
    for (Role r : {Role::Router, Role::Expert})
      for (int f = 0; f < kNumFamilies; ++f)
        s += fmt::format(" {}_{}={}", role_name(r), family_abbrev(static_cast<OptFamily>(f)),
                         format_fraction(t.row(r).experts_lr[static_cast<size_t>(f)]));
    s += "\n";
  }
  s += "multiplier m^-a, init std m^-b, LR m^-c (per optimizer), weight-decay fraction m^-wd, Adam eps m^-eps\n"
       "c_muo: Muon's LR on the hidden and attention matrices, AdamW's on the other roles (docs/muon.md)\n";
  bool carried = false;
  for (Role r : all_roles()) carried = carried || t.row(r).unit != 0;
  if (carried || t.unit.any()) {
    // Unit scaling (seed 003; src/engine/unit/scaled_ops.h): printed only for tables that use it.
    s += "unit scaling: the op carries sigma_0^u of the base-shape fan-in scale sigma_0 = 1/sqrt(fan_in/m) "
         "(init std sigma_0^(1-u) m^-b)\n  u:";
    for (Role r : all_roles())
      if (!role_is_default(t, r)) s += fmt::format(" {}={}", role_name(r), format_fraction(t.row(r).unit));
    auto on = [](bool b) { return b ? "on" : "off"; };
    s += fmt::format("\n  ops: unit backward {}, nonlinearity corrections {}, residual tau rule {}, "
                     "unit cross-entropy gradient {}\n",
                     on(t.unit.backward), on(t.unit.nonlin), on(t.unit.residual), on(t.unit.loss));
  }
  return s;
}

void emit(const ParamTable& t, const std::string& json_path, const std::string& toml_path) {
  std::fputs(render_table(t).c_str(), stdout);
  if (!json_path.empty()) write_file_atomic(json_path, param_to_json(t).dump(2) + "\n");
  if (!toml_path.empty()) write_file_atomic(toml_path, param_to_toml(t));
}

}  // namespace

void add_param_command(CLI::App& app, int& exit_code) {
  auto* param = app.add_subcommand("param", "Show or transform a parameterization table");
  param->require_subcommand(1);

  struct Opts {
    std::string name, json, toml;
    std::vector<std::string> theta;
  };
  auto opts = std::make_shared<Opts>();

  auto* show = param->add_subcommand("show", "Print a preset or a TOML parameterization as a table");
  reads(show->add_option("param", opts->name, "preset name or .toml file")->required());
  writes(show->add_option("--json", opts->json, "also write the table as JSON"));
  writes(show->add_option("--toml", opts->toml, "also write the table as TOML (a starting point for a custom one)"));
  show->callback([opts, &exit_code] {
    emit(load_param(opts->name), opts->json, opts->toml);
    exit_code = 0;
  });

  auto* sh = param->add_subcommand("shift", "Apply the equivalence shift of seed 000 eq. (28)");
  reads(sh->add_option("param", opts->name, "preset name or .toml file")->required());
  sh->add_option("--theta", opts->theta, "ROLE=VALUE, e.g. hidden=1/2 (repeatable; roles not named: 0)")
      ->required();
  writes(sh->add_option("--json", opts->json, "also write the shifted table as JSON"));
  writes(sh->add_option("--toml", opts->toml, "also write the shifted table as TOML"));
  sh->callback([opts, &exit_code] {
    ParamTable t = load_param(opts->name);
    std::array<double, kNumRoles> theta{};
    std::string label;
    for (const std::string& kv : opts->theta) {
      const auto eq = kv.find('=');
      Role role;
      double v = 0;
      if (eq == std::string::npos || !parse_role(kv.substr(0, eq), &role) || !parse_fraction(kv.substr(eq + 1), &v))
        throw UserError("command line", "--theta", fmt::format("cannot read '{}'", kv),
                        "write ROLE=VALUE with ROLE one of embedding, hidden, readout, vector, attn_q, attn_k, "
                        "attn_v, attn_o, router, expert and VALUE a number or fraction");
      if (std::fabs(v) > kMaxExponent)
        throw UserError("command line", "--theta", fmt::format("'{}' shifts by more than {}", kv, kMaxExponent),
                        fmt::format("use a shift between -{0} and {0}", kMaxExponent));
      for (const std::string& other : opts->theta)
        if (&other != &kv && other.substr(0, other.find('=')) == kv.substr(0, eq))
          throw UserError("command line", "--theta", fmt::format("role '{}' is given twice", kv.substr(0, eq)),
                          "give each role once");
      theta[static_cast<int>(role)] = v;
      // Shifting "hidden" moves the attention projections and the experts with it, "readout" the
      // router (their default rows, table.h default_row), unless they are named.
      if (role == Role::Hidden)
        for (Role a : {Role::AttnQ, Role::AttnK, Role::AttnV, Role::AttnO, Role::Expert}) theta[static_cast<int>(a)] = v;
      if (role == Role::Readout) theta[static_cast<int>(Role::Router)] = v;
      label += (label.empty() ? "" : ",") + kv;
    }
    for (const std::string& kv : opts->theta) {  // explicit attention entries win over "hidden"
      Role role;
      double v = 0;
      const auto eq = kv.find('=');
      if (parse_role(kv.substr(0, eq), &role) && role >= Role::AttnQ && parse_fraction(kv.substr(eq + 1), &v))
        theta[static_cast<int>(role)] = v;
    }
    ParamTable s = shift(t, theta);
    s.name = t.name + " shifted (" + label + ")";
    s.source = t.source + "; shifted by seed 000 eq. (28)";
    emit(s, opts->json, opts->toml);
    exit_code = 0;
  });
}

}  // namespace scaleinv

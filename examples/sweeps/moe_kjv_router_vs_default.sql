-- The router and balance settings tuned at (64, 4) against the defaults (docs/results/moe_width_experts.md,
-- "Router and balance settings tuned at the base"); run from the repository root:
--   sqlite3 -header -column < examples/sweeps/moe_kjv_router_vs_default.sql
-- Best grid-point loss (mean final_loss over the 2 seeds) at each corner, per table, with the
-- default router and balance settings (hp.router_mult 1, model.aux_coef 0.01; the width-512 store)
-- and with the settings tuned at (64, 4) (the three router stores).
ATTACH 'docs/results/data/moe_kjv_width_experts_512_cpu.db' AS d;
ATTACH 'docs/results/data/moe_kjv_router_transfer_base_cpu.db' AS b;
ATTACH 'docs/results/data/moe_kjv_router_transfer_mup_cpu.db' AS m;
ATTACH 'docs/results/data/moe_kjv_router_transfer_standard_cpu.db' AS s;
WITH pts AS (
  SELECT 'default' AS settings, * FROM d.points
  UNION ALL SELECT 'tuned', * FROM b.points UNION ALL SELECT 'tuned', * FROM m.points UNION ALL SELECT 'tuned', * FROM s.points),
g AS (
  SELECT settings, param, width, json_extract(axes, '$."model.experts"') AS experts, lr_log2, avg(final_loss) AS loss
  FROM pts GROUP BY 1, 2, 3, 4, 5),
best AS (SELECT settings, param, width, experts, min(loss) AS loss FROM g GROUP BY 1, 2, 3, 4)
SELECT t.param, t.width, t.experts,
       printf('%.4f', dd.loss) AS default_best, printf('%.4f', t.loss) AS tuned_best,
       printf('%+.2f%%', 100 * (t.loss / dd.loss - 1)) AS tuned_vs_default
FROM best t JOIN best dd ON dd.settings = 'default' AND dd.param = t.param AND dd.width = t.width AND dd.experts = t.experts
WHERE t.settings = 'tuned' ORDER BY t.param, t.width, t.experts;

-- The LR tuned at the base corner (width 64, E 4) carried to every corner of the GPU store, against
-- re-tuning there (docs/results/moe_experts_64_gpu.md); run from the repository root:
--   sqlite3 -header -column < examples/sweeps/moe_kjv_width_experts_gpu_diagonal.sql
-- Loss: mean final_loss over the 2 seeds at a grid point. For each table, its base LR is its best
-- grid point at (64, 4); carried is its loss at that LR at each corner; std_best is standard's best
-- grid point there (edge: the grid's end, so standard re-tuned could do better below it); the
-- regrets are carried against std_best and against the table's own best grid point there.
ATTACH 'docs/results/data/moe_width_experts_gpu_h100.db' AS g;
WITH pts AS (
  SELECT param, width, json_extract(axes, '$."model.experts"') AS experts, lr_log2, avg(final_loss) AS loss
  FROM g.points GROUP BY 1, 2, 3, 4),
best AS (
  SELECT p.param, p.width, p.experts, p.lr_log2, p.loss FROM pts p
  WHERE p.loss = (SELECT min(q.loss) FROM pts q WHERE q.param = p.param AND q.width = p.width AND q.experts = p.experts)),
base AS (SELECT param, lr_log2 FROM best WHERE width = 64 AND experts = 4),
edge AS (SELECT min(lr_log2) AS lo, max(lr_log2) AS hi FROM pts)
SELECT c.param, c.width, c.experts, CAST(b.lr_log2 AS INT) AS base_lr_log2, printf('%.4f', c.loss) AS carried,
       CAST(own.lr_log2 AS INT) AS own_best_lr, printf('%.4f', own.loss) AS own_best,
       CAST(s.lr_log2 AS INT) || CASE WHEN s.lr_log2 IN (e.lo, e.hi) THEN ' edge' ELSE '' END AS std_best_lr,
       printf('%.4f', s.loss) AS std_best,
       printf('%+.2f%%', 100 * (c.loss / s.loss - 1)) AS vs_std_retuned,
       printf('%+.2f%%', 100 * (c.loss / own.loss - 1)) AS vs_own_retuned
FROM pts c JOIN base b ON b.param = c.param AND b.lr_log2 = c.lr_log2
JOIN best own ON own.param = c.param AND own.width = c.width AND own.experts = c.experts
JOIN best s ON s.param = 'standard' AND s.width = c.width AND s.experts = c.experts
CROSS JOIN edge e
ORDER BY c.param, c.width, c.experts;

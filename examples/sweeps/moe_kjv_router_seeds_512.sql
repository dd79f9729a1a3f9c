-- (512, 32) with the router and balance settings tuned at (64, 4), seeds 0-5: the LR carried from
-- the base under mup-moe (2^-7) against standard re-tuned (its best grid point, 2^-10) and against
-- mup-moe re-tuned (2^-8), and mup-moe re-tuned against standard re-tuned, paired by seed (a seed
-- fixes the initialisation and the batches).
-- docs/results/moe_width_experts.md; run from the repository root:
--   sqlite3 -header -column < examples/sweeps/moe_kjv_router_seeds_512.sql
-- Seeds 0-1 come from the transfer stores, 2-5 from the seeds stores
-- (examples/sweeps/moe_kjv_router_seeds_{mup,standard}.toml). The last rows: the mean of the
-- per-seed percentages and its 95% interval by Student's t with n - 1 degrees of freedom (t = 2.571
-- at n = 6 seeds; its table below for n = 2..6), from the spread of the paired differences.
ATTACH 'docs/results/data/moe_kjv_router_transfer_mup_cpu.db' AS m;
ATTACH 'docs/results/data/moe_kjv_router_transfer_standard_cpu.db' AS s;
ATTACH 'docs/results/data/moe_kjv_router_seeds_mup_cpu.db' AS m2;
ATTACH 'docs/results/data/moe_kjv_router_seeds_standard_cpu.db' AS s2;
WITH pts AS (
  SELECT param, lr_log2, seed, final_loss FROM (
    SELECT * FROM m.points UNION ALL SELECT * FROM s.points UNION ALL SELECT * FROM m2.points UNION ALL SELECT * FROM s2.points)
  WHERE width = 512 AND json_extract(axes, '$."model.experts"') = 32),
per_seed AS (
  SELECT c.seed, c.final_loss AS carried, r.final_loss AS mup_retuned, st.final_loss AS standard_retuned,
         100 * (c.final_loss / st.final_loss - 1) AS vs_standard, 100 * (c.final_loss / r.final_loss - 1) AS vs_self,
         100 * (r.final_loss / st.final_loss - 1) AS retuned_vs_standard
  FROM pts c
  JOIN pts r ON r.seed = c.seed AND r.param = 'mup-moe' AND r.lr_log2 = -8
  JOIN pts st ON st.seed = c.seed AND st.param = 'standard' AND st.lr_log2 = -10
  WHERE c.param = 'mup-moe' AND c.lr_log2 = -7),
stats AS (  -- the sample standard deviation from sums: (sum x^2 - (sum x)^2 / n) / (n - 1)
  SELECT count(*) AS n, avg(vs_standard) AS a, avg(vs_self) AS b, avg(retuned_vs_standard) AS c,
         sqrt((sum(vs_standard * vs_standard) - sum(vs_standard) * sum(vs_standard) / count(*)) / (count(*) - 1)) AS sa,
         sqrt((sum(vs_self * vs_self) - sum(vs_self) * sum(vs_self) / count(*)) / (count(*) - 1)) AS sb,
         sqrt((sum(retuned_vs_standard * retuned_vs_standard) - sum(retuned_vs_standard) * sum(retuned_vs_standard) / count(*))
              / (count(*) - 1)) AS sc
  FROM per_seed),
t AS (SELECT CASE n WHEN 2 THEN 12.706 WHEN 3 THEN 4.303 WHEN 4 THEN 3.182 WHEN 5 THEN 2.776 WHEN 6 THEN 2.571 END AS t FROM stats)
SELECT * FROM (
  SELECT printf('%d', seed) AS seed, printf('%.4f', carried) AS carried_2e_7, printf('%.4f', mup_retuned) AS mup_moe_2e_8,
         printf('%.4f', standard_retuned) AS standard_2e_10, printf('%+.2f%%', vs_standard) AS carried_vs_standard,
         printf('%+.2f%%', vs_self) AS carried_vs_mup_moe, printf('%+.2f%%', retuned_vs_standard) AS mup_moe_vs_standard
  FROM per_seed ORDER BY per_seed.seed)
UNION ALL
SELECT printf('mean of %d', n), '', '', '', printf('%+.2f%% [%+.2f, %+.2f]', a, a - t * sa / sqrt(n), a + t * sa / sqrt(n)),
       printf('%+.2f%% [%+.2f, %+.2f]', b, b - t * sb / sqrt(n), b + t * sb / sqrt(n)),
       printf('%+.2f%% [%+.2f, %+.2f]', c, c - t * sc / sqrt(n), c + t * sc / sqrt(n))
FROM stats, t;

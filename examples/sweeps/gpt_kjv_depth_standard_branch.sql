-- docs/results/transfer_depth_gpt.md: standard's best loss per depth over its branch multiplier and LR
-- (gpt_kjv_depth_standard_branch.db and gpt_kjv_depth_standard_branch_low.db, with the base's 0.72
-- from gpt_kjv_depth_tuned.db) against
-- completep, depth-mup and the alpha = 2/3 row (gpt_kjv_depth_alpha.db) at their depth-2 LR (2^-7),
-- all over seeds 0 and 1. Run from the
-- repository root:
--   sqlite3 -header -column runs/sweeps/gpt_kjv_depth_standard_branch.db < examples/sweeps/gpt_kjv_depth_standard_branch.sql
ATTACH 'runs/sweeps/gpt_kjv_depth_tuned.db' AS t;
ATTACH 'runs/sweeps/gpt_kjv_depth_standard_branch_low.db' AS l;
ATTACH 'runs/sweeps/gpt_kjv_depth_alpha.db' AS a;
WITH s AS (
  SELECT depth, CAST(json_extract(axes, '$."hp.branch_mult"') AS REAL) AS branch, lr_log2, avg(final_loss) AS loss
    FROM points GROUP BY depth, branch, lr_log2
  UNION ALL
  SELECT depth, CAST(json_extract(axes, '$."hp.branch_mult"') AS REAL), lr_log2, avg(final_loss)
    FROM l.points GROUP BY depth, 2, lr_log2
  UNION ALL
  SELECT depth, 0.719433, lr_log2, avg(final_loss) FROM t.points
    WHERE param = 'standard' AND depth > 2 GROUP BY depth, lr_log2),
best AS (SELECT depth, branch, lr_log2, min(loss) AS loss FROM s GROUP BY depth),
cp AS (SELECT depth, avg(final_loss) AS loss FROM t.points WHERE param = 'completep' AND lr_log2 = -7 GROUP BY depth),
dm AS (SELECT depth, avg(final_loss) AS loss FROM t.points WHERE param = 'depth-mup' AND lr_log2 = -7 GROUP BY depth),
a23 AS (SELECT depth, avg(final_loss) AS loss FROM a.points WHERE lr_log2 = -7 GROUP BY depth)
SELECT best.depth, best.branch AS std_branch, best.lr_log2 AS std_lr_log2, printf('%.4f', best.loss) AS std_best,
       printf('%.4f', cp.loss) AS completep_at_base_lr, printf('%+.2f%%', 100 * (cp.loss - best.loss) / best.loss) AS regret,
       printf('%.4f', dm.loss) AS depth_mup_at_base_lr, printf('%+.2f%%', 100 * (dm.loss - best.loss) / best.loss) AS regret_dm,
       printf('%.4f', a23.loss) AS a23_at_base_lr, printf('%+.2f%%', 100 * (a23.loss - best.loss) / best.loss) AS regret_a23
  FROM best JOIN cp USING (depth) JOIN dm USING (depth) JOIN a23 USING (depth) ORDER BY best.depth;

-- docs/results/transfer_depth_resmlp.md: the alpha = 2/3 row (resmlp_fashion_depth_alpha_1000.db) at its
-- depth-4 LR, at its best LR per depth, and re-tuned per depth in LR and branch multiplier as well
-- (with resmlp_fashion_depth_alpha_retuned_1000.db), against standard's best per depth over LR and
-- branch multiplier (as resmlp_fashion_depth_standard_branch_1000.sql); all over seeds 0 and 1.
-- Run from the repository root:
--   sqlite3 -header -column runs/sweeps/resmlp_fashion_depth_alpha_1000.db < examples/sweeps/resmlp_fashion_depth_alpha_1000.sql
ATTACH 'runs/sweeps/resmlp_fashion_depth_standard_branch_1000.db' AS b;
ATTACH 'runs/sweeps/resmlp_fashion_depth_tuned_1000.db' AS t;
ATTACH 'runs/sweeps/resmlp_fashion_depth_alpha_retuned_1000.db' AS r;
WITH s AS (
  SELECT depth, CAST(json_extract(axes, '$."hp.branch_mult"') AS REAL) AS branch, lr_log2, avg(final_loss) AS loss
    FROM b.points WHERE seed IN (0, 1) GROUP BY depth, branch, lr_log2
  UNION ALL
  SELECT depth, 1.612717, lr_log2, avg(final_loss) FROM t.points
    WHERE param = 'standard' AND seed IN (0, 1) AND depth > 4 GROUP BY depth, lr_log2),
std AS (SELECT depth, min(loss) AS loss FROM s GROUP BY depth),
a AS (SELECT depth, 1.612717 AS branch, lr_log2, avg(final_loss) AS loss FROM points GROUP BY depth, lr_log2
      UNION ALL
      SELECT depth, CAST(json_extract(axes, '$."hp.branch_mult"') AS REAL), lr_log2, avg(final_loss) FROM r.points
        GROUP BY depth, 2, lr_log2),
base AS (SELECT depth, avg(final_loss) AS loss FROM points WHERE lr_log2 = -11 GROUP BY depth),
own AS (SELECT depth, min(loss) AS loss FROM a WHERE branch = 1.612717 GROUP BY depth),
re AS (SELECT depth, branch, lr_log2, min(loss) AS loss FROM a GROUP BY depth)
SELECT std.depth, printf('%.4f', std.loss) AS std_best,
       printf('%.4f', base.loss) AS a23_base_lr, printf('%+.2f%%', 100 * (base.loss - std.loss) / std.loss) AS regret,
       printf('%.4f', own.loss) AS a23_lr_retuned, printf('%+.2f%%', 100 * (own.loss - std.loss) / std.loss) AS regret_lr,
       printf('%.4f', re.loss) AS a23_retuned, re.branch AS a23_branch, re.lr_log2 AS a23_lr_log2,
       printf('%+.2f%%', 100 * (re.loss - std.loss) / std.loss) AS regret_retuned
  FROM std JOIN base USING (depth) JOIN own USING (depth) JOIN re USING (depth) ORDER BY std.depth;

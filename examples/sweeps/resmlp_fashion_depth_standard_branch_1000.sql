-- docs/results/transfer_depth_resmlp.md: standard's best loss per depth over its branch multiplier and LR
-- (resmlp_fashion_depth_standard_branch_1000.db with the base's 1.61 from resmlp_fashion_depth_tuned_1000.db)
-- against completep at its depth-4 LR, both over seeds 0 and 1. Run from the repository root:
--   sqlite3 -header -column runs/sweeps/resmlp_fashion_depth_standard_branch_1000.db < examples/sweeps/resmlp_fashion_depth_standard_branch_1000.sql
ATTACH 'runs/sweeps/resmlp_fashion_depth_tuned_1000.db' AS t;
WITH s AS (
  SELECT depth, CAST(json_extract(axes, '$."hp.branch_mult"') AS REAL) AS branch, lr_log2, avg(final_loss) AS loss
    FROM points WHERE seed IN (0, 1) GROUP BY depth, branch, lr_log2
  UNION ALL
  SELECT depth, 1.612717, lr_log2, avg(final_loss) FROM t.points
    WHERE param = 'standard' AND seed IN (0, 1) AND depth > 4 GROUP BY depth, lr_log2),
best AS (SELECT depth, branch, lr_log2, min(loss) AS loss FROM s GROUP BY depth),
cp AS (SELECT depth, avg(final_loss) AS loss FROM t.points
         WHERE param = 'completep' AND lr_log2 = -11 AND seed IN (0, 1) GROUP BY depth)
SELECT best.depth, best.branch AS std_branch, best.lr_log2 AS std_lr_log2, printf('%.4f', best.loss) AS std_best,
       printf('%.4f', cp.loss) AS completep_at_base_lr, printf('%+.2f%%', 100 * (cp.loss - best.loss) / best.loss) AS regret
  FROM best JOIN cp USING (depth) ORDER BY best.depth;

"""scaleinv.predict and scaleinv.report on the H100 width store in docs/results/data (no torch
needed): the same analysis as `scaleinv predict` / `transfer-report`, as Python data, and bad input
as one scaleinv.UserError line."""
import math
import os
import unittest

import scaleinv

DB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "results", "data", "width_gpu_h100.db")


class PredictTest(unittest.TestCase):
    def test_holdout_fitted_on_64_to_512(self):
        p = scaleinv.predict(DB, holdout=True, fit_upto=512, param="mup")
        self.assertIsInstance(p, scaleinv.Prediction)
        self.assertEqual([q["target"] for q in p.predictions], [1024, 2048])
        for q in p.predictions:
            self.assertTrue(q["held_out"])
            self.assertEqual(q["fit"]["values"], [64, 128, 256, 512])
            self.assertEqual(q["status"], "predicted")
            lo, hi = q["interval_log2"]
            self.assertLess(lo, q["lr_log2"])
            self.assertLess(q["lr_log2"], hi)
            h = q["holdout"]
            self.assertAlmostEqual(h["error_doublings"], q["lr_log2"] - h["measured_log2"], places=9)
            self.assertGreaterEqual(h["regret_pct"], 0.0)
        self.assertIn("| mup, width (depth 2) |", str(p))

    def test_near_optimal_band_is_the_clis(self):
        import subprocess
        p = scaleinv.predict(DB, holdout=True, fit_upto=512, param="mup", near_optimal=1)
        self.assertIn("near-optimal band (within 1% of its best loss)", str(p))
        self.assertEqual(p.predictions[1]["optimum"], "near-optimal band centre, 1%")
        vertex = scaleinv.predict(DB, holdout=True, fit_upto=512, param="mup")
        self.assertEqual(vertex.predictions[1]["optimum"], "parabola vertex")
        self.assertNotEqual(p.predictions[1]["lr_log2"], vertex.predictions[1]["lr_log2"])
        cli = subprocess.run([os.environ.get("SCALEINV_BIN", "scaleinv"), "predict", "--db", DB, "--holdout",
                              "--fit-upto", "512", "--param", "mup", "--near-optimal", "1"], capture_output=True, text=True)
        self.assertEqual(cli.returncode, 0, cli.stderr)
        for line in str(p).splitlines():
            if line.startswith("| mup"):
                self.assertIn(line, cli.stdout)
        with self.assertRaisesRegex(scaleinv.UserError, "near_optimal"):
            scaleinv.predict(DB, holdout=True, near_optimal=-1)

    def test_target_and_store_list(self):
        p = scaleinv.predict([DB], at={"width": 4096}, param="standard")
        (q,) = p.predictions
        self.assertEqual(q["target"], 4096)
        # standard's optimum falls ~1.15 doublings per doubling of width: far below the base's
        self.assertLess(q["fit"]["slope"], -1.0)
        self.assertAlmostEqual(q["lr"], 2.0 ** q["lr_log2"], places=12)
        # 8x past 2048 with span 5 doublings: declined at the default limit of 3
        (d,) = scaleinv.predict(DB, at={"width": 2048 * 16}, param="mup").predictions
        self.assertTrue(d["status"].startswith("declined:"), d["status"])
        self.assertIsNone(d["lr_log2"])

    def test_hparam_names_what_the_store_sweeps(self):
        # The width store sweeps nothing beside the LR: predicting another key is one line.
        with self.assertRaisesRegex(scaleinv.UserError, "field .hparam.: .*sweeps none beside the LR"):
            scaleinv.predict(DB, at={"width": 4096}, hparam="hp.branch_mult")
        with self.assertRaisesRegex(scaleinv.UserError, "hparam"):
            scaleinv.predict(DB, at={"width": 4096}, hparam=3)
        (q,) = scaleinv.predict(DB, at={"width": 4096}, param="standard", hparam="lr").predictions
        self.assertEqual(q["hparam"], "lr")
        self.assertEqual(q["value_log2"], q["lr_log2"])

    def test_report_is_transfer_reports_analysis(self):
        r = scaleinv.report(DB, bootstrap=20)
        groups = {g["title"]: g for g in r["groups"]} if "groups" in r else {}
        self.assertTrue(groups, sorted(r))
        g = groups["width transfer (depth 2)"]
        params = {p["param"]: p for p in g["params"]}
        self.assertEqual(sorted(params), ["mup", "standard"])

    def test_bad_input_is_one_user_error(self):
        for kwargs in ({"at": {"widht": 512}}, {"at": {"width": -1}}, {"at": {"width": float("nan")}},
                       {"at": [("width", 512)]}, {"at": {"width": "big"}}, {}, {"holdout": "yes"},
                       {"holdout": True, "fit_upto": -2}, {"at": {"width": 512}, "param": "nosuch"},
                       {"at": {"width": 512}, "bootstrap": "x"}, {"at": {"width": 512}, "max_extrapolation": math.inf},
                       {"at": {"width": 512}, "param": 3}):
            with self.subTest(**{k: repr(v) for k, v in kwargs.items()}):
                with self.assertRaises(scaleinv.UserError) as cm:
                    scaleinv.predict(DB, **kwargs)
                self.assertEqual(len(str(cm.exception).splitlines()), 1, str(cm.exception))
        for db in (None, 3, [], os.path.join(os.path.dirname(DB), "none.db")):
            with self.subTest(db=repr(db)):
                with self.assertRaises(scaleinv.UserError):
                    scaleinv.predict(db, at={"width": 512})
                with self.assertRaises(scaleinv.UserError):
                    scaleinv.report(db)

    def test_rows_no_fit_can_use_are_refused_naming_the_point(self):
        """Issue 63 class 3: a NULL log2 LR was fitted as -4.6e12; a width of 0 or 1e30 (read back as
        -9.2e18) was declined without naming the value. Each is refused naming the point and field."""
        import shutil
        import sqlite3
        import tempfile
        tmp = tempfile.mkdtemp(prefix="scaleinv-rows-")
        self.addCleanup(shutil.rmtree, tmp, True)
        for sql, field, words in (("UPDATE points SET lr_log2 = NULL WHERE rowid = 3", "points.lr_log2", "no finite log2 LR"),
                                  ("UPDATE points SET width = 0 WHERE rowid = 3", "points.width", "width 0"),
                                  ("UPDATE points SET width = 1e30 WHERE rowid = 3", "points.width", "width 1e+30"),
                                  ("UPDATE points SET width = 64.5 WHERE rowid = 3", "points.width", "width 64.5")):
            with self.subTest(sql=sql):
                db = os.path.join(tmp, "s.db")
                shutil.copyfile(DB, db)
                with sqlite3.connect(db) as c:
                    c.execute(sql)
                    point = c.execute("SELECT id FROM points WHERE rowid = 3").fetchone()[0]
                for call in (lambda: scaleinv.predict(db, at={"width": 1024}), lambda: scaleinv.report(db)):
                    with self.assertRaises(scaleinv.UserError) as cm:
                        call()
                    msg = str(cm.exception)
                    self.assertIn(field, msg)
                    self.assertIn(words, msg)
                    self.assertIn(point, msg)
                    self.assertIn("fix:", msg)

    def test_bootstrap_is_capped_before_any_work(self):
        """Issue 63 class 3: --bootstrap 100000000 took 4 GB, then blamed model.width. Refused at once
        from Python and from both commands, naming the field and the cap; nothing written."""
        import subprocess
        import tempfile
        for n in (-1, 100001, 10 ** 8, 2 ** 40):
            with self.subTest(n=n):
                for call in (lambda: scaleinv.predict(DB, at={"width": 1024}, bootstrap=n),
                             lambda: scaleinv.report(DB, bootstrap=n)):
                    with self.assertRaises(scaleinv.UserError) as cm:
                        call()
                    self.assertIn("bootstrap", str(cm.exception))
                    self.assertIn("from 0 to 100000", str(cm.exception))
        self.assertEqual(scaleinv.predict(DB, at={"width": 1024}, param="mup", bootstrap=0).predictions[0]["status"],
                         "predicted")
        binary = os.environ.get("SCALEINV_BIN")
        if not binary:
            return
        out = tempfile.mkdtemp(prefix="scaleinv-boot-")
        for args in (["predict", "--db", DB, "--at", "width=1024", "--bootstrap", "100000000",
                      "--json", os.path.join(out, "p.json")],
                     ["transfer-report", "--db", DB, "--bootstrap", "100001", "--out", os.path.join(out, "r")]):
            r = subprocess.run([binary] + args, capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("field '--bootstrap'", r.stderr)
            self.assertEqual(os.listdir(out), [])

    def _store(self, name, sql=(), config=None):
        """A copy of the width store in a temporary directory, changed by `sql` and `config` (a
        function of each point's config dict)."""
        import json
        import shutil
        import sqlite3
        import tempfile
        if not hasattr(self, "_tmp"):
            self._tmp = tempfile.mkdtemp(prefix="scaleinv-stores-")
            self.addCleanup(shutil.rmtree, self._tmp, True)
        db = os.path.join(self._tmp, name)
        shutil.copyfile(DB, db)
        with sqlite3.connect(db) as c:
            for q in sql:
                c.execute(q)
            if config:
                for pid, cfg in c.execute("SELECT id, config FROM points").fetchall():
                    c.execute("UPDATE points SET config = ? WHERE id = ?", (json.dumps(config(json.loads(cfg))), pid))
        return db

    def test_stores_of_other_configs_are_not_read_as_one(self):
        """Issue 63 class 2: two sweeps of other configs at widths 64..256 and 512..2048 were fitted as
        one law over 64..2048 (refused only where two points shared coordinates). Refused by
        scaleinv.predict and scaleinv.report, naming both files and the field; the same sweep split
        by width still reads as one."""
        def steps(n):
            def f(cfg):
                cfg["train"]["steps"] = n
                return cfg
            return f
        small = self._store("small.db", ["DELETE FROM points WHERE width > 256"])
        large = self._store("large.db", ["DELETE FROM points WHERE width <= 256", "UPDATE points SET id = 'l' || id"],
                            steps(300))
        for call in (lambda: scaleinv.predict([small, large], at={"width": 4096}),
                     lambda: scaleinv.predict([small, large], holdout=True),
                     lambda: scaleinv.report([small, large], bootstrap=10)):
            with self.assertRaises(scaleinv.UserError) as cm:
                call()
            msg = str(cm.exception)
            self.assertEqual(len(msg.splitlines()), 1, msg)
            self.assertTrue(msg.startswith(large + ": field 'db': is another sweep than " + small), msg)
            self.assertIn("/train/steps is 1000 there, 300 here", msg)
            self.assertIn("fix: read each store on its own", msg)
        rest = self._store("rest.db", ["DELETE FROM points WHERE width <= 256"])
        whole = scaleinv.predict(DB, holdout=True, param="mup", bootstrap=20).predictions
        split = scaleinv.predict([small, rest], holdout=True, param="mup", bootstrap=20).predictions
        self.assertEqual([q["lr_log2"] for q in split], [q["lr_log2"] for q in whole])

    def test_a_target_axis_the_store_never_varied_is_refused_on_either_kind_of_store(self):
        """Issue 63 class 3: at={'width': 4096, 'depth': 48} on a store of scaleinv.sweep (which never
        sets depth) dropped the depth silently; on a CLI store (depth 2 throughout) it printed a note
        and assumed exponent 0. One rule: no store with one depth holds a law in depth; refused,
        naming the axis. A depth equal to the one held moves nothing and is predicted."""
        def no_depth(cfg):
            cfg["model"].pop("depth", None)
            return cfg
        python_store = self._store("python.db", ["UPDATE points SET depth = 0"], no_depth)
        for db, held in ((python_store, "its points hold no depth (the sweep never set it)"),
                         (DB, "its points hold depth 2")):
            with self.subTest(db=os.path.basename(db)):
                with self.assertRaises(scaleinv.UserError) as cm:
                    scaleinv.predict(db, at={"width": 4096, "depth": 48}, param="mup")
                msg = str(cm.exception)
                self.assertTrue(msg.startswith("scaleinv.predict: field 'at': depth=48: "), msg)
                self.assertIn("has no depth law for mup: " + held, msg)
                self.assertIn("leave it out of at", msg)
        (q,) = scaleinv.predict(DB, at={"width": 4096, "depth": 2}, param="mup").predictions
        (w,) = scaleinv.predict(DB, at={"width": 4096}, param="mup").predictions
        self.assertEqual(q["lr_log2"], w["lr_log2"])

    def test_refusals_name_keyword_arguments_not_flags(self):
        """Issue 63 class 10: refusals reached from Python named the CLI's flags (--at, --param,
        --hparam, --fit-upto, --db) and examples; bootstrap=10**20 was pybind11's TypeError and an
        int past a float (10**400) an OverflowError; db='' was looked up as a file. Each is one
        scaleinv.UserError line naming the keyword, with no '--' flag in it."""
        import re
        other = self._store("other.db", ["DELETE FROM points WHERE width <= 256", "UPDATE points SET id = 'o' || id"],
                            lambda cfg: dict(cfg, optim=dict(cfg["optim"], warmup_steps=10)))
        small = self._store("small.db", ["DELETE FROM points WHERE width > 256"])
        predict_cases = [
            ({"at": {"widht": 512}}, "at"), ({}, "at"), ({"at": {"width": 512}, "fit_upto": 128}, "fit_upto"),
            ({"holdout": True, "fit_upto": 2048}, "fit_upto"),
            ({"at": {"width": 512}, "param": "nosuch"}, "param"), ({"at": {"width": 512}, "hparam": "hp.branch_mult"}, "hparam"),
            ({"at": {"width": 512}, "hparam": "width"}, "hparam"), ({"at": {"width": 512}, "bootstrap": 10 ** 12}, "bootstrap"),
            ({"at": {"width": 512}, "bootstrap": 10 ** 20}, "bootstrap"), ({"at": {"width": 512}, "bootstrap": -2 ** 64}, "bootstrap"),
            ({"at": {"width": 10 ** 400}}, "at"), ({"at": {"width": 4096, "depth": 48}}, "at"),
            ({"db": "", "at": {"width": 512}}, "db"), ({"db": [DB, ""], "at": {"width": 512}}, "db"),
            ({"db": os.path.join(os.path.dirname(DB), "none.db"), "at": {"width": 512}}, "db"),
            ({"db": [small, other], "at": {"width": 512}}, "db")]
        report_cases = [({"bootstrap": 10 ** 20}, "bootstrap"), ({"bootstrap": 10 ** 6}, "bootstrap"), ({"db": ""}, "db"),
                        ({"db": os.path.join(os.path.dirname(DB), "none.db")}, "db"), ({"db": [small, other]}, "db")]
        for fn, cases in ((scaleinv.predict, predict_cases), (scaleinv.report, report_cases)):
            for kwargs, field in cases:
                kwargs = dict(kwargs)
                db = kwargs.pop("db", DB)
                with self.subTest(fn=fn.__name__, db=repr(db), **{k: repr(v) for k, v in kwargs.items()}):
                    with self.assertRaises(scaleinv.UserError) as cm:
                        fn(db, **kwargs)
                    msg = str(cm.exception)
                    self.assertEqual(len(msg.splitlines()), 1, msg)
                    self.assertIsNone(re.search(r"--[a-zA-Z]", msg), msg)
                    self.assertRegex(msg, rf"(field '{field}'|python: {field}\b)")
                    self.assertIn("fix:", msg)


if __name__ == "__main__":
    unittest.main()


STEPLAW_CSV = os.path.join(os.path.dirname(DB), "published", "steplaw_dense.csv")


class JointLawTest(unittest.TestCase):
    """scaleinv.predict(joint=[...]) on Step Law's published runs imported from Python: the issue's
    held-out bar (mean |error| below the paper's law's 0.26 doublings, regret below 0.04%, every
    held-out optimum covered), the same numbers as the CLI on the store the CLI imported, and its
    bad input spelled as keywords."""

    @classmethod
    def setUpClass(cls):
        import csv
        import tempfile
        cls.tmp = tempfile.TemporaryDirectory()
        with open(STEPLAW_CSV, newline="") as f:
            rows = list(csv.DictReader(f))
        cls.db = os.path.join(cls.tmp.name, "steplaw.db")
        scaleinv.store.from_records(rows, cls.db, lr="lr", loss="smooth_loss", scales={"N": "N", "D": "D"},
                                    hparams={"batch_size": "bs"}, param="standard")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_held_out_cells_beat_the_papers_law(self):
        p = scaleinv.predict(self.db, joint=["N", "D"], holdout=True, fit_upto={"N": 5.4e8},
                             reference_law={"c": 1.79, "N": -0.713, "D": 0.307}, loso=True)
        held = [q for q in p.predictions if q["held_out"]]
        self.assertEqual(len(held), 3)
        errors = [abs(q["holdout"]["error_doublings"]) for q in held]
        regrets = [q["holdout"]["regret_pct"] for q in held]
        paper = [abs(q["baselines"][2]["error_doublings"]) for q in held]
        self.assertLess(sum(errors) / 3, 0.26)
        self.assertLess(sum(regrets) / 3, 0.04)
        self.assertAlmostEqual(sum(paper) / 3, 0.2648, places=3)
        self.assertTrue(all(q["holdout"]["covered"] for q in held))
        self.assertEqual(p["fits"][0]["retuned"], ["batch_size"])
        self.assertEqual(p["estimator"], "near-optimal runs, 0.25%")
        self.assertEqual(p["loso"]["read"], 6)
        # The CLI on the store it imported (docs/results/data) gives the same law.
        cli = scaleinv.predict(os.path.join(os.path.dirname(DB), "steplaw_dense.db"), joint=["N", "D"],
                               holdout=True, fit_upto={"N": 5.4e8})
        self.assertEqual([c["value"] for c in cli["fits"][0]["coefficients"]],
                         [c["value"] for c in p["fits"][0]["coefficients"]])

    def test_bad_input_is_one_line_in_keywords(self):
        cases = [
            (dict(joint=["N", "D"], at={"N": 1e9}), "field 'at': the law is in N, D but the target gives no D"),
            (dict(joint=["N", "D"], holdout=True, fit_upto=5e8), "fit_upto"),
            (dict(joint=["N", "tokens"], at={"N": 1e9, "tokens": 1e11}), "field 'joint': 'tokens' is no axis"),
            (dict(joint=["N", "D"], at={"N": 1e9, "D": 1e11}, reference_law={"c": 1.79}), "field 'reference_law'"),
            (dict(joint="N,D", at={"N": 1e9}), "joint"),
        ]
        for kwargs, expected in cases:
            with self.assertRaises(scaleinv.UserError) as e:
                scaleinv.predict(self.db, **kwargs)
            self.assertIn(expected, str(e.exception))
            self.assertNotIn("\n", str(e.exception))
            self.assertNotIn("--", str(e.exception))

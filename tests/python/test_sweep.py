"""scaleinv.sweep / scaleinv.search on a model written here (issue 41): the points land in the CLI's
store (transfer-report, sweep rank and sweep merge read it), a kill -9 loses only the point in
flight, resume redoes nothing, shards merge into the whole grid, a training function that raises is
recorded and the search goes on, KeyboardInterrupt stops cleanly, and bad input is one line."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import unittest

import torch
from torch import nn

import scaleinv

BIN = os.environ.get("SCALEINV_BIN", "scaleinv")


def make_model(width, depth=1):
    layers = [nn.Linear(8, width), nn.ReLU()]
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 4))


_g = torch.Generator().manual_seed(0)
X = torch.randn(128, 8, generator=_g)
Y = (X[:, :4].sum(1) > 0).long() + 2 * (X[:, 4:].sum(1) > 0).long()


def train(model, opt, hp, steps):
    g = torch.Generator().manual_seed(hp["seed"])
    losses = []
    for _ in range(steps):
        i = torch.randint(0, 128, (16,), generator=g)
        loss = nn.functional.cross_entropy(model(X[i]), Y[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


GRID = {"fixed": {"param": "mup", "steps": 12},
        "grid": {"width": [16, 32], "lr_log2": {"from": -8, "to": -4, "step": 2}, "seed": [0, 1]}}


def rows(db, sql):
    with sqlite3.connect(db) as c:
        return c.execute(sql).fetchall()


def cli(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True)


class Sweep(unittest.TestCase):
    def setUp(self):
        torch.set_num_threads(1)
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_grid_lands_in_the_cli_store_and_the_report_reads_it(self):
        db = self.path("w.db")
        r = scaleinv.sweep(make_model, train, GRID, db=db, progress=False)
        self.assertEqual((r["points"], r["run"], r["skipped"], r["diverged"]), (12, 12, 0, 0))
        got = rows(db, "SELECT param, width, depth, lr_log2, seed, steps_done, axes, config FROM points ORDER BY rowid")
        self.assertEqual(len(got), 12)
        self.assertEqual({(g[0], g[1], g[2]) for g in got}, {("mup", 16, 0), ("mup", 32, 0)})
        self.assertEqual(sorted({g[3] for g in got}), [-8.0, -6.0, -4.0])
        axes, cfg = json.loads(got[0][6]), json.loads(got[0][7])
        self.assertEqual(set(axes), {"model.width", "lr_log2", "seed"})  # the CLI's keys
        self.assertEqual(cfg["model"], {"kind": "user", "width": 16})
        self.assertEqual(cfg["train"]["steps"], 12)
        self.assertTrue(all(g[5] == 12 for g in got))
        # The CLI's analysis reads it unchanged, and scaleinv.report gives the same as data.
        out = cli("transfer-report", "--db", db, "--out", self.path("rep"))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("width transfer", out.stdout)
        rep = r.report(bootstrap=20)
        self.assertEqual(rep, scaleinv.report(db, bootstrap=20))
        # The same space gives the same point ids and fingerprint (a second store, run again).
        scaleinv.sweep(make_model, train, GRID, db=self.path("w2.db"), progress=False)
        self.assertEqual(rows(db, "SELECT id FROM points ORDER BY id"), rows(self.path("w2.db"), "SELECT id FROM points ORDER BY id"))
        fp = "SELECT value FROM meta WHERE key = 'fingerprint'"
        self.assertEqual(rows(db, fp), rows(self.path("w2.db"), fp))

    def test_resume_redoes_nothing_and_a_changed_space_is_refused(self):
        db = self.path("r.db")
        scaleinv.sweep(make_model, train, GRID, db=db, progress=False)
        with self.assertRaisesRegex(scaleinv.UserError, "resume"):
            scaleinv.sweep(make_model, train, GRID, db=db, progress=False)
        calls = []
        r = scaleinv.sweep(make_model, lambda *a: calls.append(1) or train(*a), GRID, db=db, resume=True, progress=False)
        self.assertEqual((r["run"], r["skipped"], len(calls)), (0, 12, 0))
        changed = json.loads(json.dumps(GRID))
        changed["grid"]["seed"] = [0, 1, 2]
        with self.assertRaisesRegex(scaleinv.UserError, "another grid"):
            scaleinv.sweep(make_model, train, changed, db=db, resume=True, progress=False)
        self.assertEqual(rows(db, "SELECT COUNT(*) FROM points"), [(12,)])

    def test_kill_9_loses_only_the_point_in_flight(self):
        db, log = self.path("k.db"), self.path("trained.txt")
        script = textwrap.dedent("""
            import os, signal, sys
            sys.path.insert(0, HERE)
            import test_sweep as t, scaleinv
            def train(model, opt, hp, steps):
                with open(LOG) as f:
                    n = len(f.read().split())
                if n == 5:
                    os.kill(os.getpid(), signal.SIGKILL)   # mid-point: nothing of it is stored
                losses = t.train(model, opt, hp, steps)
                with open(LOG, "a") as f:
                    f.write("%s,%s,%s " % (hp["width"], hp["lr"], hp["seed"]))
                return losses
            scaleinv.sweep(t.make_model, train, t.GRID, db=DB, progress=False)
        """).replace("HERE", repr(os.path.dirname(os.path.abspath(__file__)))).replace("LOG", repr(log)).replace("DB", repr(db))
        open(log, "w").close()
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
        self.assertEqual(p.returncode, -signal.SIGKILL, p.stderr)
        self.assertEqual(rows(db, "SELECT COUNT(*) FROM points"), [(5,)])
        trained = []
        r = scaleinv.sweep(make_model, lambda m, o, hp, s: trained.append((hp["width"], hp["lr"], hp["seed"])) or
                           train(m, o, hp, s), GRID, db=db, resume=True, progress=False)
        self.assertEqual((r["skipped"], r["run"], len(trained)), (5, 7, 7))
        with open(log) as f:
            before = {tuple(float(x) for x in s.split(",")) for s in f.read().split()}
        self.assertFalse(before & {tuple(float(x) for x in t) for t in trained})  # nothing finished is redone
        self.assertEqual(rows(db, "SELECT COUNT(*) FROM points"), [(12,)])

    def test_shards_merge_into_the_whole_grid(self):
        whole = self.path("whole.db")
        # Each call from another RNG state of the caller's (a shard in a process that drew other
        # numbers first): a point trains alike whatever the caller's state (the base and delta
        # models apply measures are built under their own seed).
        torch.manual_seed(0)
        scaleinv.sweep(make_model, train, GRID, db=whole, progress=False)
        space = dict(GRID, sweep={"name": "whole"})  # the same sweep (its name is part of what the store says)
        for i in range(2):
            torch.manual_seed(100 + i)
            torch.rand(1000)
            r = scaleinv.sweep(make_model, train, space, db=self.path("s.db"), shard=(i, 2), progress=False)
            self.assertTrue(r.db.endswith(f"s.shard-{i}-of-2.db"))
        out = cli("sweep", "merge", self.path("m.db"), self.path("s.shard-0-of-2.db"), self.path("s.shard-1-of-2.db"))
        self.assertEqual(out.returncode, 0, out.stderr)
        ids = "SELECT id FROM points ORDER BY id"
        self.assertEqual(rows(self.path("m.db"), ids), rows(whole, ids))
        # and the same results: each point trained alike in its shard (ids alone would pass a shard
        # that stored another point's losses)
        losses = "SELECT id, final_loss, min_loss, steps_done FROM points ORDER BY id"
        self.assertEqual(rows(self.path("m.db"), losses), rows(whole, losses))
        self.assertEqual(len({r[1] for r in rows(whole, losses)}), 12)
        self.assertLess(len(rows(self.path("s.shard-0-of-2.db"), ids)), 12)
        with self.assertRaisesRegex(scaleinv.UserError, "shard"):
            scaleinv.sweep(make_model, train, GRID, db=self.path("x.db"), shard=(2, 2), progress=False)

    def test_search_halving_ranks_records_failures_and_goes_on(self):
        db = self.path("s.db")
        seen = []

        def train_mult(model, opt, hp, steps):
            seen.append((hp["search_mult"], steps))
            if hp["search_mult"] > 3:
                raise RuntimeError(f"boom at {hp['search_mult']:.3f}")
            if hp["search_mult"] < 0.4:
                return [1.0] * (steps - 1) + [float("nan")]
            for g in opt.param_groups:
                g["lr"] *= hp["search_mult"]
            return train(model, opt, hp, steps)

        space = {"fixed": {"param": "mup", "steps": 36, "width": 16},
                 "search": {"method": "halving", "trials": 9, "eta": 3, "min_steps": 4,
                            "space": {"lr_log2": {"from": -9, "to": -4}, "search_mult": {"from": 0.25, "to": 4, "log": True}}}}
        r = scaleinv.search(make_model, train_mult, space, db=db, progress=False)
        self.assertEqual(sorted({s for _, s in seen}), [4, 12, 36])  # the rungs: 36 / 3^k down to min_steps
        self.assertEqual([s for _, s in seen].count(4), 9)
        self.assertEqual([s for _, s in seen].count(12), 3)
        self.assertEqual([s for _, s in seen].count(36), 1)
        failed = [m for m, s in seen if m > 3]
        self.assertGreaterEqual(len(failed), 1)
        msgs = rows(db, "SELECT message FROM failures")
        self.assertEqual(len(msgs), len(failed))
        self.assertTrue(msgs[0][0].startswith("RuntimeError: boom at"))
        best = r.best()
        self.assertEqual(set(best), {"lr_log2", "search_mult"})
        self.assertTrue(0.4 <= best["search_mult"] <= 3)
        # The CLI ranks the store from the space it holds, with the same best trial.
        out = cli("sweep", "rank", "--db", db)
        self.assertEqual(out.returncode, 0, out.stderr)
        first = [t for t in r.ranking if t["status"] == "ok"][0]
        self.assertIn(f"{first['trial']:>7}     3     36", out.stdout)
        self.assertEqual(rows(db, "SELECT COUNT(*) FROM points WHERE diverged = 1")[0][0], len(failed) + len(
            [m for m, s in seen if m < 0.4]))
        # A NaN as the last of a rung's losses: diverged at that rung's last step; a raise: no step.
        nan_rows = rows(db, "SELECT diverged_step, steps_done FROM points WHERE diverged = 1 AND id NOT IN (SELECT id FROM failures)")
        self.assertEqual(len(nan_rows), len([m for m, s in seen if m < 0.4]))
        self.assertGreaterEqual(len(nan_rows), 1)
        self.assertTrue(all(d == s and d in (4, 12, 36) for d, s in nan_rows), nan_rows)
        self.assertTrue(all(d == -1 for (d,) in rows(db, "SELECT diverged_step FROM points WHERE id IN (SELECT id FROM failures)")))
        # A search of several rungs is not sharded.
        with self.assertRaisesRegex(scaleinv.UserError, "shard"):
            scaleinv.search(make_model, train_mult, space, db=self.path("t.db"), shard=(0, 2), progress=False)

    def test_keyboard_interrupt_stops_and_the_sweep_resumes(self):
        db = self.path("i.db")
        n = []

        def interrupted(model, opt, hp, steps):
            if len(n) == 3:
                raise KeyboardInterrupt
            n.append(1)
            return train(model, opt, hp, steps)

        with self.assertRaises(KeyboardInterrupt):
            scaleinv.sweep(make_model, interrupted, GRID, db=db, progress=False)
        self.assertEqual(rows(db, "SELECT COUNT(*) FROM points"), [(3,)])
        self.assertFalse(os.path.exists(db + ".lock"))  # the writer lock went with the interrupted run
        r = scaleinv.sweep(make_model, train, GRID, db=db, resume=True, progress=False)
        self.assertEqual((r["skipped"], r["run"]), (3, 9))

    def test_own_optimizer_and_hyperparameters_reach_the_training_function(self):
        got = []

        def own(model, hp):
            return torch.optim.SGD(model.parameters(), lr=hp["lr"] * hp["boost"])

        def record(model, opt, hp, steps):
            got.append((dict(hp), steps, type(opt).__name__))
            return 1.0
        space = {"fixed": {"param": "standard", "steps": 3, "batch_size": 8, "depth": 2},
                 "grid": {"width": [16], "lr": [0.1], "boost": [1, 2]}}
        scaleinv.sweep(make_model, record, space, db=self.path("o.db"), optimizer=own, progress=False)
        self.assertEqual(got[0][0], {"param": "standard", "width": 16, "depth": 2, "lr": 0.1, "seed": 0, "steps": 3,
                                     "batch_size": 8, "boost": 1})
        self.assertEqual((got[0][1], got[0][2], got[1][0]["boost"]), (3, "SGD", 2))
        # A final loss alone counts the run's own steps.
        self.assertEqual(rows(self.path("o.db"), "SELECT steps_done, diverged_step FROM points"), [(3, -1), (3, -1)])
        axes = json.loads(rows(self.path("o.db"), "SELECT axes FROM points")[0][0])
        self.assertEqual(set(axes), {"model.width", "optim.lr", "boost"})

    def test_bad_input_is_one_line_and_writes_nothing(self):
        cases = [
            ({"fixed": {"param": "mup"}, "grid": {"width": [16], "lr_log2": [-6]}}, "steps"),
            ({"fixed": {"param": "nope", "steps": 3}, "grid": {"width": [16], "lr_log2": [-6]}}, "nope"),
            ({"fixed": {"param": "mup", "steps": 3}, "grid": {"width": [16]}}, "learning rate"),
            ({"fixed": {"param": "mup", "steps": 3}, "grid": {"width": [0, 16], "lr_log2": [-6]}}, "grid.width"),
            ({"fixed": {"param": "mup", "steps": 3, "width": 16}, "grid": {"width": [16], "lr_log2": [-6]}}, "fixed"),
            ({"fixed": {"param": "mup", "steps": 3}, "grid": {"lr_log2": [-6]}}, "width"),
            ({"sweep": {"colour": 1}, "fixed": {"param": "mup", "steps": 3}, "grid": {"width": [16], "lr_log2": [-6]}}, "colour"),
            ({"fixed": {"param": "mup", "steps": 3}, "grid": {"width": [16], "lr_log2": [-6], "x": [None]}}, "None"),
            ({"fixed": {"param": "mup", "steps": 3, "width": 16}, "grid": {"lr_log2": [-6]},
              "search": {"method": "halving", "trials": 3, "space": {"steps": [2, 3]}}}, "steps"),
            ("/nonexistent/space.toml", "cannot read"),
            (42, "not a dict"),
        ]
        for space, words in cases:
            with self.subTest(space=space):
                with self.assertRaises(scaleinv.UserError) as e:
                    scaleinv.sweep(make_model, train, space, db=self.path("bad.db"), progress=False)
                self.assertEqual(len(str(e.exception).splitlines()), 1, str(e.exception))
                self.assertIn(words, str(e.exception))
                self.assertIn("fix", str(e.exception))
                self.assertNotRegex(str(e.exception), r"--[a-zA-Z]")
                self.assertFalse(os.path.exists(self.path("bad.db")))
        with self.assertRaisesRegex(scaleinv.UserError, "search: missing"):
            scaleinv.search(make_model, train, GRID, db=self.path("bad.db"), progress=False)
        with self.assertRaisesRegex(scaleinv.UserError, "not a number"):
            scaleinv.sweep(make_model, lambda *a: "low", GRID, db=self.path("s.db"), progress=False)
        with self.assertRaisesRegex(scaleinv.UserError, "bool"):  # float(True) would store a loss of 1.0
            scaleinv.sweep(make_model, lambda *a: True, GRID, db=self.path("b.db"), progress=False)
        with self.assertRaisesRegex(scaleinv.UserError, "make_model: cannot be called with width="):
            scaleinv.sweep(lambda w: make_model(w), train, GRID, db=self.path("w.db"), progress=False)
        self.assertFalse(os.path.exists(self.path("w.db")))

        class Unprintable(Exception):
            def __str__(self):
                raise RuntimeError("no")

        def bad_train(*a):
            raise Unprintable()
        scaleinv.sweep(make_model, bad_train, GRID, db=self.path("u.db"), progress=False)  # recorded, not raised
        errs = rows(self.path("u.db"), "SELECT message FROM failures")
        self.assertTrue(errs and all(e[0].startswith("Unprintable: <its message could not be read") for e in errs), errs)
        # A Python sweep file is refused by `scaleinv sweep` with the pointer to scaleinv.sweep.
        toml = self.path("mine.toml")
        with open(toml, "w") as f:
            f.write('[sweep]\ntarget = "python"\n[fixed]\nparam = "mup"\nsteps = 3\n[grid]\nwidth = [16]\nlr_log2 = [-6]\n')
        out = cli("sweep", "--config", toml, "--out", self.path("c.db"))
        self.assertEqual(out.returncode, 2)
        self.assertIn("scaleinv.sweep", out.stderr)
        self.assertEqual(scaleinv.sweep(make_model, train, toml, db=self.path("t.db"), progress=False)["run"], 1)
        # The store over the space file it reads (issue 63 class 1), also through a link: refused by
        # name, the file unchanged (refused before only as 'not a database').
        with open(toml, "rb") as f:
            before = f.read()
        os.symlink(toml, self.path("link.db"))
        for db in (toml, self.path("link.db")):
            with self.assertRaisesRegex(scaleinv.UserError, "is the space file this sweep reads"):
                scaleinv.sweep(make_model, train, toml, db=db, progress=False)
        with open(toml, "rb") as f:
            self.assertEqual(f.read(), before)


    def test_the_stored_final_loss_is_the_mean_of_the_curves_last_tenth(self):
        # A curve falling from 20 to 1: the first tenth's mean (19.5) and the last's (1.5) differ, and
        # every point its own curve (a fixture where every path gives one answer tests nothing).
        def falling(model, opt, hp, steps):
            n = hp["n"]
            return [20 - 19 * k / (n - 1) + hp["seed"] for k in range(n)]
        space = {"fixed": {"param": "mup", "steps": 100, "width": 16, "lr_log2": -6},
                 "grid": {"n": [100, 20], "seed": [0, 1]}}
        db = self.path("f.db")
        scaleinv.sweep(make_model, falling, space, db=db, progress=False)
        got = rows(db, "SELECT config, final_loss, min_loss, steps_done, diverged FROM points")
        self.assertEqual(len(got), 4)
        for cfg, final, low, done, diverged in got:
            cfg = json.loads(cfg)
            n, seed = cfg["user"]["n"], cfg["train"]["seed"]
            curve = [20 - 19 * k / (n - 1) + seed for k in range(n)]
            tail = curve[-max(1, n // 10):]  # the [sweep] window: the last 10% of the losses given
            self.assertAlmostEqual(final, sum(tail) / len(tail), places=9, msg=(n, seed))
            self.assertEqual((low, done, diverged), (1 + seed, 100, 0))
        # A logged subset (10 losses over 100 steps) that turns NaN at its 4th: diverged at step 40,
        # where one loss a step (n == steps) would have said step 4.
        def logged(model, opt, hp, steps):
            return [2.0, 1.9, 1.8, float("nan"), 1.6, 1.5, 1.4, 1.3, 1.2, 1.1]
        db = self.path("l.db")
        scaleinv.sweep(make_model, logged, {"fixed": {"param": "mup", "steps": 100, "width": 16, "lr_log2": -6},
                                            "grid": {"seed": [0]}}, db=db, progress=False)
        self.assertEqual(rows(db, "SELECT diverged, diverged_step, steps_done FROM points"), [(1, 40, 40)])

    def test_each_point_gets_apply_of_its_own_param_base_and_weight_decay(self):
        # GRID sweeps one param at the default base: a run_point that always used "mup", or ignored
        # base= or the point's weight_decay, passed every other test. Two params, a base of its own
        # and two decays: each point's groups must be what scaleinv.apply gives for them.
        got = {}

        def record(model, opt, hp, steps):
            got[(hp["param"], hp["width"], hp["weight_decay"])] = [(g["lr"], g["weight_decay"]) for g in opt.param_groups]
            return 1.0
        space = {"fixed": {"steps": 2, "lr_log2": -6},
                 "grid": {"param": ["mup", "standard"], "width": [16, 32], "weight_decay": [0.0, 0.1]}}
        scaleinv.sweep(make_model, record, space, db=self.path("p.db"), base={"width": 8}, progress=False)
        self.assertEqual(len(got), 8)
        for (param, width, wd), groups in got.items():
            want = scaleinv.apply(make_model(width), base=make_model(8), delta=make_model(16), param=param,
                                  lr=2.0 ** -6, weight_decay=wd)
            self.assertEqual(groups, [(g["lr"], g["weight_decay"]) for g in want.param_groups], (param, width, wd))
        self.assertNotEqual(got[("mup", 32, 0.0)], got[("standard", 32, 0.0)])
        self.assertNotEqual(got[("mup", 32, 0.0)], got[("mup", 32, 0.1)])

    def test_integers_past_what_the_core_holds_are_refused_naming_the_field(self):
        # A Python int past int64 was wrapped to -9223372036854775808 in the core (steps=2**63 was
        # "-9223372036854775808 is below what steps takes"); a float for an integer name past int64
        # (1e30) too; a width past the config's int was dropped (the space "set no width").
        fixed = {"param": "mup", "steps": 3, "width": 16, "lr_log2": -6}
        cases = [
            ({"fixed": dict(fixed, steps=2 ** 63)}, "fixed.steps", "9223372036854775808"),
            ({"fixed": dict(fixed, steps=2 ** 64)}, "fixed.steps", "18446744073709551616"),
            ({"fixed": dict(fixed, steps=-(2 ** 63) - 1)}, "fixed.steps", "-9223372036854775809"),
            ({"fixed": dict(fixed, steps=1e30)}, "fixed.steps", "past a 64-bit integer"),
            ({"fixed": dict(fixed, seed=2 ** 63)}, "fixed.seed", "9223372036854775808"),
            ({"fixed": dict(fixed, seed=1e19)}, "fixed.seed", "past a 64-bit integer"),
            ({"fixed": dict(fixed, width=2 ** 31)}, "fixed.width", "2147483648"),
            ({"fixed": dict(fixed, depth=2 ** 40)}, "fixed.depth", "1099511627776"),
            ({"fixed": dict(fixed, init_scale=2 ** 70)}, "fixed.init_scale", "1180591620717411303424"),
            ({"fixed": {"param": "mup", "width": 16, "lr_log2": -6}, "grid": {"steps": [3, 2 ** 63]}}, "grid.steps",
             "9223372036854775808"),
            ({"fixed": {"param": "mup", "lr_log2": -6, "steps": 3}, "grid": {"width": {"from": 16, "to": 1e30, "step": 1e29}}},
             "grid.width", "past a 64-bit integer"),
            ({"fixed": fixed, "search": {"method": "random", "trials": 2 ** 63,
                                         "space": {"init_scale": {"from": 0.5, "to": 2}}}}, "search.trials",
             "9223372036854775808"),
            ({"fixed": dict(fixed, steps=12), "search": {"method": "random", "trials": 2,
                                                         "space": {"batch_size": {"from": 1, "to": 1e30}}}},
             "search.space.batch_size", "past a 64-bit integer"),
            ({"fixed": fixed, "grid": {"init_scale": {"from": 1, "to": 1e300}}}, "grid.init_scale", "larger step"),
        ]
        for space, field, words in cases:
            with self.subTest(field=field, words=words):
                with self.assertRaises(scaleinv.UserError) as e:
                    scaleinv.sweep(make_model, train, space, db=self.path("big.db"), progress=False)
                msg = str(e.exception)
                self.assertEqual(len(msg.splitlines()), 1, msg)
                self.assertIn(f"field '{field}'", msg)
                self.assertIn(words, msg)
                self.assertIn("fix", msg)
                self.assertNotIn("-9223372036854775808", msg)
                self.assertEqual(os.listdir(self.dir), [])
        self.assertEqual(len(cases), 14)

    def test_refusals_write_nothing_and_leave_an_existing_store_as_it_was(self):
        # Refused before the store is opened: no file, no -wal/-shm/.lock; an existing store unchanged.
        class Empty(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.register_buffer("scale", torch.ones(width))

            def forward(self, x):
                return x
        cached = make_model(16)
        cases = [
            ({"overrides": {"(": "readout"}}, make_model, "("),         # not a regex
            ({"overrides": {"nosuch": "readout"}}, make_model, "nosuch"),  # a pattern no tensor matches
            ({}, lambda width: None, "returned NoneType"),
            ({}, lambda width: Empty(width), "no parameters"),
            ({}, lambda width: cached, "same model object"),
            ({"optimizer": lambda m, hp: torch.optim.SGD(m.parameters(), lr=hp["lr"])}, lambda width: None,
             "returned NoneType"),
        ]
        for existing in (False, True):
            db = self.path("e.db" if existing else "n.db")
            if existing:
                scaleinv.sweep(make_model, train, GRID, db=db, progress=False)
            before = sorted(os.listdir(self.dir))
            with open(db, "rb") if existing else open(os.devnull, "rb") as f:
                content = f.read()
            for kwargs, mm, words in cases:
                for resume in (False, True):
                    with self.subTest(existing=existing, kwargs=kwargs, words=words, resume=resume):
                        with self.assertRaises(scaleinv.UserError) as e:
                            scaleinv.sweep(mm, train, GRID, db=db, resume=resume, progress=False, **kwargs)
                        self.assertEqual(len(str(e.exception).splitlines()), 1, str(e.exception))
                        self.assertIn(words, str(e.exception))
                        self.assertEqual(sorted(os.listdir(self.dir)), before)
                        if existing:
                            with open(db, "rb") as f:
                                self.assertEqual(f.read(), content)
        self.assertEqual(len(cases), 6)

    def test_no_refusal_names_a_cli_flag(self):
        # The core's refusals speak of the keyword arguments (db=, resume=True, shard=(i, n)), not of
        # the CLI's --out, --resume, --shard; the Python user never typed a flag.
        db = self.path("a.db")
        scaleinv.sweep(make_model, train, GRID, db=db, progress=False)
        changed = json.loads(json.dumps(GRID))
        changed["grid"]["seed"] = [0, 1, 2]
        junk = self.path("junk.db")
        with open(junk, "w") as f:
            f.write("not a database " * 100)
        halving = {"fixed": {"param": "mup", "steps": 36, "width": 16},
                   "search": {"method": "halving", "trials": 9, "eta": 3, "min_steps": 4,
                              "space": {"lr_log2": {"from": -9, "to": -4}}}}
        env = {"SLURM_ARRAY_TASK_ID": "x", "SLURM_ARRAY_TASK_COUNT": "4"}
        cases = [
            (scaleinv.sweep, GRID, {"db": db}, ["field 'db'", "resume=True"]),
            (scaleinv.sweep, changed, {"db": db, "resume": True}, ["field 'resume=True'", "another grid"]),
            (scaleinv.sweep, GRID, {"db": junk}, ["not a database"]),
            (scaleinv.sweep, GRID, {"db": self.path("s.db"), "shard": "3/2"}, ["scaleinv.sweep: field 'shard'",
                                                                             "shard=(i, n)"]),
            (scaleinv.sweep, GRID, {"db": self.path("s.db"), "shard": "x"}, ["field 'shard'", "shard=(0, 4)"]),
            (scaleinv.search, halving, {"db": self.path("h.db"), "shard": (0, 2)}, ["scaleinv.search: field 'shard'",
                                                                                   "run it unsharded"]),
            (scaleinv.sweep, GRID, {"db": self.path("e.db"), "shard": "env"}, ["SLURM_ARRAY_TASK_ID='x'", "shard=(i, n)"]),
            (scaleinv.sweep, GRID, {"db": ""}, ["python: db: ''"]),
            (scaleinv.sweep, GRID, {"db": self.dir}, ["is a directory"]),
            (scaleinv.sweep, {"sweep": {"target": "zoo"}, "grid": {"lr_log2": [-6]}}, {"db": self.path("z.db")},
             ["sweep.target", "scaleinv sweep"]),
            (scaleinv.sweep, dict(GRID, fixed={"param": "nope", "steps": 3}), {"db": self.path("p.db")},
             ["field 'param'", "nope"]),
            (scaleinv.sweep, GRID, {"db": self.path("r.db"), "resume": "yes"}, ["python: resume"]),
            (scaleinv.sweep, GRID, {"db": os.path.join(junk, "x.db")}, ["x.db"]),
        ]
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            for fn, space, kwargs, words in cases:
                with self.subTest(kwargs=kwargs):
                    with self.assertRaises(scaleinv.UserError) as e:
                        fn(make_model, train, space, progress=False, **kwargs)
                    msg = str(e.exception)
                    self.assertEqual(len(msg.splitlines()), 1, msg)
                    self.assertNotRegex(msg, r"--[a-zA-Z]")
                    self.assertNotIn("command line", msg)
                    self.assertNotIn("sweep.name", msg)
                    self.assertIn("fix", msg)
                    for w in words:
                        self.assertIn(w, msg)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.assertEqual(len(cases), 13)
        self.assertEqual(sorted(os.listdir(self.dir)), ["a.db", "junk.db"])  # no refusal wrote a file
        # A second writer on a store in use (a sweep started from inside another's training function).
        inner = []

        def nested(model, opt, hp, steps):
            if not inner:
                try:
                    scaleinv.sweep(make_model, train, GRID, db=self.path("busy.db"), resume=True, progress=False)
                except scaleinv.UserError as e:
                    inner.append(str(e))
            return 1.0
        scaleinv.sweep(make_model, nested, GRID, db=self.path("busy.db"), progress=False)
        self.assertEqual(len(inner), 1)
        self.assertIn("another scaleinv sweep", inner[0])
        self.assertIn("shard=(i, n)", inner[0])
        self.assertNotRegex(inner[0], r"--[a-zA-Z]")


if __name__ == "__main__":
    unittest.main()

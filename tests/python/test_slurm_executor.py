"""scaleinv.sweep / scaleinv.search with executor="slurm" (issue 61) under a real Slurm cluster started
on loopback for the class (tests/python/slurm_cluster.py: its own munged, slurmctld and slurmd, 2
CPUs, no accounting database), and the tiny MLP of test_sweep.py. Checked: the same point ids and
bit-identical losses as executor=None (one torch thread in either: train1 here, SLURM_CPUS_PER_TASK=1
there); a task killed mid-point (its Python SIGKILLs itself) submitted again and stored, and one
killed every time recorded as failed with the reason while the sweep completes; a halving search
ranked as the local one; a driver killed mid-sweep resumed without training any point twice (the
array it left running is waited for, not sent again); Ctrl-C cancelling the array; the refusals
(unknown option, cloudpickle missing, no scheduler, a partition, options sbatch refuses, a folder the
nodes cannot see, a Python there without scaleinv, two drivers on one store) as one line, leaving
nothing behind.

The node is this machine, so it sees this machine's files: the tasks run this venv's Python and
import this file and test_sweep.py by name through the driver's sys.path, which each task puts after
its own (python/scaleinv/_slurm_task.py; under ctest PYTHONPATH is unset). Each task is a new Python
that imports torch (2-3 s here), so the spaces have 2 to 4 points. Skipped, saying why, when no
cluster can start or cloudpickle is missing (the oldest leg: scripts/python_venv.sh installs it in
the newest only)."""
import fcntl
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from unittest import mock

import torch

import scaleinv
import test_sweep as t  # the tiny MLP and its train
from slurm_cluster import SlurmCluster, SlurmUnavailable, start_or_skip

try:
    import cloudpickle
except ModuleNotFoundError:
    cloudpickle = None

HERE = os.path.dirname(os.path.abspath(__file__))
GRID = {"fixed": {"param": "mup", "steps": 12}, "grid": {"width": [16, 32], "lr_log2": [-6, -4], "seed": [0]}}
WIDTHS = {"fixed": {"param": "mup", "steps": 12, "lr_log2": -6}, "grid": {"width": [16, 32]}}
LRS = {"fixed": {"param": "mup", "steps": 12, "width": 16}, "grid": {"lr_log2": [-8, -6, -4]}}
SEARCH = {"fixed": {"param": "mup", "steps": 18, "width": 16},
          "search": {"method": "halving", "trials": 2, "eta": 2, "min_steps": 9,
                     "space": {"lr_log2": {"from": -10, "to": -3}}}}
FAST = {"poll_s": 0.2}
NO_CLOUDPICKLE = ("cloudpickle is not installed in this venv (scripts/python_venv.sh installs it in the newest leg "
                  "only; Debian's python3-cloudpickle serves the oldest where installed)")


def train1(model, opt, hp, steps):
    """test_sweep's train on one torch thread, here and in a Slurm task (bit-identical losses)."""
    torch.set_num_threads(1)
    return t.train(model, opt, hp, steps)


def rows(db, sql):
    with sqlite3.connect(db) as c:
        return c.execute(sql).fetchall()


POINTS = ("SELECT id, sweep, param, width, lr_log2, seed, final_loss, min_loss, curve, diverged, steps_done, axes, config "
          "FROM points ORDER BY id")


class SlurmOptionRefusals(unittest.TestCase):
    """One line each, before any store or folder is written; no cluster needed."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.db = os.path.join(self.tmp.name, "r.db")

    def tearDown(self):
        self.tmp.cleanup()

    def refused(self, pattern, **kw):
        with self.assertRaisesRegex(scaleinv.UserError, pattern) as cm:
            scaleinv.sweep(t.make_model, train1, GRID, db=self.db, progress=False, **kw)
        self.assertNotIn("\n", str(cm.exception))
        self.assertEqual(os.listdir(self.tmp.name), [])
        return str(cm.exception)

    def test_options(self):
        self.refused(r"executor: 'dask' is not an executor \(fix: .*executor='slurm' as Slurm array tasks\)",
                     executor="dask")
        self.refused(r"executor_options: key 'partition' is for executor='slurm' \(fix: drop executor_options, or "
                     r"give executor='slurm'\)", executor_options={"partition": "cpu"})
        self.refused(r"executor_options: unknown key 'num_cpus' \(fix: use cpus_per_task, folder, max_retries, partition, "
                     r"poll_s, probe_timeout_s, python, sbatch_args: e.g. cpus_per_task=1\)",
                     executor="slurm", executor_options={"num_cpus": 1})
        self.refused(r"sbatch_args: '--time=1' is not a list of strings", executor="slurm",
                     executor_options={"sbatch_args": "--time=1"})
        self.refused(r"cpus_per_task: 0 is not an integer >= 1", executor="slurm", executor_options={"cpus_per_task": 0})
        self.refused(r"max_retries: 1.5 is not an integer >= 0", executor="slurm", executor_options={"max_retries": 1.5})
        self.refused(r"python: '/nonexistent/python' is not an executable here", executor="slurm",
                     executor_options={"python": "/nonexistent/python"})

    def test_cloudpickle_missing_names_pip_install(self):
        with mock.patch.dict(sys.modules, {"cloudpickle": None}):  # as in a Python without it
            self.assertIn("(fix: pip install cloudpickle)", self.refused("executor: 'slurm' ships", executor="slurm"))

    def test_no_scheduler_reachable(self):
        if cloudpickle is None:
            self.skipTest(NO_CLOUDPICKLE)
        t0 = time.monotonic()
        with mock.patch.dict(os.environ, {"SLURM_CONF": os.path.join(self.tmp.name, "none", "slurm.conf")}):
            msg = self.refused(r"^scaleinv.sweep: field 'executor': no scheduler reachable: SLURM_CONF names ",
                               executor="slurm")
        self.assertIn("(fix: point SLURM_CONF at the cluster's slurm.conf", msg)
        with mock.patch.dict(os.environ, {"PATH": self.tmp.name}):
            msg = self.refused(r"no scheduler reachable: `sbatch` is not on PATH", executor="slurm")
        self.assertIn("without Slurm, executor=None trains here)", msg)
        self.assertLess(time.monotonic() - t0, 10)


class WatchWithAFakeSqueue(unittest.TestCase):
    """The driver's poll loop (SlurmExecutor._watch) against a scripted squeue, no cluster: squeue
    failing for a while (a controller restarting) is waited out, a task that leaves the queue with
    no result is sent again and its result then recorded, and what runs is told before what
    finished is recorded."""

    def test_a_failing_squeue_is_waited_out_and_a_lost_task_sent_again(self):
        from scaleinv import _slurm
        with tempfile.TemporaryDirectory() as folder:
            for sub in ("results", "logs"):
                os.mkdir(os.path.join(folder, sub))
            events = []

            def result(point_id, loss):
                with open(os.path.join(folder, "results", point_id + ".json"), "w") as f:
                    json.dump({"point_id": point_id, "result": {"losses": [loss], "wall_s": 1.0}}, f)

            def lost(job, index):  # what the job script writes when its Python is killed
                with open(os.path.join(folder, "logs", f"{job}_{index}.out"), "w") as f:
                    f.write("scaleinv: task ended (its Python was killed by signal 9)\n")

            polls = iter([
                RuntimeError("squeue -j 7 failed: slurm_load_jobs error: Unable to contact slurm controller"),
                RuntimeError("squeue -j 7 failed"),
                {"7": {0: "RUNNING", 1: "RUNNING"}},
                lambda: (result("a", 1.5), lost("7", 1), {"7": {}})[-1],  # a finished, b's task lost
                {"8": {1: "PENDING"}},
                {"8": {1: "RUNNING"}},
                lambda: (result("b", 2.5), {"8": {}})[-1]])

            class Squeue:
                def live_tasks(self, job):
                    step = next(polls)
                    if isinstance(step, Exception):
                        raise step
                    return (step() if callable(step) else step).get(job, {})

            ex = object.__new__(_slurm.SlurmExecutor)
            ex.folder, ex.client, ex.train_s = folder, Squeue(), 0.0
            ex.o = {"poll_s": 0.01, "max_retries": 1}

            def send(ts, attempt):
                events.append(("send", [t.index for t in ts], attempt))
                for t in ts:
                    t.job, t.attempt, t.state, t.ended_at = "8", attempt, None, None

            ex._send = send
            tasks = {i: _slurm._Task(i, pid, "0", i, "7", 1) for i, pid in enumerate("ab")}
            ex._watch(tasks, lambda i: events.append(("started", i)),
                      lambda i, r: events.append(("record", i, r["losses"])))
        self.assertEqual(events, [("started", 0), ("started", 1), ("record", 0, [1.5]), ("send", [1], 2),
                                  ("record", 1, [2.5])])
        self.assertEqual(ex.train_s, 2.0)


def raises_outside_train(hparams):
    """A point function whose error is no training's (as _sweep's when train returns a bool)."""
    raise scaleinv.UserError(f"python: train: returned bool (True), not a number ({hparams['width']})")


class TaskWithoutACluster(unittest.TestCase):
    """python -m scaleinv._slurm_task's main, run here: what the point function raised outside train
    reaches the driver as that exception (the sweep ends, as locally), and a function its node cannot
    unpickle is one line naming the fix."""

    def run_task(self, function_bytes):
        from scaleinv import _slurm, _slurm_task
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder, True)
        os.makedirs(os.path.join(folder, "points", "0"))
        os.mkdir(os.path.join(folder, "results"))
        with open(os.path.join(folder, "f.pkl"), "wb") as f:
            f.write(function_bytes)
        with open(os.path.join(folder, "points", "0", "set.json"), "w") as f:
            json.dump({"function": os.path.join(folder, "f.pkl"), "results": os.path.join(folder, "results"),
                       "sys_path": []}, f)
        with open(os.path.join(folder, "points", "0", "0.json"), "w") as f:
            json.dump({"point_id": "p0", "file": "p0.json", "hparams": {"width": 16}}, f)
        with mock.patch("sys.stderr"), mock.patch("sys.stdout"):
            self.assertEqual(_slurm_task.main([os.path.join(folder, "points", "0"), "0"]), 0)
        ex = object.__new__(_slurm.SlurmExecutor)
        ex.folder = folder
        return ex._result(_slurm._Task(0, "p0", "0", 0, "7", 1))

    def test_an_error_outside_train_is_raised_by_the_driver(self):
        import pickle
        with self.assertRaisesRegex(scaleinv.UserError, r"^python: train: returned bool \(True\), not a number \(16\)$"):
            self.run_task(pickle.dumps(raises_outside_train))

    def test_a_function_the_node_cannot_import_is_one_line(self):
        import pickle
        import types
        gone = types.ModuleType("module_only_the_driver_has")
        exec("def train_point(hparams):\n    return {}", gone.__dict__)
        gone.train_point.__module__ = gone.__name__
        with mock.patch.dict(sys.modules, {gone.__name__: gone}):
            blob = pickle.dumps(gone.train_point)
        with self.assertRaisesRegex(scaleinv.UserError, r"^python: train: the Slurm task could not load the point "
                                    r"function on its node \(ModuleNotFoundError: No module named "
                                    r"'module_only_the_driver_has'; log .*\) \(fix: make the modules"):
            self.run_task(blob)


class SlurmExecutor(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if cloudpickle is None:
            raise unittest.SkipTest(NO_CLOUDPICKLE)
        cls.slurm = start_or_skip(cls)
        # The driver (this process) talks to the cluster through SLURM_CONF, as a user's shell does.
        env = mock.patch.dict(os.environ, cls.slurm.env, clear=True)
        env.start()
        cls.addClassCleanup(env.stop)

    def setUp(self):
        torch.set_num_threads(1)
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def local(self, name, space=GRID):
        os.makedirs(self.path(name), exist_ok=True)
        db = self.path(f"{name}/w.db")  # one stem for both stores: one sweep name
        scaleinv.sweep(t.make_model, train1, space, db=db, progress=False)
        return db

    def test_the_same_ids_and_losses_as_the_local_executor(self):
        local = self.local("local")
        os.mkdir(self.path("slurm"))
        db = self.path("slurm/w.db")
        r = scaleinv.sweep(t.make_model, train1, GRID, db=db, progress=False, executor="slurm", executor_options=FAST)
        self.assertEqual((r["points"], r["run"], r["failed"], r["diverged"]), (4, 4, 0, 0))
        self.assertEqual(rows(db, POINTS), rows(local, POINTS))  # floats compared exactly
        fp = "SELECT key, value FROM meta WHERE key IN ('fingerprint', 'sweep_toml', 'grid', 'points_written') ORDER BY key"
        self.assertEqual(rows(db, fp), rows(local, fp))
        self.assertGreater(r["train_s"], 0)
        # What stays beside the store: the logs, the job list and the script; the points, results and
        # the pickled function went with the sweep's end.
        folder = self.path("slurm/w.pyslurm")
        self.assertEqual(sorted(os.listdir(folder)), ["driver.lock", "jobs.json", "logs", "sweep.json", "task.sh"])
        with open(os.path.join(folder, "jobs.json")) as f:
            self.assertEqual([j["indices"] for j in json.load(f)], [[0, 1, 2, 3]])  # one array

    def test_a_killed_task_is_submitted_again_and_one_that_always_dies_is_recorded(self):
        marks = self.path("marks")
        os.mkdir(marks)

        def train(model, opt, hp, steps):  # a closure: shipped by value (cloudpickle)
            key = str(hp["width"])
            with open(os.path.join(marks, key), "a") as f:  # one line per attempt
                f.write(f"{os.getpid()}\n")
            with open(os.path.join(marks, key)) as f:
                attempt = len(f.read().split())
            if (key == "16" and attempt == 1) or key == "32":
                os.kill(os.getpid(), signal.SIGKILL)  # this task's Python dies mid-point
            return train1(model, opt, hp, steps)

        local = self.local("local", WIDTHS)
        os.mkdir(self.path("slurm"))
        db = self.path("slurm/w.db")
        r = scaleinv.sweep(t.make_model, train, WIDTHS, db=db, progress=False, executor="slurm", executor_options=FAST)
        self.assertEqual((r["points"], r["run"], r["failed"], r["diverged"]), (2, 2, 1, 1))

        def attempts(key):
            with open(os.path.join(marks, key)) as f:
                return len(f.read().split())

        self.assertEqual((attempts("16"), attempts("32")), (2, 2))
        q = "SELECT id, final_loss, curve FROM points WHERE width = 16"
        self.assertEqual(rows(db, q), rows(local, q))  # killed once, trained again, stored
        failed = rows(db, "SELECT p.width, p.lr_log2, p.diverged, p.final_loss, f.message FROM failures f "
                          "JOIN points p ON p.id = f.id")
        self.assertEqual(len(failed), 1)
        self.assertEqual(failed[0][:4], (32, -6.0, 1, None))
        self.assertRegex(failed[0][4], r"^its Slurm task ended without a result 2 times \(job \d+_\d+, last seen "
                                       r"RUNNING\): scaleinv: task ended \(its Python was killed by signal 9\)$")
        with open(self.path("slurm/w.pyslurm/jobs.json")) as f:
            jobs = json.load(f)
        self.assertEqual((jobs[0]["indices"], jobs[0]["attempt"]), ([0, 1], 1))
        self.assertEqual(sorted(i for j in jobs[1:] for i in j["indices"]), [0, 1])  # each sent again once
        self.assertEqual({j["attempt"] for j in jobs[1:]}, {2})

    def test_a_halving_search_ranks_as_the_local_one(self):
        local = scaleinv.search(t.make_model, train1, SEARCH, db=self.path("local.db"), progress=False)
        remote = scaleinv.search(t.make_model, train1, SEARCH, db=self.path("slurm.db"), progress=False,
                                 executor="slurm", executor_options=FAST)
        self.assertEqual(remote.ranking, local.ranking)
        self.assertEqual([x["rung"] for x in remote.ranking], [1, 0])
        self.assertEqual(remote.best(), local.best())
        q = "SELECT id, steps_done, final_loss FROM points ORDER BY id"
        self.assertEqual(rows(self.path("slurm.db"), q), rows(self.path("local.db"), q))

    def test_a_killed_driver_resumes_without_training_a_point_twice(self):
        os.mkdir(self.path("k"))
        db, log = self.path("k/w.db"), self.path("trained.txt")
        script = textwrap.dedent("""
            import sys
            sys.path.insert(0, __HERE__)
            import scaleinv, test_sweep as t
            def train(model, opt, hp, steps):   # __main__'s: shipped by value
                import torch
                torch.set_num_threads(1)
                losses = t.train(model, opt, hp, steps)
                with open(__LOG__, "a") as f:
                    f.write("%s,%s\\n" % (hp["width"], hp["lr"]))
                return losses
            scaleinv.sweep(t.make_model, train, __SPACE__, db=__DB__, progress=False, executor="slurm",
                           executor_options={"poll_s": 0.2})
        """)
        for k, v in {"__HERE__": HERE, "__LOG__": log, "__DB__": db, "__SPACE__": LRS}.items():
            script = script.replace(k, repr(v))
        driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
        t0 = time.monotonic()
        stored = 0
        while stored < 1 and driver.poll() is None and time.monotonic() - t0 < 60:
            time.sleep(0.05)
            if os.path.exists(db):
                try:
                    stored = rows(db, "SELECT COUNT(*) FROM points")[0][0]
                except sqlite3.OperationalError:  # the store's tables not made yet
                    pass
        driver.kill()  # SIGKILL: the driver dies mid-sweep, its array goes on
        out = driver.communicate()[0]
        self.assertEqual(driver.returncode, -signal.SIGKILL, out[-2000:])
        before = len(rows(db, "SELECT id FROM points"))
        self.assertGreaterEqual(before, 1)
        self.assertLess(before, 3)

        def train(model, opt, hp, steps):  # would say so, were a point trained again
            losses = train1(model, opt, hp, steps)
            with open(log, "a") as f:
                f.write("%s,%s\n" % (hp["width"], hp["lr"]))
            return losses

        r = scaleinv.sweep(t.make_model, train, LRS, db=db, resume=True, progress=False, executor="slurm",
                           executor_options=FAST)
        self.assertEqual((r["skipped"], r["run"], r["failed"]), (before, 3 - before, 0))
        with open(log) as f:
            trained = f.read().split()
        self.assertEqual(sorted(trained), sorted(f"16,{2.0 ** e}" for e in (-8, -6, -4)))  # each point once
        with open(self.path("k/w.pyslurm/jobs.json")) as f:
            self.assertEqual(len(json.load(f)), 1)  # the first driver's array, waited for
        self.assertEqual(rows(db, POINTS), rows(self.local("local", LRS), POINTS))

    def test_ctrl_c_cancels_the_array(self):
        os.mkdir(self.path("c"))
        jobs_json, sleep = self.path("c/w.pyslurm/jobs.json"), time.sleep

        def interrupted(s):  # Ctrl-C while the driver waits for its array
            with open(jobs_json) if os.path.exists(jobs_json) else open(os.devnull) as f:
                if f.read().strip() not in ("", "[]"):
                    raise KeyboardInterrupt
            sleep(s)

        with mock.patch("time.sleep", interrupted), self.assertRaises(KeyboardInterrupt):
            scaleinv.sweep(t.make_model, train1, GRID, db=self.path("c/w.db"), progress=False, executor="slurm",
                           executor_options=FAST)
        with open(jobs_json) as f:
            job = json.load(f)[0]["job"]
        t0 = time.monotonic()
        while self.slurm.run(["squeue", "-h", "-j", job]).stdout.strip() and time.monotonic() - t0 < 10:
            time.sleep(0.1)
        self.assertEqual(self.slurm.run(["squeue", "-h", "-j", job]).stdout.strip(), "")  # scancelled
        self.assertEqual(rows(self.path("c/w.db"), "SELECT COUNT(*) FROM points"), [(0,)])

    def refused(self, pattern, db=None, **opts):
        db = db or self.path("r/w.db")
        os.makedirs(os.path.dirname(db), exist_ok=True)
        before = sorted(os.listdir(os.path.dirname(db)))
        with self.assertRaisesRegex(scaleinv.UserError, pattern) as cm:
            scaleinv.sweep(t.make_model, train1, GRID, db=db, progress=False, executor="slurm",
                           executor_options=dict(FAST, **opts))
        self.assertNotIn("\n", str(cm.exception))
        self.assertEqual(sorted(os.listdir(os.path.dirname(db))), before)  # nothing left behind
        return str(cm.exception)

    def test_refusals_under_the_cluster(self):
        self.refused(r"^scaleinv.sweep: field 'executor_options.partition': the cluster has no partition \"gpu\" "
                     r"\(fix: give one of: debug \(sinfo lists them\)\)$", partition="gpu")
        self.refused(r"field 'executor_options.partition': the cluster has no partition \"gpu\"",
                     sbatch_args=["-p", "gpu"])
        self.refused(r"field 'executor': sbatch refused the job: sbatch: unrecognized option '--no-such-option' "
                     r"\(fix: fix executor_options' sbatch_args, partition or cpus_per_task", sbatch_args=["--no-such-option"])
        fake = self.path("python")  # a Python there without scaleinv, as the probe sees it
        with open(fake, "w") as f:
            f.write("#!/bin/sh\necho 'ModuleNotFoundError: no scaleinv here' >&2\nexit 1\n")
        os.chmod(fake, 0o755)
        self.refused(r"executor_options: python: .*/python does not import scaleinv and cloudpickle on the nodes "
                     r"\(probe job \d+: ModuleNotFoundError: no scaleinv here\) \(fix: give python an interpreter",
                     python=fake)
        # Two drivers on one store: the second is refused before it sends anything.
        folder = self.path("r/w.pyslurm")
        os.makedirs(folder)
        with open(os.path.join(folder, "driver.lock"), "w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            held.write("pid 4242 on node7\n")
            held.flush()
            self.refused(r"executor_options: folder: another driver \(pid 4242 on node7\) is running executor='slurm' "
                         r"on .*w.pyslurm, the Slurm folder of this store \(fix: wait for it")

    def test_a_folder_the_nodes_cannot_see_is_refused_by_the_probe(self):
        hidden = self.path("hidden")
        os.mkdir(hidden)
        try:
            other = SlurmCluster(hide=hidden).start()  # its node sees an empty folder there
        except SlurmUnavailable as e:
            self.skipTest(f"no cluster hiding a folder: {e}")
        try:
            with mock.patch.dict(os.environ, other.env, clear=True):
                self.refused(r"executor_options: folder: the compute nodes cannot see .*hidden/w.pyslurm \(probe job \d+ "
                             r"could not read a file written there\) \(fix: give folder a path on a filesystem the nodes "
                             r"share", db=os.path.join(hidden, "w.db"))
        finally:
            other.stop()


if __name__ == "__main__":
    unittest.main()

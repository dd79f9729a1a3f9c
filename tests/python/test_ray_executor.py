"""scaleinv.sweep / scaleinv.search with executor="ray" (issue 61) on a real Ray cluster: a head
started here on loopback (`ray start --head --block --num-cpus=2 --include-dashboard=false` in a
temporary folder, about 3 s; once for the file, in setUpClass, and stopped by its pid in
tearDownClass: a head of its own rather than ray.init's local instance because the killed-driver
test needs a cluster that outlives a driver, and once rather than per test because each start and
each new driver's workers cost seconds), and the tiny MLP of test_sweep.py. Checked: the same
point ids and bit-identical losses as executor=None (one torch thread in either); a worker killed
mid-point retried once and stored; one that always dies recorded as failed with the reason while
the sweep completes; a halving search ranked as the local one; a driver killed mid-sweep resumed
without redoing what it stored; the refusals (unknown executor, unknown option, Ray missing, no
cluster at the address) as one line, quickly; and the binding's executor protocol without Ray.

Ray is installed in the newest leg only (scripts/python_venv.sh): where it is missing (the oldest
leg), or where its head does not start, the cluster's tests skip saying why."""
import os
import shutil
import signal
import socket
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
import test_sweep as t  # the tiny MLP, its train and GRID

try:
    import ray
except ModuleNotFoundError:
    ray = None

HERE = os.path.dirname(os.path.abspath(__file__))
SEARCH = {"fixed": {"param": "mup", "steps": 18, "width": 16},
          "search": {"method": "halving", "trials": 9, "eta": 3, "min_steps": 2,
                     "space": {"lr_log2": {"from": -10, "to": -3}}}}


def train1(model, opt, hp, steps):
    """test_sweep's train on one torch thread, here and in a Ray worker (bit-identical losses)."""
    torch.set_num_threads(1)
    return t.train(model, opt, hp, steps)


def rows(db, sql):
    with sqlite3.connect(db) as c:
        return c.execute(sql).fetchall()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BatchExecutorBinding(unittest.TestCase):
    """_scaleinv.UserSweep.run with an executor object (python/module.cpp): a rung's points at once,
    recorded in any order, on the calling thread only, and not after the rung; no Ray needed."""

    SPACE = {"sweep": {"name": "b"}, "fixed": {"param": "mup", "steps": 4, "width": 16},
             "grid": {"lr_log2": [-8, -6, -4], "seed": [0, 1]}}

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def run_sweep(self, executor, name):
        import _scaleinv
        db = os.path.join(self.tmp.name, name)
        return db, _scaleinv.UserSweep.from_dict(self.SPACE).run(db, "0/1", False, False, None, executor)

    @staticmethod
    def result(hp):
        return {"losses": [1 + hp["lr"] * (hp["seed"] + 1)] * hp["steps"], "steps": hp["steps"]}

    def test_any_order_and_the_same_rows_as_point_by_point(self):
        import _scaleinv
        seen = []

        class Reversed:
            concurrent = True

            def run(_, batch, started, record):
                seen.append(len(batch))
                for index, _id, _hp in batch:
                    started(index)
                for index, _id, hp in reversed(batch):
                    record(index, self.result(hp))

        db, out = self.run_sweep(Reversed(), "b.db")
        self.assertEqual((out["run"], seen), (6, [6]))
        seq = os.path.join(self.tmp.name, "seq", "b.db")
        os.mkdir(os.path.dirname(seq))
        _scaleinv.UserSweep.from_dict(self.SPACE).run(seq, "0/1", False, False, lambda pid, hp: self.result(hp))
        q = "SELECT id, final_loss, curve FROM points ORDER BY id"
        self.assertEqual(rows(db, q), rows(seq, q))

    def test_a_bad_report_is_refused_and_what_run_raises_reaches_the_caller(self):
        import threading
        kept = []

        class Threaded:
            def run(_, batch, started, record):
                errors = []

                def other():
                    try:
                        record(batch[0][0], self.result(batch[0][2]))
                    except RuntimeError as e:
                        errors.append(str(e))
                th = threading.Thread(target=other)
                th.start()
                th.join()
                kept.append(record)
                raise KeyError(errors[0])

        with self.assertRaisesRegex(KeyError, "from another thread"):
            self.run_sweep(Threaded(), "t.db")
        with self.assertRaisesRegex(RuntimeError, "record after its rung ended"):
            kept[0](0, self.result({"lr": 1, "seed": 0, "steps": 4}))

        class Short:
            def run(_, batch, started, record):
                record(batch[2][0], self.result(batch[2][2]))

        with self.assertRaisesRegex(RuntimeError, "returned with 5 of 6 points not recorded"):
            self.run_sweep(Short(), "s.db")
        self.assertEqual(rows(os.path.join(self.tmp.name, "s.db"), "SELECT COUNT(*) FROM points"), [(1,)])


class RayRefusals(unittest.TestCase):
    """One line each, before any store is written; these need no cluster (nor Ray, for the first)."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.db = os.path.join(self.tmp.name, "r.db")

    def tearDown(self):
        self.tmp.cleanup()

    def refused(self, pattern, **kw):
        with self.assertRaisesRegex(scaleinv.UserError, pattern) as cm:
            scaleinv.sweep(t.make_model, train1, t.GRID, db=self.db, progress=False, **kw)
        self.assertNotIn("\n", str(cm.exception))
        self.assertFalse(os.path.exists(self.db))
        return str(cm.exception)

    def test_ray_missing_names_pip_install_ray(self):
        with mock.patch.dict(sys.modules, {"ray": None}):  # as in a Python without Ray (the oldest leg's)
            self.assertIn("(fix: pip install ray)", self.refused("executor", executor="ray"))

    def test_unknown_executor_and_options(self):
        self.refused(r"executor: 'dask' is not an executor \(fix: executor=None or 'local'", executor="dask")
        self.refused(r"executor_options: key 'address' is for executor='ray'", executor_options={"address": "auto"})
        if ray is None:
            self.skipTest("Ray is not installed here (the oldest leg: scripts/python_venv.sh installs Ray in the newest only)")
        self.refused(r"executor_options: unknown key 'adress' \(fix: use address, connect_timeout_s, max_in_flight, "
                     "num_cpus, num_gpus, runtime_env", executor="ray", executor_options={"adress": "auto"})
        self.refused(r"num_cpus: 0 is not a number > 0", executor="ray", executor_options={"num_cpus": 0})
        self.refused(r"max_in_flight: 1.5 is not an integer", executor="ray", executor_options={"max_in_flight": 1.5})

    def test_no_cluster_at_the_address_is_refused_quickly(self):
        if ray is None:
            self.skipTest("Ray is not installed here (the oldest leg: scripts/python_venv.sh installs Ray in the newest only)")
        # In a Python of its own: Ray is not initialized there (in this one a cluster may be).
        script = textwrap.dedent("""
            import sys
            sys.path.insert(0, __HERE__)
            import test_ray_executor as r, test_sweep as t, scaleinv
            try:
                scaleinv.sweep(t.make_model, r.train1, t.GRID, db=__DB__, progress=False, executor="ray",
                               executor_options={"address": __ADDR__})
            except scaleinv.UserError as e:
                print(e)
        """).replace("__HERE__", repr(HERE)).replace("__DB__", repr(self.db)).replace("__ADDR__", repr(f"127.0.0.1:{free_port()}"))
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"address: '127.0.0.1:\d+': no Ray cluster answers there .*\(fix: start one \(ray start "
                                   r"--head\)")
        self.assertEqual(p.stdout.count("\n"), 1, p.stdout)
        self.assertLess(took, 20)  # python, torch and ray imported; a closed port is refused at once
        self.assertFalse(os.path.exists(self.db))


class RayExecutor(unittest.TestCase):
    head = None

    @classmethod
    def setUpClass(cls):
        if ray is None:
            raise unittest.SkipTest("Ray is not installed in this venv (scripts/python_venv.sh installs it in the newest "
                                    "leg only; the oldest is Debian's python3-torch, and Debian has no Ray)")
        ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
        if not os.access(ray_bin, os.X_OK):
            raise unittest.SkipTest(f"Ray's command is not beside this Python ({ray_bin}): no head can be started")
        # A short folder: Ray's Unix sockets live under it (107 characters at most).
        cls.ray_tmp = tempfile.mkdtemp(prefix="sir", dir="/tmp")
        cls.port = free_port()
        cls.address = f"127.0.0.1:{cls.port}"
        cls.log = open(os.path.join(cls.ray_tmp, "head.log"), "w")
        t0 = time.monotonic()
        cls.head = subprocess.Popen(
            [ray_bin, "start", "--head", "--block", f"--port={cls.port}", "--num-cpus=2", "--include-dashboard=false",
             "--node-ip-address=127.0.0.1", f"--temp-dir={cls.ray_tmp}", "--object-store-memory=200000000",
             "--disable-usage-stats"],
            stdout=cls.log, stderr=subprocess.STDOUT, start_new_session=True,
            # The workers import this file and test_sweep.py by name (the functions are theirs): Ray
            # puts only the driver script's folder and working directory on their sys.path.
            env=dict(os.environ, PYTHONPATH=HERE))
        try:
            while True:
                if cls.head.poll() is not None:
                    raise unittest.SkipTest(f"Ray's head did not start (exit {cls.head.returncode}): {cls.log_tail()}")
                try:
                    socket.create_connection(("127.0.0.1", cls.port), timeout=0.2).close()
                    break
                except OSError:
                    if time.monotonic() - t0 > 60:
                        raise unittest.SkipTest(f"Ray's head did not listen within 60 s: {cls.log_tail()}") from None
                    time.sleep(0.1)
            ray.init(address=cls.address, logging_level="warning")
        except BaseException:
            cls.stop_head()
            raise
        cls.opts = {"address": cls.address}
        cls.head_start_s = time.monotonic() - t0

    @classmethod
    def log_tail(cls):
        cls.log.flush()
        with open(cls.log.name) as f:
            return " | ".join(f.read().strip().splitlines()[-3:])

    @classmethod
    def stop_head(cls):
        if ray is not None and ray.is_initialized():
            ray.shutdown()
        if cls.head is not None and cls.head.poll() is None:
            cls.head.terminate()  # `ray start --block` stops its processes on SIGTERM (about 2 s)
            try:
                cls.head.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(cls.head.pid, signal.SIGKILL)  # its own session: only what it started
                cls.head.wait()
        cls.log.close()
        shutil.rmtree(cls.ray_tmp, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        cls.stop_head()

    def setUp(self):
        torch.set_num_threads(1)
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def test_the_same_ids_and_losses_as_the_local_executor(self):
        os.mkdir(self.path("local"))
        os.mkdir(self.path("ray"))
        local_db, ray_db = self.path("local/w.db"), self.path("ray/w.db")  # one stem: one sweep name
        local = scaleinv.sweep(t.make_model, train1, t.GRID, db=local_db, progress=False)
        remote = scaleinv.sweep(t.make_model, train1, t.GRID, db=ray_db, progress=False, executor="ray",
                                executor_options=dict(self.opts, num_cpus=1))
        for k in ("points", "run", "skipped", "diverged", "failed"):
            self.assertEqual(remote[k], local[k], k)
        q = ("SELECT id, sweep, param, width, lr_log2, seed, final_loss, min_loss, curve, diverged, steps_done, axes, config "
             "FROM points ORDER BY id")
        self.assertEqual(rows(ray_db, q), rows(local_db, q))  # floats compared exactly
        fp = "SELECT key, value FROM meta WHERE key IN ('fingerprint', 'sweep_toml', 'grid', 'points_written') ORDER BY key"
        self.assertEqual(rows(ray_db, fp), rows(local_db, fp))
        self.assertIn("12 in 12 ensemble chunks, 2 at a time", str(remote))  # the head's 2 CPUs
        self.assertGreater(remote["train_s"], 0)

    def test_more_than_the_cluster_has_is_refused(self):
        db = self.path("g.db")
        for opts, line in ((dict(self.opts, num_gpus=1), r"num_gpus: each point asks for 1 GPU, the cluster has 0 "),
                           (dict(self.opts, num_cpus=3), r"num_cpus: each point asks for 3 CPU, the cluster has 2 ")):
            with self.assertRaisesRegex(scaleinv.UserError, line + r"\(fix: a smaller"):
                scaleinv.sweep(t.make_model, train1, t.GRID, db=db, progress=False, executor="ray", executor_options=opts)
            self.assertFalse(os.path.exists(db))

    def test_a_killed_worker_is_retried_once_and_one_that_always_dies_is_recorded(self):
        marks = self.path("marks")
        os.mkdir(marks)

        def train(model, opt, hp, steps):  # a closure: shipped by value (cloudpickle)
            key = f"{hp['width']}_{hp['lr']}_{hp['seed']}"
            with open(os.path.join(marks, key), "a") as f:  # one line per attempt
                f.write(f"{os.getpid()}\n")
            with open(os.path.join(marks, key)) as f:
                attempt = len(f.read().split())
            if (key == f"16_{2.0 ** -6}_0" and attempt == 1) or key == f"32_{2.0 ** -4}_1":
                os.kill(os.getpid(), signal.SIGKILL)  # this worker dies mid-point
            return train1(model, opt, hp, steps)

        local = self.path("local.db")
        scaleinv.sweep(t.make_model, train1, t.GRID, db=local, progress=False)
        db = self.path("ray.db")
        r = scaleinv.sweep(t.make_model, train, t.GRID, db=db, progress=False, executor="ray", executor_options=self.opts)
        self.assertEqual((r["points"], r["run"], r["failed"], r["diverged"]), (12, 12, 1, 1))

        def attempts(key):
            with open(os.path.join(marks, key)) as f:
                return len(f.read().split())

        self.assertEqual(attempts(f"16_{2.0 ** -6}_0"), 2)  # killed, retried, stored
        self.assertEqual(attempts(f"32_{2.0 ** -4}_1"), 2)  # killed twice: recorded as failed
        q = "SELECT id, final_loss, curve FROM points WHERE width = 16 AND lr_log2 = -6 AND seed = 0"
        self.assertEqual(rows(db, q), rows(local, q))
        self.assertIsNotNone(rows(db, q)[0][1])
        failed = rows(db, "SELECT p.width, p.lr_log2, p.seed, p.diverged, p.final_loss, f.message FROM failures f "
                          "JOIN points p ON p.id = f.id")
        self.assertEqual(len(failed), 1)
        self.assertEqual(failed[0][:5], (32, -4.0, 1, 1, None))
        self.assertRegex(failed[0][5], r"^the worker training this point died \(Ray retries a task once\): \w+Error: ")
        self.assertNotIn("\n", failed[0][5])
        # The other eleven are the local executor's losses.
        q = "SELECT id, final_loss FROM points WHERE NOT (width = 32 AND lr_log2 = -4 AND seed = 1) ORDER BY id"
        self.assertEqual(rows(db, q), rows(local, q))

    def test_a_halving_search_ranks_as_the_local_one(self):
        local = scaleinv.search(t.make_model, train1, SEARCH, db=self.path("local.db"), progress=False)
        remote = scaleinv.search(t.make_model, train1, SEARCH, db=self.path("ray.db"), progress=False, executor="ray",
                                 executor_options=self.opts)
        self.assertEqual(remote.ranking, local.ranking)
        self.assertEqual([x["rung"] for x in remote.ranking], [2, 1, 1, 0, 0, 0, 0, 0, 0])
        self.assertEqual(remote.best(), local.best())
        q = "SELECT id, steps_done, final_loss FROM points ORDER BY id"
        self.assertEqual(rows(self.path("ray.db"), q), rows(self.path("local.db"), q))

    def test_a_killed_driver_resumes_without_redoing_what_it_stored(self):
        db, log = self.path("k.db"), self.path("trained-before.txt")
        script = textwrap.dedent("""
            import sys, time
            sys.path.insert(0, __HERE__)
            import scaleinv, test_sweep as t
            def train(model, opt, hp, steps):   # __main__'s: shipped by value
                import torch
                torch.set_num_threads(1)
                time.sleep(0.4)
                losses = t.train(model, opt, hp, steps)
                with open(__LOG__, "a") as f:
                    f.write("%s,%s,%s\\n" % (hp["width"], hp["lr"], hp["seed"]))
                return losses
            scaleinv.sweep(t.make_model, train, t.GRID, db=__DB__, progress=False, executor="ray", executor_options=__OPTS__)
        """)
        for k, v in {"__HERE__": HERE, "__LOG__": log, "__DB__": db, "__OPTS__": self.opts}.items():
            script = script.replace(k, repr(v))
        driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        t0 = time.monotonic()
        stored = 0
        while stored < 4 and driver.poll() is None and time.monotonic() - t0 < 60:
            time.sleep(0.05)
            if os.path.exists(db):
                try:
                    stored = rows(db, "SELECT COUNT(*) FROM points")[0][0]
                except sqlite3.OperationalError:  # the store's tables not made yet
                    pass
        driver.kill()  # SIGKILL: the driver dies mid-sweep
        out = driver.communicate()[0]
        self.assertEqual(driver.returncode, -signal.SIGKILL, out[-2000:])
        before = {(w, lr, s) for w, lr, s in rows(db, "SELECT width, lr, seed FROM points")}
        self.assertGreaterEqual(len(before), 4)
        self.assertLess(len(before), 12)
        trained = self.path("trained-after.txt")

        def train(model, opt, hp, steps):
            losses = train1(model, opt, hp, steps)
            with open(trained, "a") as f:
                f.write("%s,%s,%s\n" % (hp["width"], hp["lr"], hp["seed"]))
            return losses

        r = scaleinv.sweep(t.make_model, train, t.GRID, db=db, resume=True, progress=False, executor="ray",
                           executor_options=self.opts)
        self.assertEqual((r["skipped"], r["run"]), (len(before), 12 - len(before)))
        with open(trained) as f:
            after = [tuple(float(x) for x in ln.split(",")) for ln in f.read().split()]
        self.assertEqual(len(after), 12 - len(before))
        self.assertFalse({(float(w), lr, float(s)) for w, lr, s in before} & set(after))  # nothing stored is redone
        self.assertEqual(rows(db, "SELECT COUNT(*) FROM points"), [(12,)])
        q = "SELECT id, final_loss FROM points ORDER BY id"
        scaleinv.sweep(t.make_model, train1, t.GRID, db=self.path("local.db"), progress=False)
        self.assertEqual(rows(db, q), rows(self.path("local.db"), q))


if __name__ == "__main__":
    unittest.main()

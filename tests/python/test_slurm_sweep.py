"""`scaleinv sweep submit --slurm` under a real Slurm cluster started on loopback
(tests/python/slurm_cluster.py, scripts/slurm_local.sh): a width sweep as a job array with one task
cancelled and one requeued mid-run, a halving search driven rung by rung by a driver job with one
rung task cancelled, a cancelled array, `sweep status`, and the refusals (issue 61). Each result is
compared with the same file run on one machine by `scaleinv sweep`: the same point ids and the same
losses, bit for bit (every run on one thread: `--threads 1` here, SLURM_CPUS_PER_TASK=1 there).
Skipped, with the reason, when no cluster can start."""
import json
import os
import sqlite3
import subprocess
import tempfile
import time
import unittest

from slurm_cluster import start_or_skip

BIN = os.environ.get("SCALEINV_BIN", "scaleinv")
SRC = os.environ.get("SCALEINV_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))

# 2 params x 2 widths x 3 LRs x 2 seeds = 24 points of about 0.3 s each; ensemble 3 makes 8
# chunks, dealt to 4 tasks (6 points, about 2 s, each).
GRID = """base = "{base}"
[sweep]
name = "{name}"
ensemble = 3
window = 0.2
[model]
depth = 2
seq_len = 16
[data]
vocab = 32
markov_length = 20000
[train]
steps = 500
batch_size = 32
eval_every = 0
[grid]
param = ["standard", "mup"]
"model.width" = [32, 64]
lr_log2 = [-8, -6, -4]
seed = [0, 1]
"""

# tests/test_search.cpp's halving search: 6 trials x 2 seeds, rungs of 10, 20 and 40 steps.
SEARCH = """[sweep]
name = "{name}"
ensemble = 2
[model]
kind = "bigram"
width = 32
depth = 2
[data]
source = "markov"
vocab = 16
markov_length = 20000
[train]
steps = {steps}
batch_size = 16
eval_every = 0
[grid]
seed = [0, 1]
[search]
method = "halving"
trials = 6
seed = 7
eta = 2
min_steps = {min_steps}
[search.space]
lr_log2 = {{from = -10, to = -3}}
"hp.output_mult" = {{from = 0.25, to = 4.0, log = true}}
"optim.warmup_steps" = [0, 5]
"""


def read(path):
    with open(path) as f:
        return f.read()


def losses(db):
    with sqlite3.connect(db) as c:
        return dict(c.execute("SELECT id, final_loss FROM points").fetchall())


class SlurmSweepTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.slurm = start_or_skip(cls)
        cls.tmp = tempfile.mkdtemp(prefix="slurm-sweep-")

    def sweep_file(self, name, text=GRID, **kw):
        path = os.path.join(self.tmp, name + ".toml")
        with open(path, "w") as f:
            f.write(text.format(name=name, base=os.path.join(SRC, "examples", "bigram_markov.toml"), **kw))
        return path

    def submission(self, name):
        with open(os.path.join(self.tmp, name + ".slurm", "submission.json")) as f:
            return json.load(f)

    def trained(self, name):
        """Points trained by every task of a submission: the "run now" lines of their logs."""
        logs = os.path.join(self.tmp, name + ".slurm", "logs")
        return sum(int(line.split()[2]) for f in os.listdir(logs) if "collect" not in f and "driver" not in f
                   for line in read(os.path.join(logs, f)).splitlines() if line.strip().startswith("run now"))

    def cli(self, *args, timeout=180):
        return self.slurm.run([BIN] + list(args), timeout=timeout)

    def one_machine(self, config, name):
        db = os.path.join(self.tmp, name + "-local.db")
        r = self.cli("--threads", "1", "sweep", "--config", config, "--out", db, "--quiet")
        self.assertEqual(r.returncode, 0, r.stderr)
        return db

    def task_state(self, job, index):
        for rec in self.slurm.jobs(job):
            if rec.get("ArrayTaskId") == str(index):
                return rec.get("JobState")
        return None

    def wait_until_running_with_points(self, job, index, store, timeout=60):
        """Waits until array task `index` runs and its store holds a finished point: then it is mid-run."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.task_state(job, index) == "RUNNING" and os.path.exists(store):
                try:
                    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as c:
                        if c.execute("SELECT count(*) FROM points").fetchone()[0] > 0:
                            return
                except sqlite3.Error:
                    pass
            time.sleep(0.05)
        self.fail(f"task {job}_{index} never ran with a stored point: {self.slurm.jobs(job)}")

    def wait_for_jobs(self, db, timeout=240):
        """Waits until no job of the submission beside `db` is live (a collect job may add some)."""
        sub = os.path.join(os.path.splitext(db)[0] + ".slurm", "submission.json")
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with open(sub) as f:
                jobs = json.load(f)["jobs"]
            live = [j["id"] for j in jobs if any(r.get("JobState") not in (
                "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL") for r in self.slurm.jobs(j["id"]))]
            with open(sub) as f:
                again = len(json.load(f)["jobs"])
            if not live and again == len(jobs):
                return jobs
            time.sleep(0.2)
        self.fail(f"jobs of {sub} still live after {timeout} s")

    def test_width_sweep_with_a_cancelled_and_a_requeued_task_equals_one_machine(self):
        config = self.sweep_file("width")
        db = os.path.join(self.tmp, "width.db")
        r = self.cli("sweep", "submit", "--config", config, "--slurm", "--out", db, "--array-size", "4",
                     "--quiet")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("array job", r.stdout)
        array = self.submission("width")["jobs"][0]["id"]
        shard = lambda i: os.path.join(self.tmp, "width.slurm", "shards", f"width.shard-{i}-of-4.db")
        # Task 0 cancelled mid-run (the collect job submits it again), task 1 requeued mid-run (Slurm
        # runs it again): each resumes its own store.
        self.wait_until_running_with_points(array, 0, shard(0))
        self.assertEqual(self.slurm.run(["scancel", f"{array}_0"]).returncode, 0)
        self.wait_until_running_with_points(array, 1, shard(1))
        r = self.slurm.run(["scontrol", "requeue", f"{array}_1"])
        self.assertEqual(r.returncode, 0, r.stderr)
        # Slurm holds a requeued job for 120 s (its BeginTime); a test need not wait that long. The
        # requeue takes effect a moment later: release the hold once the task is pending on it.
        end = time.monotonic() + 20
        while time.monotonic() < end:
            rec = [r for r in self.slurm.jobs(array) if r.get("ArrayTaskId") == "1"]
            if rec and rec[0].get("JobState") == "PENDING" and rec[0].get("Reason") == "BeginTime":
                self.slurm.run(["scontrol", "update", f"jobid={array}_1", "StartTime=now"])
            elif rec and rec[0].get("JobState") in ("RUNNING", "COMPLETED"):
                break
            time.sleep(0.1)
        jobs = self.wait_for_jobs(db)
        self.assertEqual([j["role"] for j in jobs], ["array", "collect", "array", "collect"], jobs)
        self.assertEqual(jobs[2]["tasks"], "0")  # only the cancelled shard was submitted again

        local = losses(self.one_machine(config, "width"))
        merged = losses(db)
        self.assertEqual(set(merged), set(local))
        self.assertEqual(merged, local)  # bit for bit: same seeds, one thread each
        # Nothing was trained twice: the resumed tasks skipped what their stores held.
        logs = os.path.join(self.tmp, "width.slurm", "logs")
        resumed = [read(os.path.join(logs, f)) for f in sorted(os.listdir(logs))
                   if f.endswith(("_0.out", "_1.out"))]
        skipped = [int(line.split()[1]) for text in resumed for line in text.splitlines()
                   if line.strip().startswith("skipped")]
        self.assertTrue(any(n > 0 for n in skipped), resumed)
        self.assertEqual(self.trained("width"), 24)  # each point trained once, over every attempt

        status = self.cli("sweep", "status", "--db", db)
        self.assertEqual(status.returncode, 0, status.stderr)
        self.assertIn("points done      24 of 24", status.stdout)
        self.assertNotIn("missing", status.stdout)

    def test_halving_search_by_a_driver_job_ranks_as_one_machine(self):
        config = self.sweep_file("halving", SEARCH, steps=200, min_steps=50)
        db = os.path.join(self.tmp, "halving.db")
        r = self.cli("sweep", "submit", "--config", config, "--slurm", "--out", db, "--array-size", "3",
                     "--poll", "0.2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("driver job", r.stdout)
        # A second driver on the same store is refused while the first runs.
        again = self.cli("sweep", "submit", "--config", config, "--slurm", "--out", db, "--no-probe")
        self.assertEqual(again.returncode, 2, again.stdout + again.stderr)
        self.assertIn("still running", again.stderr)
        # Cancel one task of the first rung mid-run: the driver submits that shard again.
        end = time.monotonic() + 60
        while time.monotonic() < end:
            rungs = [j for j in self.submission("halving")["jobs"] if j["role"] == "rung"]
            if rungs:
                break
            time.sleep(0.1)
        self.assertTrue(rungs, "the driver submitted no rung")
        first = rungs[0]["id"]
        self.wait_until_running_with_points(first, 0, os.path.join(
            self.tmp, "halving.slurm", "shards", "halving.rung-0.shard-0-of-3.db"))
        self.slurm.run(["scancel", f"{first}_0"])
        jobs = self.wait_for_jobs(db)
        rung0 = [j for j in jobs if j["role"] == "rung" and j["rung"] == 0]
        self.assertEqual([j["attempt"] for j in rung0], [1, 2], jobs)
        driver_log = [f for f in os.listdir(os.path.join(self.tmp, "halving.slurm", "logs")) if "driver" in f]
        text = read(os.path.join(self.tmp, "halving.slurm", "logs", driver_log[0]))
        self.assertIn("search summary", text)

        local_db = self.one_machine(config, "halving")
        self.assertEqual(losses(db), losses(local_db))
        ours = json.loads(read(os.path.join(self.tmp, "halving-search.json")))
        theirs = json.loads(read(os.path.join(self.tmp, "halving-local-search.json")))
        rank = lambda j: [(t["trial"], t["rung"], t["mean_loss"]) for g in j["groups"].values() for t in g["ranking"]]
        self.assertEqual(rank(ours), rank(theirs))
        self.assertEqual([g["best"] for g in ours["groups"].values()], [g["best"] for g in theirs["groups"].values()])

    def test_a_killed_driver_goes_on_without_training_a_point_twice(self):
        config = self.sweep_file("driven", SEARCH, steps=200, min_steps=50)
        db = os.path.join(self.tmp, "driven.db")
        driver = subprocess.Popen([BIN, "sweep", "submit", "--config", config, "--slurm", "--out", db, "--foreground",
                                   "--array-size", "3", "--poll", "0.2", "--quiet", "--no-probe"],
                                  env=self.slurm.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            end = time.monotonic() + 60
            rungs = []
            while not rungs and time.monotonic() < end:
                time.sleep(0.1)
                if os.path.exists(os.path.join(self.tmp, "driven.slurm", "submission.json")):
                    rungs = [j for j in self.submission("driven")["jobs"] if j["role"] == "rung"]
            self.assertTrue(rungs, "the driver submitted no rung")
            self.wait_until_running_with_points(rungs[0]["id"], 0, os.path.join(
                self.tmp, "driven.slurm", "shards", "driven.rung-0.shard-0-of-3.db"))
        finally:
            driver.kill()  # kill -9 mid-rung: its array goes on without it
            driver.communicate()
        r = self.cli("sweep", "drive", "--submission", os.path.join(self.tmp, "driven.slurm", "submission.json"),
                     "--quiet")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("search summary", r.stdout)
        jobs = self.submission("driven")["jobs"]
        # The new driver waited for the first rung's array instead of sending its shards again.
        self.assertEqual(len([j for j in jobs if j["role"] == "rung" and j["rung"] == 0]), 1, jobs)
        # Every point was trained once: the tasks' "run now" counts add up to the store's points.
        self.assertEqual(self.trained("driven"), len(losses(db)))
        self.assertEqual(losses(db), losses(self.one_machine(config, "driven")))

    def test_a_cancelled_array_leaves_a_valid_store_and_status_names_what_is_missing(self):
        config = self.sweep_file("cancelled")
        db = os.path.join(self.tmp, "cancelled.db")
        r = self.cli("sweep", "submit", "--config", config, "--slurm", "--out", db, "--array-size", "4",
                     "--retries", "0", "--no-probe", "--quiet")
        self.assertEqual(r.returncode, 0, r.stderr)
        array = self.submission("cancelled")["jobs"][0]["id"]
        self.wait_until_running_with_points(array, 0, os.path.join(
            self.tmp, "cancelled.slurm", "shards", "cancelled.shard-0-of-4.db"))
        self.slurm.run(["scancel", array])  # the whole array; the collect job still merges
        self.wait_for_jobs(db)
        with sqlite3.connect(db) as c:
            self.assertEqual(c.execute("PRAGMA integrity_check").fetchone()[0], "ok")
            n = c.execute("SELECT count(*) FROM points").fetchone()[0]
        self.assertGreater(n, 0)
        self.assertLess(n, 24)
        status = self.cli("sweep", "status", "--db", db)
        self.assertEqual(status.returncode, 0, status.stderr)
        self.assertIn(f"missing          {24 - n} points", status.stdout)
        self.assertIn("no task runs it", status.stdout)
        # The losses it holds are the one-machine sweep's.
        local = losses(self.one_machine(config, "cancelled"))
        self.assertEqual({k: local[k] for k in losses(db)}, losses(db))

    def test_refusals_are_one_line_with_exit_2(self):
        config = self.sweep_file("refused")
        db = os.path.join(self.tmp, "refused.db")
        cases = {
            "no scheduler": ([], {"SLURM_CONF": os.path.join(self.tmp, "no-such-slurm.conf")},
                             "no scheduler reachable"),
            "partition": (["--partition", "gpu-big"], {}, 'no partition "gpu-big"'),
            "partition after --": (["--", "-p", "gpu-big"], {}, 'no partition "gpu-big"'),
            "no --slurm": (None, {}, "--slurm"),
            "binary the nodes cannot run": (["--binary", os.path.join(self.tmp, "missing", "scaleinv")], {},
                                            "compute nodes cannot see"),
        }
        for what, (extra, env, needle) in cases.items():
            with self.subTest(what):
                args = [BIN, "sweep", "submit", "--config", config, "--out", db, "--quiet"]
                args += ["--slurm"] + extra if extra is not None else []
                r = self.slurm.run(args, env=dict(self.slurm.env, **env), timeout=120)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                lines = r.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertIn(needle, lines[0])
                self.assertIn("fix:", lines[0])
                self.assertFalse(os.path.exists(db))
        # A submission folder holding shards of another sweep (the file changed since): refused
        # before any job, rather than tasks failing on stores they cannot resume.
        other = self.sweep_file("refused-other", GRID.replace("steps = 500", "steps = 3"))
        shards = os.path.join(self.tmp, "refused.slurm", "shards")
        r = self.cli("--threads", "1", "sweep", "--config", other, "--shard", "0/4", "--quiet",
                     "--out", os.path.join(shards, "refused.shard-0-of-4.db"))
        self.assertEqual(r.returncode, 0, r.stderr)
        jobs_before = self.slurm.squeue()
        r = self.cli("sweep", "submit", "--config", config, "--out", db, "--slurm", "--no-probe", "--quiet")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("holds shards of another sweep", r.stderr)
        # No job submitted: no id squeue did not list before. (Not the same listing: a finished job
        # of the tests before leaves squeue MinJobAge = 2 s after it ends, which on a loaded machine
        # fell between the two calls.)
        self.assertEqual(set(self.slurm.squeue()) - set(jobs_before), set())



class HiddenStoreTest(unittest.TestCase):
    """A cluster whose nodes see an empty folder where the submitting machine wrote the store (a
    tmpfs over it in slurmd's mount namespace): the probe job finds out before the array fans out."""

    @classmethod
    def setUpClass(cls):
        cls.hidden = tempfile.mkdtemp(prefix="slurm-hidden-")
        cls.shared = tempfile.mkdtemp(prefix="slurm-shared-")
        cls.slurm = start_or_skip(cls, hide=cls.hidden)

    def test_a_store_the_nodes_cannot_see_is_refused_before_the_array(self):
        config = os.path.join(self.shared, "tiny.toml")
        with open(config, "w") as f:
            f.write(GRID.format(name="tiny", base=os.path.join(SRC, "examples", "bigram_markov.toml"))
                    .replace("steps = 500", "steps = 2"))
        db = os.path.join(self.hidden, "runs", "tiny.db")
        r = self.slurm.run([BIN, "sweep", "submit", "--config", config, "--slurm", "--out", db, "--quiet"], timeout=120)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("compute nodes cannot see the store's folder", r.stderr)
        self.assertIn("fix: put --out", r.stderr)
        self.assertEqual(os.listdir(os.path.join(self.hidden, "runs")), [])  # nothing left behind
        # The same sweep with its store on a folder the nodes share goes through, merged by its
        # collect job.
        ok = os.path.join(self.shared, "tiny.db")
        r = self.slurm.run([BIN, "sweep", "submit", "--config", config, "--slurm", "--out", ok, "--wait", "--quiet",
                            "--poll", "0.2"], timeout=180)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("points done      24 of 24", r.stdout)


if __name__ == "__main__":
    unittest.main()

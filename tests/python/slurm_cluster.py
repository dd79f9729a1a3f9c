"""A real Slurm cluster for tests (scripts/slurm_local.sh: its own munged, slurmctld and slurmd on
loopback, everything in one temporary folder), started and stopped around a test class.

    from slurm_cluster import SlurmCluster, start_or_skip

    class MyTests(unittest.TestCase):
        @classmethod
        def setUpClass(cls):
            cls.slurm = start_or_skip(cls)          # unittest.SkipTest when no cluster can start
        def test_x(self):
            r = self.slurm.run(["srun", "-n", "2", "hostname"])
            jobs = self.slurm.submit_and_wait(["--array=0-3", "--wrap", "true"])

    with SlurmCluster(nodes=2) as slurm:          # SlurmUnavailable when no cluster can start
        subprocess.run(["sbatch", ...], env=slurm.env)

A test that cannot get a cluster skips with a reason starting with SKIP_PREFIX; a test file whose
every test skipped that way is reported by ctest as skipped, not passed (scripts/python_unittest.py).
SCALEINV_SLURM=off in the environment makes every start fail that way (to see the skip path).
"""
import os
import shutil
import subprocess
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.environ.get("SCALEINV_SOURCE_DIR") or os.path.join(HERE, "..", ".."),
                      "scripts", "slurm_local.sh")
# The skip reason's prefix that scripts/python_unittest.py counts as "the scheduler is unavailable".
SKIP_PREFIX = "scheduler unavailable: "
# States a job (or an array task) does not leave by itself.
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT"}

# Reasons a pending job keeps until someone changes the job or the cluster.
NEVER = {"PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints",
         "DependencyNeverSatisfied", "InvalidAccount", "InvalidQOS"}


class SlurmUnavailable(Exception):
    """No cluster could be started; str() says why (a missing binary, a daemon's log tail)."""


class SlurmCluster:
    """A cluster of `nodes` nodes (one: `localhost`; several: n1..nN, all on 127.0.0.1), one
    partition `debug`. `env` is os.environ with SLURM_CONF set and no SLURM_* variable of a job
    this process may itself run in, for the client commands (sinfo, srun, sbatch, squeue)."""

    def __init__(self, nodes=1, hide=None):
        self.nodes = nodes
        self.hide = hide  # a folder the nodes see empty (scripts/slurm_local.sh's SLURM_LOCAL_HIDE)
        self.dir = None
        self.env = None
        self.start_s = self.stop_s = None  # how long start and stop took

    # ---- starting and stopping ----
    def start(self):
        if os.environ.get("SCALEINV_SLURM") == "off":
            raise SlurmUnavailable("SCALEINV_SLURM=off")
        if not shutil.which("bash") or not os.path.exists(SCRIPT):
            raise SlurmUnavailable(f"no {SCRIPT}")
        # Short, under /tmp: munged's socket path lives in it (at most 107 bytes).
        self.dir = tempfile.mkdtemp(prefix="slurm-", dir="/tmp")
        t = time.monotonic()
        try:
            env = dict(os.environ, SLURM_LOCAL_HIDE=self.hide) if self.hide else None
            r = subprocess.run(["bash", SCRIPT, "start", self.dir, str(self.nodes)],
                               capture_output=True, text=True, timeout=90, env=env)
        except subprocess.TimeoutExpired:
            self.stop()
            raise SlurmUnavailable(f"{SCRIPT} start did not finish within 90 s") from None
        self.start_s = time.monotonic() - t
        if r.returncode != 0:
            why = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
            self.stop()
            raise SlurmUnavailable(why.removeprefix("slurm_local: "))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}
        env["SLURM_CONF"] = os.path.join(self.dir, "slurm.conf")
        self.env = env
        return self

    def stop(self):
        if self.dir is None:
            return
        t = time.monotonic()
        subprocess.run(["bash", SCRIPT, "stop", self.dir], capture_output=True, timeout=60)
        self.stop_s = time.monotonic() - t
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = self.env = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ---- clients ----
    def run(self, args, timeout=120, check=False, **kw):
        """A client command (srun, sbatch, scontrol, ...) against this cluster, output captured."""
        return subprocess.run(args, env=kw.pop("env", self.env), capture_output=True, text=True,
                              timeout=timeout, check=check, **kw)

    def sbatch(self, args):
        """sbatch ARGS (a script, or --wrap); returns the job id (an array's own id)."""
        r = self.run(["sbatch", "--parsable"] + list(args))
        if r.returncode != 0:
            raise RuntimeError(f"sbatch {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
        return r.stdout.strip().split(";")[0]

    def jobs(self, job_id):
        """scontrol's records of a job (one per array task, one for an array's pending rest), each a
        dict of its fields (JobId, ArrayTaskId, JobState, ExitCode, NodeList, ...); [] once purged."""
        r = self.run(["scontrol", "show", "job", "-o", str(job_id)])
        if r.returncode != 0:
            return []
        return [dict(f.split("=", 1) for f in line.split() if "=" in f) for line in r.stdout.splitlines() if line]

    def wait(self, job_id, timeout=60, poll=0.2):
        """Waits until no record of the job is pending or running; returns the last records."""
        end = time.monotonic() + timeout
        while True:
            recs = self.jobs(job_id)
            if recs and all(rec.get("JobState") in FINISHED for rec in recs):
                return recs
            stuck = [rec for rec in recs if rec.get("JobState") == "PENDING" and rec.get("Reason") in NEVER]
            if stuck:
                raise RuntimeError(f"job {job_id} can never start: pending with reason {stuck[0]['Reason']} "
                                   f"(NumCPUs={stuck[0].get('NumCPUs')}, NumNodes={stuck[0].get('NumNodes')})")
            if time.monotonic() > end:
                raise TimeoutError(f"job {job_id} not finished after {timeout} s: "
                                   f"{[(r.get('JobId'), r.get('JobState'), r.get('Reason')) for r in recs]}\n"
                                   f"{self.log_tail('slurmctld')}")
            time.sleep(poll)

    def submit_and_wait(self, args, timeout=60):
        """sbatch ARGS, then wait(): the finished job's records."""
        return self.wait(self.sbatch(args), timeout)

    def squeue(self):
        """{job id (array tasks as 12_3): state} of the jobs slurmctld still lists."""
        r = self.run(["squeue", "-h", "-t", "all", "-o", "%i %T"], check=True)
        return dict(line.split() for line in r.stdout.splitlines() if line.strip())

    def log_tail(self, daemon="slurmctld", lines=20):
        """The last lines of a daemon's log (slurmctld, munged, slurmd.localhost, slurmd.n1, ...)."""
        try:
            with open(os.path.join(self.dir, "log", daemon + ".log")) as f:
                return "".join(f.readlines()[-lines:])
        except OSError as e:
            return str(e)


def start_or_skip(test_class, nodes=1, hide=None):
    """For setUpClass: a started cluster, stopped when the class is done; unittest.SkipTest with
    the reason (prefixed SKIP_PREFIX) when none can start."""
    cluster = SlurmCluster(nodes, hide)
    try:
        cluster.start()
    except SlurmUnavailable as e:
        raise unittest.SkipTest(f"{SKIP_PREFIX}no Slurm cluster: {e}") from None
    test_class.addClassCleanup(cluster.stop)
    return cluster

"""Data-parallel training under a real Slurm (tests/python/slurm_cluster.py: munged, slurmctld and
slurmd on loopback): the job script of docs/distributed.md's "Under Slurm" section, read from the
page itself and submitted with sbatch, trains the tests' small GPT (tests/fixtures/small_gpt.toml,
global batch 8) on 2 ranks that srun starts, and its loss curve is the one process's.

Tolerance: the ranks each average half the batch and the gradients are summed across them, so
the losses differ from one process's by float32 summation order only (~1e-7 relative; 1.2e-7 here
over 20 steps): 1e-5, as tests/test_dist.cpp's TwoRanksMatchOneProcessWithTheSameGlobalBatch.
The CLI does not use the venv's torch, so this runs in the Python.* leg only (CMakeLists.txt)."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

from slurm_cluster import start_or_skip

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("SCALEINV_SOURCE_DIR") or os.path.join(HERE, "..", "..")
BIN = os.environ.get("SCALEINV_BIN") or shutil.which("scaleinv") or "scaleinv"
TRAIN = {"batch_size": "8", "dist_timeout_s": "10"}  # global batch 8: 4 per rank


def doc_job_script():
    """The bash block under docs/distributed.md's "### Under Slurm"."""
    with open(os.path.join(SOURCE, "docs", "distributed.md")) as f:
        page = f.read()
    section = page.split("### Under Slurm", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def losses(out_dir):
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f if line.strip()]


def val_loss(out_dir):
    with open(os.path.join(out_dir, "run.json")) as f:
        return json.load(f)["final_val_loss"]


class SlurmDataParallel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.slurm = start_or_skip(cls)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="scaleinv-slurm-dp-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def config(self, name):
        """run.toml for one run: the fixture with TRAIN and out_dir set in its [train] section."""
        with open(os.path.join(SOURCE, "tests", "fixtures", "small_gpt.toml")) as f:
            head, train = f.read().split("[train]\n", 1)
        out = os.path.join(self.dir, name)
        fields = dict(TRAIN, out_dir=json.dumps(out))
        kept = [line for line in train.splitlines() if line.split("=")[0].strip() not in fields]
        return head + "[train]\n" + "".join(f"{k} = {v}\n" for k, v in fields.items()) + "\n".join(kept) + "\n", out

    def test_the_docs_job_script_trains_two_ranks_as_one_process(self):
        script = doc_job_script()
        for line in ("RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID",
                     'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)', "srun "):
            self.assertIn(line, script)

        # One process, the same global batch.
        text, one = self.config("one")
        with open(os.path.join(self.dir, "one.toml"), "w") as f:
            f.write(text)
        t0 = time.monotonic()
        r = subprocess.run([BIN, "--threads", "1", "train", "--quiet", "--config", os.path.join(self.dir, "one.toml")],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        t1 = time.monotonic()

        # The page's script as it is: `scaleinv` from PATH, run.toml in the job's folder. The
        # command line's options replace its #SBATCH ones: 1 node, 2 ranks of 1 core.
        job = os.path.join(self.dir, "job")
        os.makedirs(os.path.join(job, "bin"))
        os.symlink(os.path.abspath(BIN), os.path.join(job, "bin", "scaleinv"))
        text, two = self.config("two")
        with open(os.path.join(job, "run.toml"), "w") as f:
            f.write(text)
        with open(os.path.join(job, "job.sh"), "w") as f:
            f.write(script)
        env = dict(self.slurm.env, PATH=os.path.join(job, "bin") + os.pathsep + self.slurm.env["PATH"])
        extra = [] if len(os.sched_getaffinity(0)) >= 2 else ["--overcommit"]
        r = self.slurm.run(["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1",
                            f"--chdir={job}", "--output=slurm-%j.out"] + extra + ["job.sh"], env=env, cwd=job)
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = r.stdout.strip()
        (rec,) = self.slurm.wait(job_id, timeout=120)
        t2 = time.monotonic()
        with open(os.path.join(job, f"slurm-{job_id}.out")) as f:
            output = f.read()
        self.assertEqual((rec["JobState"], rec["ExitCode"]), ("COMPLETED", "0:0"),
                         f"{output}\n{self.slurm.log_tail('slurmctld')}")
        self.assertIn("data-parallel          2 ranks, global batch 8 (4 per rank)", output)

        a, b = losses(two), losses(one)
        self.assertEqual(len(a), 20)
        self.assertEqual(len(b), 20)
        self.assertNotEqual(b[0], b[-1])  # it trained
        gap = max(abs(x - y) / abs(y) for x, y in zip(a, b))
        self.assertLess(gap, 1e-5)
        self.assertLess(abs(val_loss(two) - val_loss(one)) / val_loss(one), 1e-5)
        print(f"\n  2 ranks under srun vs 1 process: max relative loss difference over 20 steps {gap:.2e}; "
              f"cluster start {self.slurm.start_s:.2f} s, one process {t1 - t0:.2f} s, "
              f"the job from sbatch to its end {t2 - t1:.2f} s")


if __name__ == "__main__":
    unittest.main()

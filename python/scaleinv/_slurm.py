"""scaleinv.sweep(..., executor="slurm") and scaleinv.search(..., executor="slurm"): each pending point
of a rung is one task of a Slurm job array, trained on the cluster's nodes; the driver (this
process) records each result as it appears.

The C++ brain sends a rung's pending points together (src/brain/sweep/user_sweep.h PointExecutor) and
stays the store's only writer: SlurmExecutor.run writes the points into the job folder, submits one
array for them, and polls squeue and the folder's results, calling started(index) when a task is
seen running and record(index, result) as each result appears. Slurm is reached through the
CLI's own client (src/brain/sweep/slurm.h, bound as _scaleinv.SlurmClient): sbatch, squeue, sinfo and
scancel, as a user at a login node runs them (SLURM_CONF, PATH and the account hold), and no
accounting database is needed (squeue alone tells which tasks still live).

The job folder (executor_options folder; default STEM.pyslurm/ beside the store), which the nodes
must see (a probe job checks it before the first array):

    driver.lock          one driver per folder (flock; the holder's pid in it)
    sweep.json           the space's fingerprint its files belong to
    task.sh              the job script: `PYTHON -m scaleinv._slurm_task SET_DIR $SLURM_ARRAY_TASK_ID`
    function-*.pkl       the point function, pickled once per sweep call by cloudpickle
    points/K/            one array's points: set.json, INDEX.json (id and values)
    results/ID.json      each point's result, written atomically by its task (python/scaleinv/_slurm_task.py)
    jobs.json            every array submitted: id, points/K, indices, attempt
    logs/JOB_INDEX.out   each task's output

A task that ended (squeue no longer lists it) without a result (scancel, killed, out of memory,
its node lost, its time limit) is submitted again, at most max_retries times, then its point is
recorded as failed with the reason (the end its log tells: a signal, an exit code, Slurm's
CANCELLED line); a task Slurm requeues itself (--requeue: a node failure) trains its point again.
An exception your train raises is recorded as it is locally; one raised outside train ends the
sweep, as locally. Ctrl-C cancels the arrays in flight (scancel) and re-raises. A driver that is
killed leaves its tasks running: resume=True takes the results they wrote meanwhile and waits for
the tasks still alive instead of sending their points again.
"""
import base64
import fcntl
import json
import os
import re
import shutil
import sys
import time
import uuid

from ._core import UserError, _import_or_refuse

# executor_options keys: what each takes, for the refusal's fix.
OPTIONS = {
    "folder": "folder='/shared/runs/mine.pyslurm', where the job files go, on a filesystem the nodes share "
              "(default: STEM.pyslurm/ beside the store)",
    "partition": "partition='cpu', the partition the tasks run in (default: the cluster's)",
    "sbatch_args": "sbatch_args=['--time=1:00:00', '--mem=4G'], sbatch options of every task",
    "cpus_per_task": "cpus_per_task=1, the CPUs each point's task gets (torch's threads)",
    "max_retries": "max_retries=1, how often a task that ended without a result is submitted again",
    "poll_s": "poll_s=2, how often squeue and the results folder are read",
    "python": "python='/shared/venv/bin/python', the Python the tasks run (default: this one)",
    "probe_timeout_s": "probe_timeout_s=300, the most the probe job may wait in the queue and run",
}

MAX_ARRAY = 1000  # tasks per array (Slurm's default MaxArraySize is 1001: indices 0..1000)
SQUEUE_PATIENCE_S = 300  # how long squeue may fail (slurmctld restarting) before the sweep ends
RUNNING = ("RUNNING", "COMPLETING")
END_OK = "scaleinv: task ended (exit 0)"
END_PREFIX = "scaleinv: task ended"


def check(o, number):
    """executor="slurm"'s own values in the options dict `o` (its keys already known to be OPTIONS'),
    completed with their defaults; `number` is _executors' check of a number option."""
    for key in ("folder", "partition", "python"):
        v = o.get(key)
        if v is not None and (not isinstance(v, (str, os.PathLike)) or not os.fspath(v)):
            raise UserError(f"python: executor_options: {key}: {v!r} is not a {'name' if key == 'partition' else 'path'} "
                            f"(fix: {OPTIONS[key]})")
        if v is not None:
            o[key] = os.fspath(v)
    args = o.get("sbatch_args", [])
    if isinstance(args, str) or not isinstance(args, (list, tuple)) or not all(isinstance(a, str) for a in args):
        raise UserError(f"python: executor_options: sbatch_args: {args!r} is not a list of strings "
                        f"(fix: {OPTIONS['sbatch_args']})")
    o["sbatch_args"] = list(args)
    for key, default, lo in (("cpus_per_task", 1, 1), ("max_retries", 1, 0)):
        v = o.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise UserError(f"python: executor_options: {key}: {v!r} is not an integer >= {lo} (fix: {OPTIONS[key]})")
        o[key] = v
    o["poll_s"] = number("poll_s", 0, 2, False)
    o["probe_timeout_s"] = number("probe_timeout_s", 0, 300, False)
    o["python"] = os.path.abspath(o.get("python") or sys.executable)
    if not os.access(o["python"], os.X_OK):
        raise UserError(f"python: executor_options: python: {o['python']!r} is not an executable here "
                        f"(fix: {OPTIONS['python']})")


def import_cloudpickle():
    return _import_or_refuse("cloudpickle", "python: executor: 'slurm' ships the point function to the tasks with "
                             "cloudpickle, which this Python does not have")


def default_folder(db_path):
    stem, _ = os.path.splitext(os.path.basename(db_path))
    return os.path.join(os.path.dirname(os.path.abspath(db_path)), stem + ".pyslurm")


def _write_atomic(path, text):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _read_json(path, default=None):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def _quote(text):
    return "'" + text.replace("'", "'\\''") + "'"


def _file_of(point_id):
    """A point's result file name (the ids are hex; anything else is made safe)."""
    return (point_id if re.fullmatch(r"[A-Za-z0-9_-]+", point_id) else re.sub(r"[^A-Za-z0-9_-]", "_", point_id)) + ".json"


def _log_tail(path, n=2):
    """The last n non-empty lines of a task's log ([] when there is none yet)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [ln.strip() for ln in text.splitlines() if ln.strip()][-n:]


class _Task:
    """A point of the rung in flight: the array task training it."""
    __slots__ = ("index", "point_id", "file", "set", "set_index", "job", "attempt", "state", "ended_at", "started")

    def __init__(self, index, point_id, set_name, set_index, job, attempt):
        self.index, self.point_id, self.file = index, point_id, _file_of(point_id)
        self.set, self.set_index, self.job, self.attempt = set_name, set_index, job, attempt
        self.state = None  # the last state squeue gave
        self.ended_at = None  # when it was first seen ended without a result
        self.started = False


class SlurmExecutor:
    """The core's batch executor (src/brain/sweep/user_sweep.h) over Slurm job arrays: run(batch, started,
    record). Made before the store is opened: the scheduler, the partition, the folder's lock and the
    probe job are checked here, each refusal one line. close() releases the folder."""

    concurrent = True

    def __init__(self, client, cloudpickle, point_fn, options, db_path, name, fingerprint, resume):
        self.client = client
        self.o = options
        self.name = re.sub(r"[^A-Za-z0-9_.-]", "_", name or "sweep")
        self.fingerprint = fingerprint
        self.resume = resume
        self.train_s = 0.0  # the time inside train, summed over the points recorded
        self.folder = os.path.abspath(options.get("folder") or default_folder(db_path))
        self._lock_fd = None
        self._prepared = False
        self._function = None
        self._jobs = []  # jobs.json: every array this folder's drivers submitted

        client.check_reachable()
        self.partition = options.get("partition") or ""
        from _scaleinv import partition_in_args
        client.check_partition(self.partition or partition_in_args(options["sbatch_args"]))
        try:
            blob = cloudpickle.dumps(point_fn)
        except Exception as e:  # noqa: BLE001 (what pickling the user's closures raises)
            raise UserError(f"python: make_model, train: cannot be pickled for the Slurm tasks ({type(e).__name__}: "
                            f"{str(e).splitlines()[0][:300] if str(e) else ''}) (fix: functions of a module, or "
                            "closures over picklable values: cloudpickle sends them to the nodes)") from None
        self._made = made = not os.path.exists(self.folder)
        try:
            os.makedirs(self.folder, exist_ok=True)
        except OSError as e:
            raise UserError(f"python: executor_options: folder: cannot make {self.folder} ({e.strerror}) "
                            f"(fix: {OPTIONS['folder']})") from None
        try:
            self._lock()
            self._probe()
        except BaseException:
            self.close()
            raise
        self._function = os.path.join(self.folder, f"function-{uuid.uuid4().hex[:12]}.pkl")
        with open(self._function, "wb") as f:
            f.write(blob)

    # ---- the folder: one driver, the probe, the job script ----
    def _lock(self):
        path = os.path.join(self.folder, "driver.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 200).decode("utf-8", "replace").strip()
            os.close(fd)
            raise UserError(f"python: executor_options: folder: another driver{' (' + holder + ')' if holder else ''} "
                            f"is running executor='slurm' on {self.folder}, the Slurm folder of this store "
                            "(fix: wait for it, or stop it: Ctrl-C cancels its tasks; one driver per store, "
                            "and resume=True goes on from what it stored)") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {os.uname().nodename}\n".encode())
        self._lock_fd = fd

    def close(self, completed=False):
        """Releases the folder. After a sweep that completed, the points, results and function go
        (the store holds the results; the logs and jobs.json stay); after one the core refused before
        any rung ran, what this call wrote goes (the folder too, when it made it)."""
        if completed:
            for sub in ("points", "results"):
                shutil.rmtree(os.path.join(self.folder, sub), ignore_errors=True)
        if completed or not self._prepared:
            if self._function and os.path.exists(self._function):
                os.remove(self._function)
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # the flock goes with it
            self._lock_fd = None
        if not self._prepared and getattr(self, "_made", False):
            shutil.rmtree(self.folder, ignore_errors=True)

    def _sbatch_args(self, job_name, output):
        a = [f"--job-name={job_name}", f"--output={output}", "--open-mode=append", f"--chdir={self.folder}",
             "--ntasks=1", f"--cpus-per-task={self.o['cpus_per_task']}"]
        if self.partition:
            a.append(f"--partition={self.partition}")
        return a + self.o["sbatch_args"]

    def _probe(self):
        """A job on a node reads a file written here into the folder and imports scaleinv and
        cloudpickle with the tasks' Python: else one line naming the option to fix."""
        token = uuid.uuid4().hex[:12]
        mark = os.path.join(self.folder, f"probe-{token}")
        seen, script = mark + ".seen", mark + ".sh"
        with open(mark, "w") as f:
            f.write("written by scaleinv.sweep(executor='slurm') on the driver's machine\n")
        with open(script, "w") as f:
            f.write("#!/bin/bash\n# scaleinv.sweep(executor='slurm'): do the nodes see the job folder, and run its Python?\n"
                    f"test -r {_quote(mark)} || exit 0\n"
                    f"{{ echo folder; {_quote(self.o['python'])} -c 'import scaleinv._slurm_task, cloudpickle' "
                    f"&& echo python; }} > {_quote(seen)} 2>&1\n")
        job = None
        try:
            job = self.client.submit(script, self._sbatch_args(f"scaleinv-{self.name}-probe", "/dev/null"), [])
            t0 = time.monotonic()
            while self.client.live_tasks(job):
                if time.monotonic() - t0 > self.o["probe_timeout_s"]:
                    raise UserError(f"python: executor_options: probe_timeout_s: the probe job {job} did not run within "
                                    f"{self.o['probe_timeout_s']:g} s (the queue is busy, or no node of the partition "
                                    f"takes it) (fix: a larger probe_timeout_s, or another partition)")
                time.sleep(min(0.2, self.o["poll_s"]))
            job_done = job
            job = None
            lines = _log_tail(seen, 50)
        finally:
            if job is not None:
                self.client.cancel([job])
            for p in (mark, seen, script):
                try:
                    os.remove(p)
                except OSError:
                    pass
        if "folder" not in lines:
            raise UserError(f"python: executor_options: folder: the compute nodes cannot see {self.folder} (probe job "
                            f"{job_done} could not read a file written there) (fix: give folder a path on a filesystem "
                            "the nodes share, or put the store there: the default folder is beside it)")
        if "python" not in lines:
            why = [ln for ln in lines if ln != "folder"][-1:] or ["no output"]
            raise UserError(f"python: executor_options: python: {self.o['python']} does not import scaleinv and "
                            f"cloudpickle on the nodes (probe job {job_done}: {why[0][:300]}) (fix: give python an "
                            "interpreter the nodes run that has both: pip install scaleinv cloudpickle)")

    def _write_script(self):
        path = os.path.join(self.folder, "task.sh")
        _write_atomic(path, "#!/bin/bash\n"
                      "# Written by scaleinv.sweep(executor='slurm'): one point of the sweep per task of a job array.\n"
                      "#   sbatch --array=INDICES task.sh SET_DIR   (SET_DIR/set.json, SET_DIR/INDEX.json)\n"
                      "i=\"${SLURM_ARRAY_TASK_ID:?run it as a task of a Slurm job array}\"\n"
                      "export OMP_NUM_THREADS=\"${SLURM_CPUS_PER_TASK:-1}\"\n"
                      f"{_quote(self.o['python'])} -m scaleinv._slurm_task \"$1\" \"$i\"\n"
                      "rc=$?\n"
                      f"if [ $rc -eq 0 ]; then echo {_quote(END_OK)}\n"
                      f"elif [ $rc -gt 128 ]; then echo \"{END_PREFIX} (its Python was killed by signal $((rc - 128)))\"\n"
                      f"else echo \"{END_PREFIX} (its Python exited with $rc)\"; fi\n"
                      "exit $rc\n")
        return path

    # ---- before the first rung: what an earlier driver of this folder left ----
    def _prepare(self):
        """Called in the first run, when the core holds the store: a fresh store (resume=False) or
        another space's folder starts the folder over (an earlier driver's tasks cancelled); a resumed
        one keeps the results and the live tasks an earlier driver left."""
        self._prepared = True
        self._script = self._write_script()
        jobs = _read_json(os.path.join(self.folder, "jobs.json"), [])
        same = (_read_json(os.path.join(self.folder, "sweep.json"), {}) or {}).get("fingerprint") == self.fingerprint
        if self.resume and same:
            self._jobs = jobs
        else:
            if jobs:
                self.client.cancel([j["job"] for j in jobs])
            for sub in ("points", "results", "logs"):
                shutil.rmtree(os.path.join(self.folder, sub), ignore_errors=True)
            for f in os.listdir(self.folder):
                if f.startswith("function-") and os.path.join(self.folder, f) != self._function:
                    os.remove(os.path.join(self.folder, f))
            self._save_jobs()
            _write_atomic(os.path.join(self.folder, "sweep.json"), json.dumps({"fingerprint": self.fingerprint}))
        for sub in ("points", "results", "logs"):
            os.makedirs(os.path.join(self.folder, sub), exist_ok=True)

    def _save_jobs(self):
        _write_atomic(os.path.join(self.folder, "jobs.json"), json.dumps(self._jobs, indent=1) + "\n")

    def _adopt(self, wanted):
        """{point id: _Task} of the tasks an earlier driver submitted that are still alive, for the
        points of `wanted` (id -> index)."""
        out = {}
        for j in self._jobs:
            live = self.client.live_tasks(j["job"])
            for i, state in live.items():
                p = _read_json(os.path.join(self.folder, "points", j["set"], f"{i}.json"))
                if p and p["point_id"] in wanted and p["point_id"] not in out:
                    t = _Task(wanted[p["point_id"]], p["point_id"], j["set"], i, j["job"], j["attempt"])
                    t.state = state
                    out[p["point_id"]] = t
        return out

    # ---- a rung ----
    def _new_set(self, points):
        """Writes the points [(index, point_id, hparams)] as a new points/K/: [(K, i) ...]."""
        root = os.path.join(self.folder, "points")
        k = 1 + max([int(d) for d in os.listdir(root) if d.isdigit()] or [-1])
        d = os.path.join(root, str(k))
        os.makedirs(d)
        path = [p for p in sys.path]
        path = [os.getcwd() if p == "" else os.path.abspath(p) for p in path]
        _write_atomic(os.path.join(d, "set.json"), json.dumps(
            {"function": self._function, "results": os.path.join(self.folder, "results"), "sys_path": path}))
        for i, (_, point_id, hparams) in enumerate(points):
            _write_atomic(os.path.join(d, f"{i}.json"), json.dumps(
                {"point_id": point_id, "file": _file_of(point_id), "hparams": hparams}))
        return str(k)

    def _submit(self, set_name, indices, attempt):
        """One array of points/SET's `indices`: its job id (recorded in jobs.json first thing)."""
        spec = ",".join(str(i) for i in indices)
        args = self._sbatch_args(f"scaleinv-{self.name}", os.path.join(self.folder, "logs", "%A_%a.out"))
        args += [f"--array={spec}", "--requeue"]
        job = self.client.submit(self._script, args, [os.path.join(self.folder, "points", set_name)])
        self._jobs.append({"job": job, "set": set_name, "indices": list(indices), "attempt": attempt})
        self._save_jobs()
        return job

    def _send(self, tasks, attempt):
        """Submits `tasks` (of one set) as arrays of at most MAX_ARRAY."""
        for k in range(0, len(tasks), MAX_ARRAY):
            chunk = tasks[k:k + MAX_ARRAY]
            job = self._submit(chunk[0].set, [t.set_index for t in chunk], attempt)
            for t in chunk:
                t.job, t.attempt, t.state, t.ended_at = job, attempt, None, None

    def _log(self, t):
        return os.path.join(self.folder, "logs", f"{t.job}_{t.set_index}.out")

    def _ended_for_sure(self, t, now):
        """Whether a task squeue no longer lists, and whose result is not there, has ended without
        one. Its log's last line says so at once (a failure, Slurm's CANCELLED); a log that says it
        ended well, or none, is given time for a shared filesystem to show the result (NFS caches
        what a folder holds for seconds)."""
        if t.ended_at is None:
            t.ended_at = now
        last = (_log_tail(self._log(t), 1) or [""])[0]
        if last.startswith(END_PREFIX) and last != END_OK:
            return True
        if "slurmstepd" in last and "***" in last:
            return True
        grace = 60.0 if last == END_OK else max(5.0, 3 * self.o["poll_s"])
        return now - t.ended_at >= grace

    def _reason(self, t):
        lines = _log_tail(self._log(t), 2)
        told = lines[-1] if lines else "no log"
        if len(lines) == 2 and lines[-1].startswith(END_PREFIX) and not re.search(r"line \d+: +\d+ ", lines[0]):
            told = f"{lines[0]}; {lines[-1]}"
        seen = f", last seen {t.state}" if t.state else ""
        return (f"its Slurm task ended without a result {t.attempt} time{'s' if t.attempt > 1 else ''} "
                f"(job {t.job}_{t.set_index}{seen}): {told}")[:1500]

    def _result(self, t):
        """The result of task t as the store's fields (a dict), from its file (None while it cannot be read: a
        shared filesystem may show it late), or what the point function raised there, raised."""
        doc = _read_json(os.path.join(self.folder, "results", t.file))
        if doc is None:
            return None
        if "load_error" in doc:
            raise UserError(f"python: train: the Slurm task could not load the point function on its node "
                            f"({doc['load_error']}; log {self._log(t)}) (fix: make the modules your functions come "
                            "from importable there: installed, or on PYTHONPATH, which sbatch passes on)")
        if "raised" in doc:
            e = None
            if doc.get("exception"):
                try:
                    import pickle
                    e = pickle.loads(base64.b64decode(doc["exception"]))
                except Exception:  # noqa: BLE001
                    e = None
            if isinstance(e, BaseException):
                raise e
            raise RuntimeError(f"the point function raised in Slurm task {t.job}_{t.set_index}: {doc['raised']} "
                               f"(its log: {self._log(t)})")
        return doc["result"]

    def _record(self, t, result, record):
        self.train_s += result.get("wall_s", 0.0)
        record(t.index, result)

    def run(self, batch, started, record):
        if not self._prepared:
            self._prepare()
        wanted = {point_id: index for index, point_id, _ in batch}
        results = set(os.listdir(os.path.join(self.folder, "results")))
        adopted = self._adopt(wanted) if self._jobs else {}
        tasks = {}  # index -> _Task, the points not yet recorded
        fresh = []
        try:
            for index, point_id, hparams in batch:
                if point_id in adopted:
                    tasks[index] = adopted[point_id]
                    continue
                t = _Task(index, point_id, None, None, None, 0)
                # A result there already (its task ended after an earlier driver was killed) is
                # recorded as it is; the other points go out in one array.
                result = self._result(t) if t.file in results else None
                if result is not None:
                    self._record(t, result, record)
                else:
                    tasks[index] = t
                    fresh.append((t, hparams))
            if fresh:
                set_name = self._new_set([(t.index, t.point_id, hp) for t, hp in fresh])
                for i, (t, _) in enumerate(fresh):
                    t.set, t.set_index = set_name, i
                self._send([t for t, _ in fresh], 1)
            self._watch(tasks, started, record)
        except BaseException:
            # The sweep ends here (Ctrl-C, or the point function raised outside train): what is in
            # flight is cancelled; resume=True trains it again.
            jobs = sorted({t.job for t in tasks.values() if t.job})
            if jobs:
                self.client.cancel(jobs)
            raise

    def _live(self, jobs):
        """{job: {index: state}} of `jobs` from squeue; None while squeue fails (a controller that
        restarts or does not answer), for SQUEUE_PATIENCE_S, then RuntimeError."""
        try:
            live = {job: self.client.live_tasks(job) for job in jobs}
        except RuntimeError as e:
            self._squeue_failing = self._squeue_failing or (time.monotonic(), str(e))
            if time.monotonic() - self._squeue_failing[0] > SQUEUE_PATIENCE_S:
                raise RuntimeError(f"executor='slurm': squeue failed for {SQUEUE_PATIENCE_S} s ({e}); the tasks "
                                   "were cancelled, resume=True goes on from what the store holds") from None
            return None
        self._squeue_failing = None
        return live

    def _watch(self, tasks, started, record):
        self._squeue_failing = None
        while tasks:
            # squeue first, the results after: a task squeue no longer lists had written its result
            # (if it did) before this listing, so no result is missed. While squeue fails, only the
            # results are taken.
            live = self._live(sorted({t.job for t in tasks.values() if t.job}))
            results = set(os.listdir(os.path.join(self.folder, "results")))
            now = time.monotonic()
            done, again, new = [], [], []  # (task, result JSON) to record; to send again; seen running first
            for index in sorted(tasks):
                t = tasks[index]
                result = self._result(t) if t.file in results else None
                state = live.get(t.job, {}).get(t.set_index) if live is not None else None
                if result is not None:
                    done.append((t, result))
                elif t.file in results or live is None:
                    pass  # not readable yet (a shared filesystem), or squeue unanswered: next time
                elif state is not None:
                    t.ended_at = None
                    if state != "COMPLETING":  # (its script has ended: what it was before tells more)
                        t.state = state
                    if state in RUNNING and not t.started:
                        new.append(t)
                elif self._ended_for_sure(t, now):
                    if t.attempt <= self.o["max_retries"]:
                        again.append(t)
                    else:
                        done.append((t, {"error": self._reason(t), "wall_s": 0.0}))
            # The tasks Slurm started in the slots of those that finished since the last poll are
            # told before the last of those is recorded, so that the core's "N at a time" (the most
            # running when a point is recorded) counts them beside the others, as they ran.
            for k, (t, result) in enumerate(done):
                if k == len(done) - 1:
                    for n in new:
                        n.started = True
                        started(n.index)
                    new = []
                del tasks[t.index]
                self._record(t, result, record)
            for n in new:
                n.started = True
                started(n.index)
            by_set = {}
            for t in again:
                by_set.setdefault((t.set, t.attempt + 1), []).append(t)
            for (_, attempt), ts in sorted(by_set.items()):
                self._send(ts, attempt)
            if tasks:
                time.sleep(self.o["poll_s"])

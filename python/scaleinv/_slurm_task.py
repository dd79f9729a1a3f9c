"""One point of a sweep run by executor="slurm" (python/scaleinv/_slurm.py), as one task of a Slurm
job array; the job script runs

    PYTHON -m scaleinv._slurm_task SET_DIR INDEX          (INDEX: $SLURM_ARRAY_TASK_ID)

SET_DIR/set.json names the point function's pickle (cloudpickle, written once by the driver), the
driver's sys.path and the results folder; SET_DIR/INDEX.json is the point: its id and its values.
The task runs the point function (the model built under the point's seed, the parameterization
applied, your train called: _sweep.py's train_point) and writes RESULTS/<point id>.json
atomically (a temporary file, then os.replace), which the driver polls for:

    {"point_id": ..., "result": {...}}        the store's result (train's exceptions included)
    {"point_id": ..., "raised": "Type: msg", "exception": base64 or null}
                                              the point function raised outside train: the driver
                                              raises it (as locally, the sweep ends)
    {"point_id": ..., "load_error": "Type: msg"}
                                              the function could not be unpickled here (a module
                                              it comes from is not importable on the node)

A point whose result is already there (a task requeued after it wrote it) is not trained again.
A task killed before it writes (scancel, its node lost, out of memory) leaves no result: the
driver submits it again or records it as failed. Torch runs on SLURM_CPUS_PER_TASK threads.
Nothing here imports torch before the point function does.
"""
import base64
import json
import os
import pickle
import socket
import sys
import traceback


def _write_atomic(path, text):
    tmp = f"{path}.tmp-{socket.gethostname()}-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _describe(e):
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:2000]


def _load(path, sys_path):
    """The point function; the driver's sys.path entries after this Python's own, so that a
    function of a module the driver imported by name is found on a node that shares its files."""
    for entry in sys_path:
        if entry not in sys.path:
            sys.path.append(entry)
    with open(path, "rb") as f:
        return pickle.load(f)  # cloudpickle's output is read by pickle (cloudpickle imported as needed)


def main(argv):
    if len(argv) != 2:
        print("usage: python -m scaleinv._slurm_task SET_DIR INDEX (run by executor='slurm' job scripts)",
              file=sys.stderr)
        return 2
    set_dir, index = argv[0], int(argv[1])
    with open(os.path.join(set_dir, "set.json"), encoding="utf-8") as f:
        s = json.load(f)
    with open(os.path.join(set_dir, f"{index}.json"), encoding="utf-8") as f:
        p = json.load(f)
    out = os.path.join(s["results"], p["file"])
    if os.path.exists(out):
        print(f"scaleinv: point {p['point_id']}: its result is there already ({out}): not trained again", flush=True)
        return 0
    print(f"scaleinv: point {p['point_id']} on {socket.gethostname()}: {p['hparams']}", flush=True)
    try:
        point_fn = _load(s["function"], s.get("sys_path", []))
    except Exception as e:  # noqa: BLE001 (whatever unpickling raises: a module missing here)
        traceback.print_exc()
        _write_atomic(out, json.dumps({"point_id": p["point_id"], "load_error": _describe(e)}))
        return 0
    threads = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if threads.isdigit() and int(threads) > 0 and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(threads))
    try:
        doc = {"point_id": p["point_id"], "result": point_fn(p["hparams"])}
    except Exception as e:  # noqa: BLE001 (outside train: make_model, a result that is no loss)
        traceback.print_exc()
        try:
            try:
                import cloudpickle as pickler  # an exception class of __main__ too
            except ImportError:
                pickler = pickle
            blob = base64.b64encode(pickler.dumps(e)).decode("ascii")
        except Exception:  # noqa: BLE001 (an exception that does not pickle: its text still goes)
            blob = None
        doc = {"point_id": p["point_id"], "raised": _describe(e), "exception": blob}
    _write_atomic(out, json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

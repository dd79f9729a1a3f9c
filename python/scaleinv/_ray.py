"""scaleinv.sweep(..., executor="ray") and scaleinv.search(..., executor="ray"): each pending point of
a rung is one Ray task, trained on the cluster; the driver records each result as it arrives.

The C++ brain sends a rung's pending points together (src/brain/sweep/user_sweep.h PointExecutor) and
stays the store's only writer: RayExecutor.run submits the tasks, and for each finished one calls
record(index, result) on this thread, which writes it in its own transaction before it
returns. A task runs the sweep's point function (_sweep.py: the model built under the point's seed,
the parameterization applied, your train called), shipped once by Ray's cloudpickle, so closures
and functions of __main__ work; a function of another module is imported by name on the worker
(Ray puts the driver script's folder and working directory on the workers' sys.path, nothing
else): install it there, or give executor_options runtime_env (Ray's, for each task: env_vars
PYTHONPATH, py_modules, working_dir). Every node needs scaleinv and torch.

A worker that dies mid-point (killed, out of memory, its node lost) is retried once (Ray's
max_retries=1), then the point is recorded as failed with the reason, like a train that raised; an
exception your train raises is recorded as it is locally, not retried. An exception raised outside
train (make_model returning no module, a result that is no loss) ends the sweep, as locally.
"""
import os
import socket

from ._core import UserError, _import_or_refuse

# executor_options keys: what each takes, for the refusal's fix.
OPTIONS = {
    "address": "address='auto', 'HOST:PORT' or 'ray://HOST:PORT' of a running cluster (None: Ray's default, "
               "RAY_ADDRESS or a local instance)",
    "num_cpus": "num_cpus=1, the CPUs each point's task reserves",
    "num_gpus": "num_gpus=1, the GPUs each point's task reserves (default 0)",
    "max_in_flight": "max_in_flight=8, the most points sent at once (default: as many as the cluster's CPUs "
                     "and GPUs hold)",
    "connect_timeout_s": "connect_timeout_s=10, how long to wait for the cluster at address",
    "runtime_env": "runtime_env={'env_vars': {'PYTHONPATH': '/shared/code'}}, Ray's runtime_env of each point's task",
}


def check(o, number):
    """executor="ray"'s own values in the options dict `o` (its keys already known to be OPTIONS'),
    completed with their defaults; `number` is _executors' check of a number option."""
    addr = o.get("address")
    if addr is not None and (not isinstance(addr, str) or not addr):
        raise UserError(f"python: executor_options: address: {addr!r} is not an address (fix: {OPTIONS['address']})")
    o["num_cpus"] = number("num_cpus", 0, 1, False)
    o["num_gpus"] = number("num_gpus", 0, 0, True)
    o["connect_timeout_s"] = number("connect_timeout_s", 0, 10, False)
    env = o.get("runtime_env")
    if env is not None and not isinstance(env, dict):
        raise UserError(f"python: executor_options: runtime_env: {type(env).__name__} is not a dict "
                        f"(fix: {OPTIONS['runtime_env']})")
    m = o.get("max_in_flight")
    if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
        raise UserError(f"python: executor_options: max_in_flight: {m!r} is not an integer >= 1 "
                        f"(fix: {OPTIONS['max_in_flight']})")


def import_ray():
    return _import_or_refuse("ray", "python: executor: 'ray' needs Ray, which this Python does not have")


def _host_port(address):
    """(host, port) of 'HOST:PORT' or 'ray://HOST:PORT', None for 'auto', 'local' or another form."""
    a = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = a.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def connect(ray, options):
    """ray.init(address=...) unless Ray is initialized already (then it is used as it is). A cluster
    that is not there is a UserError within about connect_timeout_s: the address is tried over TCP
    first (a closed port otherwise had ray.init retrying for minutes), and Ray's own wait for the
    cluster's GCS is bounded by the same time."""
    if ray.is_initialized():
        return
    address = options.get("address")
    if address is None:
        address = os.environ.get("RAY_ADDRESS") or None
    timeout = options["connect_timeout_s"]
    where = f"python: executor_options: address: {address!r}"
    fix = ("start one (ray start --head) or give the address of a running cluster: 'auto' on one of its nodes, "
           "'HOST:PORT' of its head")
    hp = _host_port(address) if address else None
    if hp is not None:
        try:
            socket.create_connection(hp, timeout=timeout).close()
        except OSError as e:
            raise UserError(f"{where}: no Ray cluster answers there ({e.strerror or type(e).__name__}) "
                            f"(fix: {fix})") from None
    bounded = {}
    if address not in (None, "local"):  # connecting, not starting one: the started one keeps Ray's defaults
        bounded = {"RAY_py_gcs_connect_timeout_s": str(max(1, int(timeout))),
                   "RAY_gcs_server_port_wait_time_s": str(max(1, int(timeout)))}
    saved = {k: os.environ.get(k) for k in bounded}
    for k, v in bounded.items():
        os.environ.setdefault(k, v)
    try:
        ray.init(address=address)
    except ConnectionError as e:
        raise UserError(f"{where}: no Ray cluster there ({str(e).splitlines()[0][:200]}) (fix: {fix})") from None
    except (TimeoutError, RuntimeError) as e:
        raise UserError(f"{where}: the cluster did not answer in {timeout:g} s "
                        f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}) (fix: {fix}, "
                        "or a larger connect_timeout_s)") from None
    except ValueError as e:
        if "ray[client]" in str(e):
            raise UserError(f"{where}: a ray:// address needs Ray's client (fix: pip install 'ray[client]')") from None
        raise
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run_point(point_fn, hparams):
    """A Ray task: the sweep's point function on one point (its values a dict; its result a dict)."""
    return point_fn(hparams)


def _reason(e):
    """One line of a Ray error: its type and the first line of its message."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:1500]


class RayExecutor:
    """The core's batch executor (src/brain/sweep/user_sweep.h) over Ray tasks: run(batch, started, record)."""

    concurrent = True

    def __init__(self, ray, point_fn, options):
        self.ray = ray
        self.num_cpus = options["num_cpus"]
        self.num_gpus = options["num_gpus"]
        self.max_in_flight = options.get("max_in_flight")
        have = ray.cluster_resources()
        for key, need in (("CPU", self.num_cpus), ("GPU", self.num_gpus)):
            if need > have.get(key, 0):
                raise UserError(f"python: executor_options: num_{key.lower()}s: each point asks for {need:g} {key}, "
                                f"the cluster has {have.get(key, 0):g} (fix: a smaller num_{key.lower()}s, or a cluster "
                                "with more)")
        self.train_s = 0.0  # the time inside train, summed over the points recorded
        self._point = ray.put(point_fn)  # shipped once (cloudpickle), read by every task
        task = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus, "max_retries": 1, "retry_exceptions": False}
        if options.get("runtime_env"):
            task["runtime_env"] = options["runtime_env"]
        self._task = ray.remote(_run_point).options(**task)

    def _room(self):
        """How many points may be in flight: max_in_flight, or as many as the cluster's resources
        run at once (read again each time, so nodes that join are used)."""
        if self.max_in_flight:
            return self.max_in_flight
        have = self.ray.cluster_resources()
        slots = int(have.get("CPU", 0) // self.num_cpus)
        if self.num_gpus > 0:
            slots = min(slots, int(have.get("GPU", 0) // self.num_gpus))
        return max(1, slots)

    def _result(self, ref):
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as e:
            # Raised by the point function outside train (make_model, a result that is no loss): it
            # ends the sweep, as it does locally, with the original exception.
            cause = getattr(e, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise
        except ray.exceptions.RayError as e:
            # The task's worker died (after its retry), ran out of memory, or its node was lost.
            return {"error": f"the worker training this point died (Ray retries a task once): {_reason(e)}",
                    "wall_s": 0.0}

    def run(self, batch, started, record):
        ray = self.ray
        queue = list(batch)  # (index, point_id, hparams), in grid order
        queue.reverse()
        in_flight = {}  # ObjectRef -> index

        def send(most=None):
            room = self._room() - len(in_flight)
            if most is not None:
                room = min(room, most)
            while queue and (room > 0 or not in_flight):
                index, _, hparams = queue.pop()
                in_flight[self._task.remote(self._point, hparams)] = index
                started(index)
                room -= 1

        try:
            while queue or in_flight:
                send()
                # A bounded wait, so that Ctrl-C is seen within a second.
                done, rest = ray.wait(list(in_flight), num_returns=1, timeout=1.0)
                if not done:
                    continue
                if rest:
                    more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                    done = list(done) + list(more)
                finished = [(in_flight.pop(ref), ref) for ref in done]
                for index, ref in finished:
                    # One more point goes out before this one is written: the worker is not left idle
                    # meanwhile, and the bar's running count (started, not recorded) stays at what runs.
                    send(most=1)
                    result = self._result(ref)
                    self.train_s += result.get("wall_s", 0.0)
                    record(index, result)
        except BaseException:
            for ref in in_flight:  # the sweep ends here (resume=True trains them again)
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 (already finished or gone)
                    pass
            raise

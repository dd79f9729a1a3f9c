"""scaleinv.apply under data parallel and sharding on the CPU: two processes on one machine
(torch.distributed.run, gloo, loopback), each a rank of tests/python/dist_worker.py.

- DDP of an applied model matches one process with the same global batch.
- FSDP2's fully_shard after apply keeps every tensor's own LR and weight decay: the first three
  updates of every tensor equal the unsharded model's.
- A checkpoint saved by torch.distributed.checkpoint from the sharded model loads into an unsharded
  applied model with the same multipliers (group LRs, optimizer state, the tied readout's hook).
- A model sharded before apply is refused, untouched.
Each check is also run with the multipliers flattened (--break groups) or the optimizer's rebinding
removed (--break rebind), and must then fail: the tests can tell."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

import torch

import scaleinv
from test_real_modules import TiedGPT, lm_loss, lm_steps, tokens
import dist_worker as W

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    W.fsdp_api()
    HAS_FSDP2 = True
except Exception:  # noqa: BLE001 (ImportError; Debian's 1.13 on Python 3.11 fails inside its fsdp package)
    HAS_FSDP2 = False

# Two ranks each average half the batch's loss; DDP and FSDP2 average the gradients: the same
# gradient as one process up to float32 summation order (~1e-7 relative). AdamW's update
# m / (sqrt(v) + eps) passes that on unchanged where |g| >> eps and can move a coordinate whose
# gradient is ~eps by O(1) of its (lr-sized) step, so the error is judged on the norm of each
# tensor's update, where such coordinates are a small share: 1e-3 leaves that room. A flattened
# multiplier changes a hidden tensor's update by 4x (lr 1e-2 against 2.5e-3 under mup at
# width 64 from base 16): relative error ~3, and a lost group (the tensor never stepped): 1.
UPDATE_TOL = 1e-3    # ||update - reference update|| / ||reference update||, per tensor


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# torch.distributed.run's elastic agent fails on torch 1.13 under Python 3.11 (its redirect map is
# None: "'NoneType' object has no attribute 'get'"); there the two ranks are started directly with
# the variables torchrun would set (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
TORCHRUN_WORKS = int(torch.__version__.split(".")[0]) >= 2


def torchrun(mode, out, what=""):
    port = str(free_port())
    args = [os.path.join(HERE, "dist_worker.py"), mode, out] + (["--break", what] if what else [])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    if TORCHRUN_WORKS:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--nnodes", "1",
               "--master_addr", "127.0.0.1", "--master_port", port] + args
        results = [subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)]
    else:
        procs = [subprocess.Popen([sys.executable] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                                           MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
                 for r in range(2)]
        results = []
        for p in procs:
            o, e = p.communicate(timeout=300)
            results.append(subprocess.CompletedProcess(p.args, p.returncode, o, e))
    for r in results:
        if r.returncode != 0:
            raise AssertionError(f"rank(s) of {mode} {what} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")


def reference(steps):
    """One process, the whole global batch: parameters after apply and after each step."""
    model, opt = W.build()
    x, y = tokens(n=W.GLOBAL_BATCH, seed=1)
    snaps = [{k: v.detach().clone() for k, v in model.named_parameters()}]
    losses = lm_steps(model, opt, x, y, steps,
                      lambda: snaps.append({k: v.detach().clone() for k, v in model.named_parameters()}))
    return snaps, [loss.item() for loss in losses], model, opt


def update_error(have, want):
    return float((have - want).norm() / want.norm().clamp_min(1e-30))


class Distributed(unittest.TestCase):
    def setUp(self):
        self.out = tempfile.mkdtemp(prefix="scaleinv-dist-")
        self.addCleanup(shutil.rmtree, self.out, True)

    # ---- DDP ----
    def ddp_differences(self, what=""):
        torchrun("ddp", self.out, what)
        got = torch.load(os.path.join(self.out, "ddp.pt"))
        snaps, losses, _, _ = reference(5)
        worst = max(update_error(got["params"][k] - snaps[0][k], snaps[-1][k] - snaps[0][k]) for k in snaps[-1])
        loss_gap = max(abs(a - b) / b for a, b in zip(got["losses"], losses))
        return worst, loss_gap

    def test_ddp_matches_one_process_with_the_same_global_batch(self):
        worst, loss_gap = self.ddp_differences()
        self.assertLess(worst, UPDATE_TOL)
        self.assertLess(loss_gap, 1e-5)

    def test_ddp_check_fails_when_the_multipliers_are_lost(self):
        worst, _ = self.ddp_differences("groups")
        self.assertGreater(worst, 100 * UPDATE_TOL)

    # ---- FSDP2 and DCP ----
    def fsdp2_update_errors(self, what=""):
        torchrun("fsdp2", self.out, what)
        got = torch.load(os.path.join(self.out, "fsdp2.pt"))
        snaps, losses, _, _ = reference(3)
        errs = {}
        prev = snaps[0]
        for k in range(3):
            for name in snaps[0]:
                want = snaps[k + 1][name] - snaps[k][name]
                have = got["snaps"][k][name] - prev[name]
                errs[(k, name)] = update_error(have, want)
            prev = got["snaps"][k]
        return errs, got, snaps, losses

    @unittest.skipUnless(HAS_FSDP2, f"torch {torch.__version__} has no FSDP2 (fully_shard)")
    def test_fsdp2_keeps_every_tensors_lr_and_decay_through_three_updates(self):
        errs, got, _, losses = self.fsdp2_update_errors()
        worst = max(errs, key=errs.get)
        self.assertLess(errs[worst], UPDATE_TOL, f"step {worst[0] + 1}, {worst[1]}")
        for a, b in zip(got["losses"], losses):
            self.assertLess(abs(a - b) / b, 1e-5)
        plan = {t["name"]: t for t in W.build()[1].scaleinv_plan["tensors"]}
        for name, lr, wd, kind in got["groups"]:
            self.assertEqual(kind, "DTensor", f"{name}: the group holds the sharded tensor")
            self.assertAlmostEqual(lr, W.LR * plan[name]["lr"], places=12)
            self.assertAlmostEqual(lr * wd, W.LR * W.WD * plan[name]["wd"], places=12)

        # The DCP checkpoint loads into an unsharded applied model: same weights, same group LRs
        # and optimizer state by name, and the same logits (the tied readout's multiplier hook).
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                             set_model_state_dict, set_optimizer_state_dict)
        model, opt = W.build(seed=123)  # other weights: all of them must come from the checkpoint
        state = {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)}
        dcp.load(state, checkpoint_id=os.path.join(self.out, "dcp"))
        set_model_state_dict(model, state["model"])
        set_optimizer_state_dict(model, opt, state["optim"])
        for k, v in model.named_parameters():
            self.assertTrue(torch.equal(v, got["snaps"][-1][k]), k)
        for g in opt.param_groups:
            self.assertAlmostEqual(g["lr"], W.LR * plan[g["name"]]["lr"], places=12, msg=g["name"])
            self.assertTrue(torch.equal(opt.state[g["params"][0]]["exp_avg"], got["exp_avg"][g["name"]]), g["name"])
        x, _ = tokens(n=W.GLOBAL_BATCH, seed=1)
        with torch.no_grad():
            logits = model(x)
        self.assertLess(float((logits - got["logits"]).abs().max()), 1e-5)

    @unittest.skipUnless(HAS_FSDP2, f"torch {torch.__version__} has no FSDP2 (fully_shard)")
    def test_fsdp2_check_fails_when_the_groups_are_lost(self):
        for what in ("groups", "rebind"):
            errs, _, _, _ = self.fsdp2_update_errors(what)
            self.assertGreater(max(errs.values()), 100 * UPDATE_TOL, what)

    @unittest.skipUnless(HAS_FSDP2, f"torch {torch.__version__} has no FSDP2 (fully_shard)")
    def test_a_model_sharded_before_apply_is_refused_untouched(self):
        torchrun("shard_then_apply", self.out)
        with open(os.path.join(self.out, "refused.txt")) as f:
            msg, unchanged = f.read().splitlines()
        self.assertIn("is a DTensor", msg)
        self.assertIn("fix: call scaleinv.apply on the unsharded model first", msg)
        self.assertEqual(unchanged, "unchanged=True")

    def test_replacing_a_tensor_after_the_first_step_is_refused(self):
        if not hasattr(torch.optim.Optimizer, "register_step_pre_hook"):
            self.skipTest(f"torch {torch.__version__} has no optimizer step hooks")
        model, opt = W.build()
        x, y = tokens(n=2, seed=1)
        lm_loss(model(x), y).backward()
        opt.step()
        model.blocks[0].fc.weight = torch.nn.Parameter(model.blocks[0].fc.weight.detach().clone())
        with self.assertRaises(scaleinv.UserError) as e:
            opt.step()
        self.assertIn("blocks.0.fc.weight was replaced after the optimizer's first step", str(e.exception))


if __name__ == "__main__":
    unittest.main()

"""Tune small, train big, on a GPT you wrote: the whole loop through scaleinv's Python API (issue 41).

The model is examples/python/nanogpt_transfer.py's nanoGPT-style GPT (plain PyTorch, byte vocab,
2 blocks, d_head 32) on KJV bytes, under mup through scaleinv.apply. Four stages, each a store in
--out (rerunning the script resumes every stage where it stopped):

  1. search   at the base width: successive halving over the LR, the init scale, the embedding and
              output multipliers and the warmup fraction (scaleinv.search -> search.db);
  2. sweep    widths (default 64, 128, 256) x a log2 LR grid around the search's best, the other
              four values fixed at the search's best, 2 seeds (scaleinv.sweep -> width.db);
  3. predict  the report of width.db (scaleinv.report: the optimum per width, its drift) and the LR
              predicted at the target width with its 90% interval (scaleinv.predict);
  4. check    runs at the target width at the predicted LR and one doubling either side
              (scaleinv.sweep -> check.db): is the predicted LR the best of the three?

    build/venv/bin/python examples/python/nanogpt_tune_small_train_big.py \\
        [--out runs/nanogpt_loop] [--widths 64,128,256] [--target 512] [--steps 300] [--trials 27]

`scaleinv transfer-report --db OUT/width.db` and `scaleinv sweep rank --db OUT/search.db` read the
same stores. Runs after `bash scripts/setup.sh` (which caches the KJV text)."""
import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import nanogpt_transfer as ng  # noqa: E402  (the model and the data; nothing is copied)
import scaleinv  # noqa: E402

SEQ_LEN, BATCH = 64, 16


class Data:
    """The KJV bytes split into training and held-out text, with the batches of a seed."""

    def __init__(self, data=None):
        self.train, self.heldout = ng.split(ng.load_bytes() if data is None else data)
        self.eval_offsets = ng.eval_offsets(len(self.heldout), SEQ_LEN, 256)


def make_trainer(data):
    def train(model, opt, hp, steps):
        """One run: the space's values applied, AdamW from scaleinv.apply, warmup then cosine decay;
        the training losses and the held-out loss at the end."""
        model.set_attn_logit(opt.scaleinv_plan["shifted"]["attn_logit"])
        model.emb_mult, model.out_mult = hp.get("emb_mult", 1.0), hp.get("out_mult", 1.0)
        with torch.no_grad():  # the init scale on top of apply's rescaled init (a linear factor either way)
            for p in model.parameters():
                if p.dim() == 2:
                    p.mul_(hp.get("init_scale", 1.0))
        for g in opt.param_groups:
            g["betas"] = (0.9, 0.95)
        warmup = max(1, round(hp.get("warmup_frac", 0.1) * steps))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: ng.lr_factor(s, steps, warmup))
        offsets = ng.train_offsets(len(data.train), SEQ_LEN, steps, BATCH, hp["seed"])
        losses = []
        for step in range(steps):
            x, y = ng.windows(data.train, offsets[step], SEQ_LEN)
            loss = model(x, y)
            losses.append(float(loss))
            if not math.isfinite(losses[-1]):
                return losses  # diverged: the store records it at this step
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
        return {"losses": losses, "val_loss": ng.evaluate(model, data.heldout, data.eval_offsets, SEQ_LEN, BATCH)}
    return train


def make_model(width):
    return ng.GPT(width, depth=2, seq_len=SEQ_LEN)


def run(out, widths, target, steps, trials, seeds, lrs_around, data=None, progress=True):
    """The four stages; returns {"search", "best", "report", "prediction", "check"}."""
    os.makedirs(out, exist_ok=True)
    train = make_trainer(Data(data))
    base = widths[0]
    kw = dict(base={"width": base}, resume=True, progress=progress)

    # 1. Search at the base width.
    search = scaleinv.search(make_model, train, db=os.path.join(out, "search.db"), space={
        "fixed": {"param": "mup", "steps": steps, "width": base},
        "search": {"method": "halving", "trials": trials, "eta": 3, "min_steps": max(1, steps // 9),
                   "space": {"lr_log2": {"from": -11, "to": -4},
                             "init_scale": {"from": 0.25, "to": 4, "log": True},
                             "emb_mult": {"from": 0.25, "to": 4, "log": True},
                             "out_mult": {"from": 0.25, "to": 4, "log": True},
                             "warmup_frac": {"from": 0.0, "to": 0.3}}}}, **kw)
    best = search.best()
    center = round(best.pop("lr_log2"))

    # 2. Widths x LRs, the other values at the search's best.
    lrs = [center + d for d in range(-lrs_around, lrs_around + 1)]
    sweep = scaleinv.sweep(make_model, train, db=os.path.join(out, "width.db"), space={
        "fixed": dict(best, param="mup", steps=steps),
        "grid": {"width": widths, "lr_log2": lrs, "seed": list(range(seeds))}}, **kw)

    # 3. The report and the prediction at the target width.
    report = sweep.report()
    prediction = scaleinv.predict(sweep.db, at={"width": target})
    p = prediction.predictions[0]

    # 4. The target width at the predicted LR and a doubling either side.
    check = None
    if p["status"] == "predicted":
        x = round(p["lr_log2"], 2)
        check_db = os.path.join(out, "check.db")
        scaleinv.sweep(make_model, train, db=check_db, space={
            "fixed": dict(best, param="mup", steps=steps, width=target, seed=0),
            "grid": {"lr_log2": [x - 1, x, x + 1]}}, **kw)
        import sqlite3
        with sqlite3.connect(check_db) as c:
            check = sorted(c.execute("SELECT lr_log2, final_loss, final_val_loss FROM points"))
    return {"search": search, "best": dict(best, lr_log2=center), "report": report, "prediction": prediction,
            "check": check}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/nanogpt_loop")
    ap.add_argument("--widths", default="64,128,256")
    ap.add_argument("--target", type=int, default=512)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--trials", type=int, default=27)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--lrs-around", type=int, default=2, help="LR grid: the search's best +- this many doublings")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    r = run(a.out, [int(w) for w in a.widths.split(",")], a.target, a.steps, a.trials, a.seeds, a.lrs_around)
    print("\nsearch's best at width", a.widths.split(",")[0], ":",
          ", ".join(f"{k}={v:.3g}" for k, v in r["best"].items()))
    print(r["prediction"])
    if r["check"]:
        print(f"width {a.target}, held-out loss at log2 LR (predicted {r['check'][1][0]:+.2f} and a doubling either side):")
        for x, loss, val in r["check"]:
            print(f"  {x:+.2f}: training {loss:.4f}, held-out {val:.4f}" if loss is not None else f"  {x:+.2f}: diverged")
        best = min(r["check"], key=lambda t: t[2] if t[2] is not None else math.inf)
        print("the predicted LR is the best of the three" if best[0] == r["check"][1][0] else
              f"the best of the three is {best[0]:+.2f}, not the predicted LR")


if __name__ == "__main__":
    main()

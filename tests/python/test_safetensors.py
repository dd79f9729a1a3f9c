"""Weights written by `scaleinv export` load in plain PyTorch, and `scaleinv import` reads a file
written by plain Python: a few lines of struct + json below are the whole reader and writer
(no scaleinv, no safetensors package)."""
import json
import os
import struct
import subprocess
import tempfile
import unittest

import torch

BIN = os.environ["SCALEINV_BIN"]
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "bigram_markov.toml")
DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    tensors = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        t = torch.frombuffer(bytearray(data[b:e]), dtype=DTYPES[h["dtype"]]) if e > b else torch.empty(0)
        tensors[name] = t.reshape(h["shape"])
    return tensors, meta


def write(path, tensors, meta):
    header, blobs, off = {"__metadata__": meta}, [], 0
    for name, t in tensors.items():
        b = t.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def cli(*args):
    r = subprocess.run([BIN, *args], capture_output=True, text=True)
    return r


class SafeTensorsRoundTrip(unittest.TestCase):
    def test_export_loads_in_pytorch_and_import_takes_plain_python_files(self):
        with tempfile.TemporaryDirectory() as d:
            r = cli("train", "--config", EXAMPLE, "--set", "model.width=16", "--set", "train.steps=2",
                    "--set", f"train.out_dir={d}/run")
            self.assertEqual(r.returncode, 0, r.stderr)
            r = cli("export", "--checkpoint", f"{d}/run/checkpoint.pt", "--out", f"{d}/a.safetensors")
            self.assertEqual(r.returncode, 0, r.stderr)
            tensors, meta = read(f"{d}/a.safetensors")
            self.assertEqual(json.loads(meta["scaleinv.table"])["name"], "mup")
            self.assertEqual(meta["scaleinv.step"], "2")
            self.assertEqual(json.loads(meta["scaleinv.config"])["model"]["width"], 16)
            self.assertEqual(tensors["emb.weight"].shape[1], 16)
            self.assertTrue(all(torch.isfinite(t).all() for t in tensors.values()))

            # New values, written by the plain-Python writer, imported and exported again: bit-for-bit.
            g = torch.Generator().manual_seed(7)
            fresh = {k: torch.randn(t.shape, generator=g) for k, t in tensors.items()}
            write(f"{d}/b.safetensors", fresh, meta)
            r = cli("import", "--safetensors", f"{d}/b.safetensors", "--out", f"{d}/b/checkpoint.pt")
            self.assertEqual(r.returncode, 0, r.stderr)
            r = cli("export", "--checkpoint", f"{d}/b/checkpoint.pt", "--out", f"{d}/c.safetensors")
            self.assertEqual(r.returncode, 0, r.stderr)
            back, meta_c = read(f"{d}/c.safetensors")
            self.assertEqual(meta_c["scaleinv.step"], "0")
            self.assertEqual(set(back), set(fresh))
            for k in fresh:
                self.assertTrue(torch.equal(back[k], fresh[k]), k)

            # Bad files: one line naming the file and the tensor or field, exit 2.
            del fresh["readout.weight"]
            write(f"{d}/missing.safetensors", fresh, meta)
            with open(f"{d}/trunc.safetensors", "wb") as f:
                f.write(open(f"{d}/c.safetensors", "rb").read()[:-5])
            for name, word in (("missing", "readout.weight"), ("trunc", "data_offsets")):
                r = cli("import", "--safetensors", f"{d}/{name}.safetensors", "--out", f"{d}/x/checkpoint.pt")
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
                self.assertIn(word, r.stderr)
                self.assertIn(f"{name}.safetensors", r.stderr)
            self.assertFalse(os.path.exists(f"{d}/x/checkpoint.pt"))


if __name__ == "__main__":
    unittest.main()

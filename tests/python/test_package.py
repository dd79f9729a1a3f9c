"""The installed package (scripts/python_venv.sh: `pip install .` into build/venv): imported from the
venv, not the checkout; its extension links no torch library; the core works in a Python without
torch, and the torch-side functions say what is missing."""
import glob
import json
import os
import subprocess
import sys
import sysconfig
import unittest

DB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "results", "data", "width_gpu_h100.db")

import _scaleinv
import scaleinv

SOURCE = os.environ.get("SCALEINV_SOURCE_DIR", "")


class InstalledPackage(unittest.TestCase):
    def test_imported_from_the_environment_not_the_checkout(self):
        site = sysconfig.get_paths()["purelib"]
        platsite = sysconfig.get_paths()["platlib"]
        for mod in (scaleinv, _scaleinv):
            path = os.path.realpath(mod.__file__)
            self.assertTrue(path.startswith(os.path.realpath(site)) or path.startswith(os.path.realpath(platsite)),
                            f"{mod.__name__} imported from {path}, not from this environment's {site}")
            if SOURCE:  # not the checkout's own package folders (the venv may live under build/)
                for d in ("python", os.path.join("build", "python")):
                    self.assertFalse(path.startswith(os.path.realpath(os.path.join(SOURCE, d)) + os.sep), path)

    def test_extension_links_no_torch_library(self):
        out = subprocess.run(["readelf", "-d", _scaleinv.__file__], capture_output=True, text=True, check=True).stdout
        needed = [line.split("[")[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
        self.assertTrue(needed, out)
        for lib in needed:
            for banned in ("torch", "c10", "libgomp-", "cuda"):
                self.assertNotIn(banned, lib, f"_scaleinv needs {lib}: {needed}")

    def test_core_works_in_a_python_without_torch(self):
        # -S: no site-packages (where torch lives); only a copy of the installed package and its
        # extension (the venv's site-packages holds torch beside them, so it cannot be put on the path).
        import shutil
        import tempfile
        tmp = tempfile.mkdtemp(prefix="scaleinv-notorch-")
        self.addCleanup(shutil.rmtree, tmp, True)
        shutil.copytree(os.path.dirname(os.path.realpath(scaleinv.__file__)), os.path.join(tmp, "scaleinv"))
        shutil.copy2(os.path.realpath(_scaleinv.__file__), tmp)
        pkg_dir = ext_dir = tmp
        code = ("import sys, json\n"
                f"sys.path[:0] = [{pkg_dir!r}, {ext_dir!r}]\n"
                "try:\n    import torch\n    print('TORCH'); sys.exit(3)\nexcept ImportError:\n    pass\n"
                "import _scaleinv, scaleinv\n"
                "t = scaleinv.theory('mup', optimizer='adam')\n"
                "print(json.dumps({'presets': len(scaleinv.presets()), 'name': scaleinv.table('mup')['name'],\n"
                "                  'feature_learning': t['width']['feature_learning'] if 'width' in t else None}))\n"
                "try:\n    scaleinv.apply(None, None, None)\nexcept ImportError as e:\n    print('APPLY', e)\n"
                f"p = scaleinv.predict({DB!r}, at={{'width': 1024}}, param='mup')\n"
                "print('PREDICT', p.predictions[0]['status'])\n")
        r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        lines = r.stdout.strip().splitlines()
        data = json.loads(lines[0])
        self.assertGreaterEqual(data["presets"], 10)
        self.assertEqual(data["name"], "mup")
        self.assertTrue(lines[1].startswith("APPLY scaleinv.apply needs torch"), lines)
        self.assertIn("fix: install torch", lines[1])
        self.assertEqual(lines[2], "PREDICT predicted")
        # The package's edges without torch (issue 63 class 9): every introspection of the package
        # works, the torch-side names exist, and using one (scaleinv.sweep too) says what is missing
        # and writes nothing.
        db = os.path.join(tmp, "none.db")
        code = ("import sys, os, inspect, pydoc\n"
                f"sys.path[:0] = [{pkg_dir!r}]\n"
                "import scaleinv\n"
                "ns = {}\nexec('from scaleinv import *', ns)\n"
                "print('STAR', sorted(k for k in ns if k != '__builtins__') == sorted(scaleinv.__all__))\n"
                "members = dict(inspect.getmembers(scaleinv))\n"
                "print('MEMBERS', all(n in members for n in scaleinv.__all__))\n"
                "print('PYDOC', 'needs torch' in pydoc.render_doc(scaleinv, renderer=pydoc.plaintext))\n"
                "print('HASATTR', hasattr(scaleinv, 'apply'), hasattr(scaleinv, 'CoordCheckResult'), hasattr(scaleinv, 'nosuch'))\n"
                "print('ISINSTANCE', isinstance(1, scaleinv.CoordCheckResult))\n"
                "for call in (lambda: scaleinv.coordcheck(None, [1, 2], []), lambda: scaleinv.check_schedule(None),\n"
                "             lambda: scaleinv.CoordCheckResult.passed, lambda: scaleinv.lr_schedule(None, None),\n"
                f"             lambda: scaleinv.sweep(lambda width: None, lambda *a: 1.0, {{'fixed': {{'param': 'mup', 'steps': 3, 'width': 8, 'lr_log2': -6}}, 'grid': {{'seed': [0]}}}}, db={db!r}),\n"
                f"             lambda: scaleinv.search(lambda width: None, lambda *a: 1.0, {{}}, db={db!r})):\n"
                "    try:\n        call()\n        print('NO ERROR')\n"
                "    except ImportError as e:\n        print('USE', type(e).__name__, e)\n"
                f"print('NODB', os.listdir({tmp!r}))\n")
        r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        out = dict(line.split(" ", 1) for line in r.stdout.strip().splitlines() if not line.startswith("USE"))
        self.assertEqual(out["STAR"], "True")
        self.assertEqual(out["MEMBERS"], "True")
        self.assertEqual(out["PYDOC"], "True")
        self.assertEqual(out["HASATTR"], "True True False")
        self.assertEqual(out["ISINSTANCE"], "False")
        uses = [line for line in r.stdout.splitlines() if line.startswith("USE")]
        self.assertEqual(len(uses), 6, r.stdout)
        for line, name in zip(uses, ["coordcheck", "check_schedule", "CoordCheckResult.passed", "lr_schedule", "sweep", "search"]):
            self.assertTrue(line.startswith(f"USE ImportError scaleinv.{name} needs torch (fix: install torch"), line)
        self.assertNotIn("none.db", out["NODB"])
        # `pydoc scaleinv` from the shell, as a user would ask it
        env = dict(os.environ, PYTHONPATH=pkg_dir)
        r = subprocess.run([sys.executable, "-S", "-m", "pydoc", "scaleinv"], capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("problem in", r.stdout + r.stderr)
        self.assertIn("needs torch", r.stdout)


if __name__ == "__main__":
    unittest.main()

"""README's Python install lines, run exactly as written, as a new user runs them: in a fresh copy of
the checkout's tracked files (no build folder, no venv), a fresh venv, with build isolation
(setuptools and pybind11 from PyPI), then offline with --no-build-isolation, then `pip wheel .`.
Runs on the Python.* leg only (the commands use the python3 on PATH, not the leg's torch): about
two minutes, most of it compiling the torch-free brain once."""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

SOURCE = os.environ.get("SCALEINV_SOURCE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
LEG = os.environ.get("SCALEINV_PY_LEG", "newest")


def readme_blocks(marker):
    """The README's ```bash blocks that contain `marker`, as lists of command lines (comments cut)."""
    with open(os.path.join(SOURCE, "README.md")) as f:
        text = f.read()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        if marker in block:
            lines = [re.sub(r"\s+#.*$", "", ln).strip() for ln in block.splitlines()]
            out.append([ln for ln in lines if ln and not ln.startswith("#")])
    return out


@unittest.skipUnless(LEG == "newest", "README's install lines run once, on the Python.* leg")
@unittest.skipUnless(shutil.which("git"), "needs git to list the tracked files")
class ReadmeInstall(unittest.TestCase):
    def test_the_install_lines_work_in_a_fresh_copy(self):
        blocks = readme_blocks("python3 -m venv .venv")
        self.assertEqual(len(blocks), 1, "README shows one block with the venv lines")
        online = blocks[0]
        offline = readme_blocks("--no-build-isolation")
        self.assertEqual(len(offline), 1, "README shows the offline install")
        self.assertTrue(any(ln.endswith("pip install .") for ln in online), online)
        self.assertTrue(any("pip wheel" in ln for ln in offline[0]), offline)

        work = tempfile.mkdtemp(prefix="scaleinv-readme-")
        self.addCleanup(shutil.rmtree, work, True)
        files = subprocess.run(["git", "-C", SOURCE, "ls-files", "-z"], capture_output=True, check=True).stdout
        for rel in files.decode().split("\0"):
            if rel and os.path.isfile(os.path.join(SOURCE, rel)):
                os.makedirs(os.path.join(work, os.path.dirname(rel)), exist_ok=True)
                shutil.copy2(os.path.join(SOURCE, rel), os.path.join(work, rel))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        # The user's PATH, without the venv the test itself runs in (python3 is the machine's).
        here_bin = os.path.dirname(os.path.realpath(os.sys.executable))
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                      if os.path.realpath(p) != here_bin and "/venv-torch-" not in p)
        for ln in online + offline[0]:
            r = subprocess.run(["bash", "-c", ln], cwd=work, env=env, capture_output=True, text=True, timeout=900)
            self.assertEqual(r.returncode, 0, f"$ {ln}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
            if "examples/python" in ln:  # the muP MLP: mup passes its coordinate check, standard fails it
                self.assertIn("\nmup: PASS", r.stdout, r.stdout[-2000:])
                self.assertIn("\nstandard: FAIL", r.stdout, r.stdout[-2000:])
        wheels = [f for f in os.listdir(os.path.join(work, "dist")) if f.endswith(".whl")]
        self.assertEqual(len(wheels), 1, wheels)
        self.assertRegex(wheels[0], r"^scaleinv-0\.1\.0-cp\d+-cp\d+-linux_x86_64\.whl$|^scaleinv-0\.1\.0-.*\.whl$")
        # The venv imports the installed package, which loads one libtorch: pip's, not a second.
        code = ("import scaleinv, _scaleinv, torch, os; print(os.path.realpath(scaleinv.__file__)); "
                "maps = open('/proc/self/maps').read(); "
                "print(sorted({l.split()[-1] for l in maps.splitlines() if 'libtorch_cpu' in l}))")
        r = subprocess.run([os.path.join(work, ".venv", "bin", "python"), "-c", code], cwd="/", env=env,
                           capture_output=True, text=True, check=True)
        path, libs = r.stdout.strip().splitlines()
        self.assertIn(os.path.join(".venv", "lib"), path)
        self.assertEqual(len(eval(libs)), 1, libs)


if __name__ == "__main__":
    unittest.main()

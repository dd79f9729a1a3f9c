"""README's Python install lines, run exactly as written, as a new user runs them. The CTest fixture
PythonVenvs runs the install lines (scripts/readme_install.py: a fresh copy of the tracked files at
build/readme-install, a fresh venv, `pip install .` with build isolation, then offline, then `pip
wheel`) and installs the wheel they make into both test venvs. This file checks what they left, runs
README's example line in that venv (the muP MLP: mup passes, standard fails; about a minute), and
checks that the venv it runs in holds that very wheel. Runs on the Python.* leg only."""
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import unittest

SOURCE = os.environ.get("SCALEINV_SOURCE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
LEG = os.environ.get("SCALEINV_PY_LEG", "newest")
WORK = os.path.join(SOURCE, "build", "readme-install")


def readme_install():
    """scripts/readme_install.py as a module (its README parsing and the user's environment)."""
    spec = importlib.util.spec_from_file_location("readme_install", os.path.join(SOURCE, "scripts", "readme_install.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@unittest.skipUnless(LEG == "newest", "README's install lines run once, on the Python.* leg")
class ReadmeInstall(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ri = readme_install()
        cls.lines, cls.examples = cls.ri.install_lines(SOURCE)
        cls.env = cls.ri.user_env()

    def test_every_install_line_ran_and_passed_in_the_fresh_copy(self):
        with open(os.path.join(WORK, "log.txt")) as f:
            log = f.read()
        ran = [ln[2:] for ln in log.splitlines() if ln.startswith("$ ")]
        self.assertEqual(ran, self.lines, "the fixture ran README's install lines, in order")
        self.assertEqual(log.count("\nexit 0\n"), len(self.lines), log[-3000:])
        self.assertFalse(os.path.exists(os.path.join(WORK, "build", "venv")), "the copy had no set-up of its own")

    def test_the_wheel_is_named_for_the_package_and_is_what_this_venv_installed(self):
        wheels = [f for f in os.listdir(os.path.join(WORK, "dist")) if f.endswith(".whl")]
        self.assertEqual(len(wheels), 1, wheels)
        self.assertRegex(wheels[0], r"^scaleinv-0\.1\.0-cp\d+-cp\d+-linux_x86_64\.whl$")
        url = json.loads(importlib.metadata.distribution("scaleinv").read_text("direct_url.json"))["url"]
        self.assertEqual(os.path.realpath(url.removeprefix("file://")), os.path.realpath(os.path.join(WORK, "dist", wheels[0])))

    def test_the_example_line_passes_mup_and_fails_standard(self):
        self.assertEqual(len(self.examples), 1, self.examples)
        for ln in self.examples:  # the muP MLP: mup passes its coordinate check, standard fails it
            r = subprocess.run(["bash", "-c", ln], cwd=WORK, env=self.env, capture_output=True, text=True, timeout=900)
            self.assertEqual(r.returncode, 0, f"$ {ln}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
            self.assertIn("\nmup: PASS", r.stdout, r.stdout[-2000:])
            self.assertIn("\nstandard: FAIL", r.stdout, r.stdout[-2000:])

    def test_the_venv_imports_the_installed_package_and_one_libtorch(self):
        # The installed package, not the copy's python/ folder; pip's libtorch, not a second.
        code = ("import scaleinv, _scaleinv, torch, os; print(os.path.realpath(scaleinv.__file__)); "
                "maps = open('/proc/self/maps').read(); "
                "print(sorted({l.split()[-1] for l in maps.splitlines() if 'libtorch_cpu' in l}))")
        r = subprocess.run([os.path.join(WORK, ".venv", "bin", "python"), "-c", code], cwd="/", env=self.env,
                           capture_output=True, text=True, check=True)
        path, libs = r.stdout.strip().splitlines()
        self.assertIn(os.path.join(".venv", "lib"), path)
        self.assertEqual(len(eval(libs)), 1, libs)


if __name__ == "__main__":
    unittest.main()

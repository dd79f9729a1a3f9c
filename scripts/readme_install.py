"""README's Python install lines, run exactly as written, as a new user runs them: in a fresh copy of
the checkout's tracked files (no build folder, no venv) at build/readme-install, a fresh venv, with
build isolation (setuptools and pybind11 from PyPI), then offline with --no-build-isolation, then
`pip wheel`. The wheel that last line writes (build/readme-install/dist) is the one the test venvs
install (scripts/python_venv.sh): the Python tests test what README tells a user to build, and
the torch-free brain is compiled once for all of them, not once per venv.

The lines that run an example (examples/python/...) are not run here: tests/python/
test_readme_install.py runs them in the copy's venv and checks their output.

    python3 scripts/readme_install.py [SOURCE]      (SOURCE: the checkout; default this one)

Writes build/readme-install/ (removed and made anew each run) and its log.txt: each line, its exit
code and the tail of its output. Exits 1 naming the line that failed."""
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_blocks(source, marker):
    """The README's ```bash blocks that contain `marker`, as lists of command lines (comments cut)."""
    with open(os.path.join(source, "README.md")) as f:
        text = f.read()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        if marker in block:
            lines = [re.sub(r"\s+#.*$", "", ln).strip() for ln in block.splitlines()]
            out.append([ln for ln in lines if ln and not ln.startswith("#")])
    return out


def install_lines(source):
    """(install lines, example lines): README's venv block then its offline block, in order; the
    example runs set apart. Raises ValueError where README no longer shows one of each."""
    online = readme_blocks(source, "python3 -m venv .venv")
    offline = readme_blocks(source, "--no-build-isolation")
    if len(online) != 1 or len(offline) != 1:
        raise ValueError(f"README.md shows {len(online)} venv blocks and {len(offline)} offline blocks, not one of each")
    lines = online[0] + offline[0]
    if not any(ln.endswith("pip install .") for ln in lines) or not any("pip wheel" in ln for ln in lines):
        raise ValueError(f"README.md's install blocks lost `pip install .` or `pip wheel`: {lines}")
    examples = [ln for ln in lines if "examples/python" in ln]
    return [ln for ln in lines if ln not in examples], examples


def user_env():
    """The user's environment: no PYTHONPATH, no venv active (a venv's bin folder, the one with
    pyvenv.cfg beside it, leaves PATH: the test venvs, build/venv)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and not os.path.isfile(os.path.join(p, os.pardir, "pyvenv.cfg")))
    return env


def fresh_copy(source, work):
    """The tracked files of `source` (git ls-files) copied to `work`, made anew."""
    shutil.rmtree(work, ignore_errors=True)
    files = subprocess.run(["git", "-C", source, "ls-files", "-z"], capture_output=True, check=True).stdout
    for rel in files.decode().split("\0"):
        if rel and os.path.isfile(os.path.join(source, rel)):
            os.makedirs(os.path.join(work, os.path.dirname(rel)), exist_ok=True)
            shutil.copy2(os.path.join(source, rel), os.path.join(work, rel))


def main():
    source = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else HERE
    work = os.path.join(source, "build", "readme-install")
    try:
        lines, _ = install_lines(source)
    except ValueError as e:
        sys.exit(f"readme_install: {e}")
    if shutil.which("git") is None:
        sys.exit("readme_install: git is needed to list the tracked files (fix: apt-get install git)")
    fresh_copy(source, work)
    env = user_env()
    with open(os.path.join(work, "log.txt"), "w") as log:
        for ln in lines:
            print(f"[readme_install] $ {ln}", file=sys.stderr, flush=True)
            r = subprocess.run(["bash", "-c", ln], cwd=work, env=env, capture_output=True, text=True, timeout=1200)
            log.write(f"$ {ln}\nexit {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-3000:]}\n")
            log.flush()
            if r.returncode != 0:
                sys.exit(f"readme_install: README's line `{ln}` exited {r.returncode} in {work}:\n"
                         f"{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    wheels = sorted(f for f in os.listdir(os.path.join(work, "dist")) if f.endswith(".whl"))
    if len(wheels) != 1:
        sys.exit(f"readme_install: README's `pip wheel` left {wheels} in {work}/dist, not one wheel")
    print(os.path.join(work, "dist", wheels[0]))


if __name__ == "__main__":
    main()

"""scripts/reproduce.py's handling of a sweep whose store is already there.

    /usr/bin/python3 tests/check_reproduce.py

A page's sweep whose store exists is refused before anything runs (exit 2, one line naming the page
line, the store and the fix), unless --resume, where that sweep's command gets `--resume` appended
(after any trailing comment is dropped) and a sweep whose store is absent runs as written. A store's
copy for a later sweep to resume is made, refused over a store already there, or skipped under --resume. No
scaleinv is run: the command that would run is read back through a stand-in for subprocess.run. Standard
library only; exits 1 naming the first expectation that fails. An edit made to the page while its
commands run is kept, and the new output lands in the section where it is when they end.
"""
import contextlib
import io
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
import reproduce  # noqa: E402


def expect(ok, what):
    if not ok:
        print(f"check_reproduce: {what}", file=sys.stderr)
        sys.exit(1)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "x.db")
        there = reproduce.Section(6, f"build/scaleinv sweep --config examples/sweeps/tiny_markov.toml --out {store}  # note", [])
        absent = reproduce.Section(9, f"build/scaleinv sweep --config examples/sweeps/tiny_markov.toml --out {store}.new", [])
        report = reproduce.Section(12, f"build/scaleinv transfer-report --db {store}", ["| a |"])
        todo = [there, absent, report]
        expect(reproduce.stores_in_the_way("p.md", todo, False) == set(), "no store there: nothing refused")
        open(store, "w").close()
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                reproduce.stores_in_the_way("p.md", todo, False)
        except SystemExit as e:
            expect(e.code == 2, f"the refusal exited {e.code}, not 2")
        else:
            expect(False, "a store already there was not refused")
        expect(reproduce.stores_in_the_way("p.md", todo, True) == {6}, "--resume: only the sweep whose store is there resumes")

        ran = []
        real = subprocess.run
        subprocess.run = lambda argv, **kw: (ran.append(argv[-1]), subprocess.CompletedProcess(argv, 0, "ok\n", ""))[1]
        try:
            reproduce.run(there, tmp, True)
            reproduce.run(absent, tmp, False)
        finally:
            subprocess.run = real
        expect(ran[0].endswith(f"--out {store} --resume"), f"the resumed command reads {ran[0]!r}")
        expect(not ran[1].endswith("--resume"), f"a fresh sweep got --resume: {ran[1]!r}")
    # A store's copy for a later sweep to resume (`cp runs/sweeps/A.db runs/sweeps/B.db`): made on a
    # fresh run; where B is already there, refused, or under --resume left alone (B holds that sweep's
    # progress). Paths are under the page's root, here a scratch one.
    with tempfile.TemporaryDirectory() as tmp:
        reproduce.ROOT = tmp
        os.makedirs(os.path.join(tmp, "runs", "sweeps"))
        src, dst = (os.path.join(tmp, "runs", "sweeps", n) for n in ("a.db", "b.db"))
        with open(src, "w") as f:
            f.write("search")
        cp = reproduce.Section(20, "cp runs/sweeps/a.db runs/sweeps/b.db", [])
        expect(cp.copy() and cp.runnable(), "a store's copy is not run")
        expect(reproduce.stores_in_the_way("p.md", [cp], False) == set(), "no copy there: nothing refused")
        reproduce.run(cp, tmp, False)
        expect(open(dst).read() == "search", "the copy was not made")
        with open(dst, "w") as f:
            f.write("progress")
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                reproduce.stores_in_the_way("p.md", [cp], False)
        except SystemExit as e:
            expect(e.code == 2, f"the copy's refusal exited {e.code}, not 2")
        else:
            expect(False, "a copy over a store already there was not refused")
        expect(reproduce.stores_in_the_way("p.md", [cp], True) == {20}, "--resume: the copy is not skipped")
        reproduce.run(cp, tmp, True)
        expect(open(dst).read() == "progress", "--resume: the copy overwrote the resumed sweep's store")
    # The page is edited while its commands run (hours, for a sweep): the outputs go into the page as
    # it is when they end, matched by command, so the edit is kept and the new output lands where
    # the section is now, not at its old line.
    with tempfile.TemporaryDirectory() as tmp:
        reproduce.ROOT, reproduce.RESULTS = tmp, os.path.join(tmp, "docs", "results")
        os.makedirs(os.path.join(reproduce.RESULTS, "data"))
        open(os.path.join(reproduce.RESULTS, "data", "x.db"), "w").close()
        page = os.path.join(reproduce.RESULTS, "p.md")
        with open(page, "w") as f:
            f.write("# p\n\n```\n$ build/scaleinv transfer-report --db docs/results/data/x.db\nold figure\n```\n")

        def edit_then_print(argv, **kw):
            with open(page) as f:
                text = f.read()
            with open(page, "w") as f:
                f.write(text.replace("# p\n", "# p\n\nA paragraph written while the command ran.\n"))
            return subprocess.CompletedProcess(argv, 0, "new figure\n", None)
        subprocess.run = edit_then_print
        try:
            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                code = reproduce.regenerate("p", False, True, False, {"transfer-report"})
        finally:
            subprocess.run = real
        text = open(page).read()
        expect(code == 0, f"regenerate exited {code}")
        expect("A paragraph written while the command ran." in text, "an edit made while the command ran was lost")
        expect("x.db\nnew figure\n```" in text and "old figure" not in text,
               f"the new output is not in the section where it now is: {text!r}")
    # A page is a page of docs/results, not a path (issue 63 class 8: '../predict' and '../../README'
    # were taken as pages), and a SCALEINV_BIN that is no program is named (it was a PermissionError
    # traceback, exit 1): each one line, exit 2.
    script = os.path.abspath(reproduce.__file__)
    for args, env, words in ((["../predict", "--cheap", "--check"], {}, "not a page of docs/results"),
                             (["../../README", "--cheap"], {}, "not a page of docs/results"),
                             (["all", "--cheap", "--check"], {"SCALEINV_BIN": tempfile.gettempdir()}, "is a directory, not the scaleinv program")):
        p = real([sys.executable, script, *args], capture_output=True, text=True, env=dict(os.environ, **env))
        expect(p.returncode == 2 and p.stderr.count("\n") == 1 and words in p.stderr and "fix:" in p.stderr,
               f"{args} {env}: exit {p.returncode}, {p.stderr!r}")
    print("reproduce: a store already there is refused, or resumed with --resume; a store's copy likewise; "
          "an edit made while the commands ran is kept; a page that is a path and a SCALEINV_BIN that is no "
          "program are refused")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Regenerate a results page (docs/results/NAME.md, or an extra page named in EXTRA_PAGES:
`predict` is docs/predict.md) from the commands it shows.

A results page shows each figure as a fenced block that starts with the command that printed it:

    ```
    $ build/scaleinv transfer-report --db docs/results/data/width_gpu_h100.db --out /tmp/width_gpu
    | scaling | param | ...
    ```

Each such section (a line `$ build/scaleinv ...`, then its output up to the next `$ ` line or the
end of the block) is run again, in page order, from the repository's root, and its output replaces
the old one. Sections whose command is not `build/scaleinv` (a GPU build's `build-cuda/scaleinv`, a
shell line of bench/gpu_check.sh) or that show no output (a list of commands) are left as they are;
of those, the sweeps still run (in page order, before the reports that read their stores), also
where a block lists plain `build/scaleinv sweep ...` lines without `$ `.
A line `cp runs/sweeps/A.db runs/sweeps/B.db` (a store copied for a later sweep to `--resume`, as a
hyperband resumes a halving search) runs in its place, in a list or as a `$ ` section.
A section `$ sqlite3 ... < examples/sweeps/NAME.sql` (a kept query over stores) runs too, and is
cheap where every store it reads (ATTACHed in the file, or named on its command line) is under
docs/results/data/.
Output lines starting with `wrote ` name the scratch files a command wrote, not figures: they are
left out. The page is rewritten atomically (a temporary file renamed over it), and only when every
command it ran exited 0. The outputs go into the page as it is when the last command ends, matched by
command, so edits made to its prose while its sweeps ran are kept.

Progress: each command is announced on stderr (`reproduce: [i/n] page:line: command`) with its
wall time when it ends, and the commands' own stderr (the sweeps' progress bars) passes through.

    scripts/reproduce.sh NAME|all [--check] [--cheap] [--list] [--resume]

--check   regenerate in memory and compare: exit 1 and print a diff where the page differs
--cheap   run only the sections that read stores kept in the repository (transfer-report and
          predict whose every --db is under docs/results/data/, and the kept SQL queries over
          them): seconds, not hours
--list    print each page's sections, whether cheap, and what each needs; run nothing
--resume  continue a reproduction cut short: a sweep whose store is already there runs with
          `--resume` (its finished points are kept, the rest run). Without it such a store is
          refused before anything runs, since a page regenerated over old stores would show their
          figures, not today's (fix: delete the store for a fresh run)

Exit 2 on a user error (an unknown page, a command naming a missing file or subcommand), 1 on a
check that differs or a command that failed.
"""
import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "docs", "results")
# Pages outside docs/results whose command outputs are regenerated and checked the same way, by name.
EXTRA_PAGES = {"predict": os.path.join("docs", "predict.md")}
EXE = "build/scaleinv"
CHEAP = ("transfer-report", "predict")


class Section:
    def __init__(self, line_no, command, output):
        self.line_no = line_no          # 0-based index of the "$ " line in the page
        self.command = command          # without the "$ " (continuation lines joined)
        self.cmd_lines = 1              # page lines the command takes (a trailing \ continues it)
        self.output = output            # the lines after it, up to the next "$ " or the fence
        self.listed = False             # a line of a plain list of commands (no "$ ", no output)

    def argv(self):
        try:
            return shlex.split(self.command, comments=True)
        except ValueError:
            return self.command.split()

    def ours(self):
        return self.command.startswith(EXE + " ")

    def sql(self):
        """A kept query: `sqlite3 [options] < FILE.sql`."""
        return self.command.startswith("sqlite3 ")

    def sql_file(self):
        m = re.search(r"<\s*(\S+\.sql)\b", self.command)
        return m.group(1) if m else None

    def sweep(self):
        a = self.argv()  # (sweep rank and sweep merge read stores; they make none)
        return self.ours() and len(a) > 1 and a[1] == "sweep" and not (len(a) > 2 and a[2] in ("rank", "merge"))

    def copy(self):
        """A store copied for a later sweep to resume: `cp runs/sweeps/A.db runs/sweeps/B.db`."""
        a = self.argv()
        return (len(a) == 3 and a[0] == "cp" and all(x.startswith("runs/sweeps/") and x.endswith(".db") for x in a[1:]))

    def runnable(self):
        """Run in a full regeneration: a command shown with its output, a sweep (it makes a store), or
        the copy of a store a later sweep resumes."""
        if self.sql():
            return len(self.output) > 0
        if self.copy():
            return True
        return self.ours() and (len(self.output) > 0 or self.sweep())

    def dbs(self):
        a = self.argv()
        return [a[i + 1] for i, x in enumerate(a[:-1]) if x == "--db"]

    def cheap(self):
        if self.sql():
            try:
                text = open(os.path.join(ROOT, self.sql_file() or "")).read()
            except OSError:
                return False
            stores = re.findall(r"ATTACH\s+'([^']+)'", text, re.I) + [a for a in self.argv() if a.endswith(".db")]
            return self.runnable() and bool(stores) and all(d.startswith("docs/results/data/") for d in stores)
        a = self.argv()
        reads = len(a) > 1 and (a[1] in CHEAP or a[1:3] == ["sweep", "rank"])
        return (self.runnable() and reads and self.dbs()
                and all(d.startswith("docs/results/data/") for d in self.dbs()))


def sections(lines):
    """Every `$ ` section inside a fenced block, in page order."""
    out, fenced, current = [], False, None
    for i, line in enumerate(lines):
        if line.startswith("```"):
            if fenced and current:
                out.append(current)
            fenced, current = not fenced, None
            continue
        if not fenced:
            continue
        if line.startswith("$ "):
            if current:
                out.append(current)
            current = Section(i, line[2:], [])
        elif (current is None or current.listed) and (line.startswith(EXE + " ") or line.startswith("cp runs/sweeps/")):
            # A block that lists commands without "$ " and without output ("Commands" at the top of
            # a page): each line is a command to run (a sweep, a store's copy) or only shown (a report).
            if current:
                out.append(current)
            current = Section(i, line, [])
            current.listed = True
        elif current and not current.output and current.command.endswith("\\"):
            current.command = current.command[:-1] + " " + line.strip()
            current.cmd_lines += 1
        elif current and not current.listed:
            current.output.append(line)
    return out


def clock(seconds):
    m, s = divmod(int(seconds + 0.5), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}"


def fail(msg, code=2):
    print(f"reproduce: {msg}", file=sys.stderr)
    sys.exit(code)


def subcommands():
    if not (os.path.isfile(exe()) and os.access(exe(), os.X_OK)):  # (a directory passed X_OK: a traceback, exit 1)
        where = "SCALEINV_BIN: " if os.environ.get("SCALEINV_BIN") else ""
        what = "is a directory, not the scaleinv program" if os.path.isdir(exe()) else "not built"
        fail(f"{where}{exe()}: {what} (fix: bash scripts/setup.sh, or set SCALEINV_BIN to the scaleinv binary)")
    text = subprocess.run([exe(), "--help"], capture_output=True, text=True).stdout
    return set(re.findall(r"^\s{2}([a-z][a-z-]+)\s{2,}", text, re.M))


def check_needs(page, sec, subs, made):
    """A command names an existing subcommand and files that exist or that the page makes first."""
    if sec.copy():
        src = sec.argv()[1]
        if not os.path.exists(os.path.join(ROOT, src)) and src not in made:
            fail(f"{page}:{sec.line_no + 1}: `{sec.command}` copies {src}, which no sweep earlier on the page "
                 f"makes (fix: show that sweep first)")
        return
    if sec.sql():
        f = sec.sql_file()
        if not f or not os.path.isfile(os.path.join(ROOT, f)):
            fail(f"{page}:{sec.line_no + 1}: `{sec.command}` reads no existing .sql file "
                 f"(fix: `sqlite3 -header -column < examples/sweeps/NAME.sql`, the file kept there)")
        return
    a = sec.argv()
    if len(a) < 2 or a[1] not in subs:
        fail(f"{page}:{sec.line_no + 1}: `{sec.command}` names no scaleinv subcommand "
             f"(fix: one of {', '.join(sorted(subs))})")
    for i, x in enumerate(a[:-1]):
        path = a[i + 1]
        if x == "--config" and not os.path.exists(os.path.join(ROOT, path)):
            fail(f"{page}:{sec.line_no + 1}: --config {path} does not exist (fix: the sweep file's path)")
        if x == "--db" and not os.path.exists(os.path.join(ROOT, path)) and path not in made:
            fail(f"{page}:{sec.line_no + 1}: --db {path} is neither in the repository nor made by a sweep "
                 f"earlier on the page (fix: show the sweep that writes it, or keep the store in docs/results/data)")


def sweep_outputs(a):
    """The store a `scaleinv sweep` command writes: --out, else the file's [sweep] db."""
    out = [a[i + 1] for i, x in enumerate(a[:-1]) if x == "--out"]
    if out:
        return set(out)
    cfg = [a[i + 1] for i, x in enumerate(a[:-1]) if x == "--config"]
    found = set()
    for c in cfg:
        try:
            text = open(os.path.join(ROOT, c)).read()
        except OSError:
            continue
        db = re.search(r'^db\s*=\s*"([^"]+)"', text, re.M)
        name = re.search(r'^name\s*=\s*"([^"]+)"', text.split("[sweep]", 1)[-1], re.M)
        if db:
            found.add(db.group(1))
        else:  # (scaleinv sweep's default: runs/sweeps/NAME.db, NAME the [sweep] name or the file's stem)
            found.add("runs/sweeps/" + (name.group(1) if name else os.path.splitext(os.path.basename(c))[0]) + ".db")
    return found


def exe():
    """The scaleinv the pages' `build/scaleinv` means: SCALEINV_BIN where set (the test suite's build)."""
    return os.environ.get("SCALEINV_BIN") or os.path.join(ROOT, EXE)


def stores_in_the_way(page, todo, resume):
    """The sweeps to run whose store is already there, and the copies whose target is: refused (exit 2)
    unless --resume, where those sweeps get `--resume` appended and those copies are skipped (the
    store holds the sweep's progress). Returns the set of line numbers so marked."""
    resumed = set()
    for s in todo:
        if not s.sweep() or "--resume" in s.argv():
            continue
        there = sorted(d for d in sweep_outputs(s.argv()) if os.path.exists(os.path.join(ROOT, d)))
        if there and not resume:
            fail(f"{page}:{s.line_no + 1}: {there[0]} is already there, and this sweep would refuse it "
                 f"(fix: delete it for a fresh run, or pass --resume to continue a reproduction cut short)")
        if there:
            resumed.add(s.line_no)
    for s in todo:  # a copy made for a later sweep to resume: under --resume that sweep's store is kept
        if s.copy() and os.path.exists(os.path.join(ROOT, s.argv()[2])):
            if not resume:
                fail(f"{page}:{s.line_no + 1}: {s.argv()[2]} is already there, and this copy would overwrite it "
                     f"(fix: delete it for a fresh run, or pass --resume to continue a reproduction cut short)")
            resumed.add(s.line_no)
    return resumed


def run(sec, scratch, resume=False):
    if sec.copy():
        if not resume:
            shutil.copyfile(os.path.join(ROOT, sec.argv()[1]), os.path.join(ROOT, sec.argv()[2]))
        return []
    env = dict(os.environ, TMPDIR=scratch)
    command = sec.command if sec.sql() else shlex.quote(exe()) + sec.command[len(EXE):]
    if resume:  # (from the parsed words: a trailing comment would swallow an appended flag)
        command = shlex.join([exe()] + sec.argv()[1:] + ["--resume"])
    # stdout is the figures; stderr (progress bars, errors) goes to the user as it comes.
    p = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        fail(f"`{sec.command}` exited {p.returncode}", 1)
    lines = [l for l in p.stdout.rstrip("\n").split("\n") if not l.startswith("wrote ")]
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def page_rel(name):
    """A page's path from the repository root: docs/results/NAME.md, or an extra page's."""
    return EXTRA_PAGES.get(name, os.path.join("docs", "results", name + ".md"))


def regenerate(name, check, cheap, listing, subs, resume=False):
    rel = page_rel(name)
    path = os.path.join(ROOT, rel)
    if not os.path.isfile(path):
        fail(f"{rel}: no such page (fix: one of {', '.join(pages())}, or all)")
    lines = open(path).read().split("\n")
    secs = sections(lines)
    made = set()  # the stores the page's sweeps write (a listing at the top names them before use)
    for s in secs:
        a = s.argv()
        if s.sweep():
            made.update(sweep_outputs(a))
        if s.copy():
            made.add(a[2])
    for s in secs:
        if s.ours() or s.sql() or s.copy():
            check_needs(rel, s, subs, made)
    todo = [s for s in secs if s.runnable() and (s.cheap() or not cheap)]
    if listing:
        for s in secs:
            kind = "cheap" if s.cheap() else ("runs" if s.runnable() else "shown only")
            print(f"{name}.md:{s.line_no + 1}: [{kind}] {s.command}")
        return 0
    if not todo:
        return 0
    resumed = stores_in_the_way(rel, todo, resume)
    ran = {}  # the same command listed at the top and shown with its output below runs once
    commands = len({tuple(s.argv()) for s in todo})
    with tempfile.TemporaryDirectory(prefix="scaleinv_reproduce.") as scratch:
        for s in todo:  # run in page order (a sweep before the report that reads its store)
            key = tuple(s.argv())
            if key not in ran:
                print(f"reproduce: [{len(ran) + 1}/{commands}] "
                      f"{rel}:{s.line_no + 1}: {s.command}", file=sys.stderr, flush=True)
                t0 = time.monotonic()
                ran[key] = run(s, scratch, s.line_no in resumed)
                print(f"reproduce: done in {clock(time.monotonic() - t0)}", file=sys.stderr, flush=True)
    # The page as it is now (hours may have passed): its sections matched by command, bottom up so
    # that earlier sections' line numbers stay valid while later ones change size.
    lines = open(path).read().split("\n")
    new = list(lines)
    for s in sorted(sections(lines), key=lambda s: -s.line_no):
        key = tuple(s.argv())
        if s.output and key in ran:  # (a sweep shown without its output only makes its store)
            at = s.line_no + s.cmd_lines
            new[at:at + len(s.output)] = ran[key]
    if new == lines:
        print(f"{rel}: {len(todo)} section(s) regenerated, unchanged")
        return 0
    if check:
        sys.stdout.writelines(difflib.unified_diff([l + "\n" for l in lines], [l + "\n" for l in new],
                                                   rel, "regenerated"))
        print(f"{rel}: differs from what its commands print today", file=sys.stderr)
        return 1
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=f".{name}.", suffix=".md")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(new))
    os.replace(tmp, path)
    print(f"{rel}: {len(todo)} section(s) regenerated, rewritten")
    return 0


def pages():
    results = sorted(f[:-3] for f in os.listdir(RESULTS) if f.endswith(".md") and f != "index.md")
    return results + sorted(EXTRA_PAGES)


def main():
    args = sys.argv[1:]
    flags = {a for a in args if a.startswith("--")}
    names = [a for a in args if not a.startswith("--")]
    unknown = flags - {"--check", "--cheap", "--list", "--resume"}
    if unknown or len(names) != 1:
        fail(f"usage: scripts/reproduce.sh NAME|all [--check] [--cheap] [--list] [--resume] "
             f"(pages: {', '.join(pages())}){'; unknown ' + ', '.join(sorted(unknown)) if unknown else ''}")
    subs = subcommands()
    if names[0] != "all" and names[0] not in pages():  # a page's name, not a path ('../predict', '../../README')
        fail(f"{names[0]}: not a page of docs/results nor an extra page (fix: one of {', '.join(pages())}, or all)")
    todo = pages() if names[0] == "all" else [names[0]]
    worst = 0
    for n in todo:
        worst = max(worst, regenerate(n, "--check" in flags, "--cheap" in flags, "--list" in flags, subs,
                                      "--resume" in flags))
    return worst


if __name__ == "__main__":
    sys.exit(main())

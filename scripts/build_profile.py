#!/usr/bin/env python3
"""Where a build's time goes (issue 62): per target, per source folder, and how many translation
units include libtorch, from a Ninja build folder's own records.

    python3 scripts/build_profile.py [BUILD_DIR] [--top N] [--json FILE]

Reads BUILD_DIR/.ninja_log (start and end of every command Ninja ran, newest entry per output) and
`ninja -C BUILD_DIR -t deps` (the headers each object was compiled against, as the compiler
reported them). Meaningful after a cold build (a fresh clone's scripts/setup.sh): an incremental
build's log mixes times from builds under different loads. Prints the seconds of compiler time
per target and per folder of src/, the share spent on objects that include torch, the slowest
objects, and the wall time of the build (first start to last end). Writes nothing unless --json is
given (then the same numbers as one JSON object, written atomically). Exit 2 with one line when
BUILD_DIR has no .ninja_log or ninja is not installed."""
import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def fail(msg):
    print(f"build_profile: {msg}", file=sys.stderr)
    sys.exit(2)


def read_log(build):
    """{output: (start_ms, end_ms)} from .ninja_log, the newest entry of each output."""
    path = os.path.join(build, ".ninja_log")
    if not os.path.isfile(path):
        fail(f"{path}: no .ninja_log (fix: build with Ninja first, e.g. bash scripts/setup.sh)")
    entries = {}
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 4:
                entries[parts[3]] = (int(parts[0]), int(parts[1]))
    return entries


def torch_objects(build):
    """The objects compiled against libtorch's headers: those whose recorded headers include one
    (include/torch/, include/ATen/, include/c10/: not the fmt pip's libtorch ships beside them), and those built with a precompiled header that does (CMake passes it as
    `-include .../cmake_pch.hxx`; the compiler then records the header, not what is inside it)."""
    if shutil.which("ninja") is None:
        fail("ninja is not installed (fix: apt-get install ninja-build)")
    out = subprocess.run(["ninja", "-C", build, "-t", "deps"], capture_output=True, text=True, check=True).stdout
    found, current = set(), None
    for line in out.splitlines():
        if line and not line.startswith(" "):
            current = line.split(":")[0]
        elif current and re.search(r"/include/(torch|ATen|c10)/", line):
            found.add(current)
    torch_pch = {o[:-len(".gch")] for o in found if o.endswith("cmake_pch.hxx.gch")}
    with open(os.path.join(build, "build.ninja")) as f:
        obj = None
        for line in f:
            m = re.match(r"build (\S+\.o): CXX_COMPILER", line)
            if m:
                obj = m.group(1)
            elif obj and line.strip().startswith("FLAGS ="):
                pch = re.search(r"-include \S*?(CMakeFiles/[^/]+\.dir/cmake_pch\.hxx)\b", line)
                if pch and pch.group(1) in torch_pch:
                    found.add(obj)
                obj = None
    return found


def target_of(obj):
    m = re.match(r"CMakeFiles/([^/]+)\.dir/", obj)
    return m.group(1) if m else "(other)"


def folder_of(obj):
    m = re.search(r"\.dir/(?:src/)?(.+?)/[^/]+\.(?:cpp|cxx|cc)\.o$", obj)
    return m.group(1) if m else "(other)"


def profile(build):
    log = read_log(build)
    torch = torch_objects(build)
    objects = {o: (e - s) / 1000.0 for o, (s, e) in log.items() if o.endswith(".o")}
    links = {o: (e - s) / 1000.0 for o, (s, e) in log.items() if not o.endswith(".o")}
    per_target, per_folder = collections.Counter(), collections.Counter()
    count_target = collections.Counter()
    for o, sec in objects.items():
        per_target[target_of(o)] += sec
        count_target[target_of(o)] += 1
        per_folder[folder_of(o)] += sec
    starts = [s for s, _ in log.values()]
    ends = [e for _, e in log.values()]
    return {
        "objects": len(objects),
        "objects_including_torch": len(torch & set(objects)),
        "compile_s": round(sum(objects.values()), 1),
        "compile_s_torch": round(sum(v for o, v in objects.items() if o in torch), 1),
        "other_steps_s": round(sum(links.values()), 1),
        "wall_s": round((max(ends) - min(starts)) / 1000.0, 1) if starts else 0.0,
        "per_target": {t: {"objects": count_target[t], "s": round(v, 1)} for t, v in per_target.most_common()},
        "per_folder": {f: round(v, 1) for f, v in per_folder.most_common()},
        "slowest": [(o, round(v, 1), o in torch) for o, v in sorted(objects.items(), key=lambda kv: -kv[1])],
    }


def show(p, top):
    print(f"{p['objects']} objects, {p['objects_including_torch']} of them include libtorch; compiler time "
          f"{p['compile_s']:.0f} s ({p['compile_s_torch']:.0f} s on those), links and other steps "
          f"{p['other_steps_s']:.0f} s; the build's wall time {p['wall_s']:.0f} s")
    print("\nper target (objects, compiler seconds):")
    for t, v in p["per_target"].items():
        print(f"  {t:28s} {v['objects']:4d} {v['s']:8.1f}")
    print("\nper folder of src/ (compiler seconds):")
    for f, v in p["per_folder"].items():
        print(f"  {f:28s} {v:8.1f}")
    print(f"\nthe {top} slowest objects (seconds; * includes libtorch):")
    for o, v, t in p["slowest"][:top]:
        print(f"  {v:6.1f} {'*' if t else ' '} {o}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    p = profile(a.build)
    show(p, a.top)
    if a.json:
        d = os.path.dirname(os.path.abspath(a.json))
        with tempfile.NamedTemporaryFile("w", dir=d, delete=False, suffix=".tmp") as f:
            json.dump(p, f, indent=1)
        os.replace(f.name, a.json)


if __name__ == "__main__":
    main()

"""Every citation in the code's comments resolves through docs/references.md (issue 18).

Run by CTest as Structure.CitationsResolve; exits 1 listing each citation that does not resolve
(file:line, the citation, why), 0 otherwise. What is checked, in the comments of src/, python/,
examples/, bench/ and tests/ (text after // or #):

  - "seed NNN": NNN is a row of the seeds table (references.md section 1);
  - an equation, Claim, Lemma, Definition or Table of a seed ("seed 004 Claim 5.1", "eqs. (8)-(10)"):
    a row of that seed's table lists it (ranges count for every number in them). A citation with no
    seed named on its line before it is seed 000's (references.md: every bare "eq. (N)" means seed
    000's numbering), unless an earlier line of the same comment block named a seed (the block
    continues it) or the line names another paper (a [key] or an author) before it;
  - "issue N": a row of the issues table (section 8);
  - "ref. [key]": a row of the short-keys table (section 9.1);
  - DESIGN.md "Section" and notes/NAME.md (the design brief and the notes, not in the repository):
    a row of section 6 or a paragraph of section 7 says what they held and where it is now.

    /usr/bin/python3 tests/check_citations.py [REPO_DIR]
"""
import os
import re
import sys

SCAN = ["src", "python", "examples", "bench", "tests"]
EXTENSIONS = (".h", ".cpp", ".py", ".toml", ".sh", ".txt")
# A citation kind and the pattern of its number(s); numbers like 5, 5.1, 1.61, E.5, A.2.2.
NUM = r"[A-Z]?\.?\d+(?:\.\d+)*"
KINDS = {
    "eq": re.compile(r"\beqs?\.\s*\(?(" + NUM + r")\)?((?:\s*(?:-|–|,|and)\s*\(?" + NUM + r"\)?)*)"),
    "claim": re.compile(r"\bClaims?\s+(" + NUM + r")((?:\s*(?:-|–|,|and)\s*" + NUM + r")*)"),
    "lemma": re.compile(r"\bLemmas?\s+(" + NUM + r")((?:\s*(?:-|–|,|and)\s*" + NUM + r")*)"),
    "def": re.compile(r"\bDef(?:inition)?\.?\s+(" + NUM + r")((?:\s*(?:-|–|,|and)\s*" + NUM + r")*)"),
    "table": re.compile(r"\bTable\s+(\d+)\b()"),
}
SEED = re.compile(r"\bseeds?\s+(\d{3})\b")
ISSUE = re.compile(r"\bissues?\s+(\d+)((?:\s*(?:,|and)\s*\d+)*)")
REF_KEY = re.compile(r"\bref\.\s*\[([a-z0-9-]+)\]")
# The design brief and the notes are not in the repository: sections 6 and 7 resolve them.
DESIGN = re.compile(r"DESIGN\.md:?\s*\"([^\"]+)\"")
NOTES = re.compile(r"\bnotes/([A-Za-z0-9_-]+\.md)")
# Another paper named on the line: a short key or an author-year citation.
OTHER_PAPER = re.compile(r"\[[a-z][a-z0-9-]*\]|\b[A-Z][a-z]+(?: et al\.| and [A-Z][a-z]+)?,? (?:19|20)\d\d\b")


def numbers(first, rest):
    """'8', '-(10)' -> ['8', '9', '10']; ranges of integers (or of x.N with one prefix) expand."""
    items = [first] + re.findall(NUM, rest)
    out = [items[0]]
    seps = re.findall(r"(-|–|,|and)\s*\(?" + NUM, rest)
    for sep, item in zip(seps, items[1:]):
        prev = out[-1]
        if sep in ("-", "–"):
            a, b = prev.rsplit(".", 1) if "." in prev else ("", prev), item.rsplit(".", 1) if "." in item else ("", item)
            (pa, na), (pb, nb) = a, b
            if pa == pb and na.isdigit() and nb.isdigit() and int(na) < int(nb) <= int(na) + 40:
                out += [(pa + "." if pa else "") + str(n) for n in range(int(na) + 1, int(nb) + 1)]
                continue
        out.append(item)
    return [n.lstrip(".") for n in out]


def load_references(path):
    text = open(path, encoding="utf-8").read()
    sections = re.split(r"^## ", text, flags=re.M)
    seeds, cited, issues, keys = set(), {}, set(), set()
    design, notes = set(), set()
    for sec in sections:
        title = sec.split("\n", 1)[0]
        rows = [r for r in sec.split("\n") if r.startswith("| ") and not r.startswith("| ---")]
        first_cells = [r.split("|")[1].strip() for r in rows]
        if title.startswith("1. The seeds"):
            seeds |= {c for c in first_cells if re.fullmatch(r"\d{3}", c)}
        m = re.match(r"\d+\. Seed (\d{3})", title)
        if m:
            got = cited.setdefault(m.group(1), set())
            for cell in first_cells + [title]:
                for kind, pat in KINDS.items():
                    for mm in pat.finditer(cell):
                        got |= {(kind, n) for n in numbers(mm.group(1), mm.group(2))}
                # A row named by its section alone ("4.1", "H.2", "4.2 (setup)") holds whatever the
                # code cites by that number.
                mm = re.match(r"(?:section\s+)?(" + NUM + r")\b", cell)
                if mm:
                    got.add(("any", mm.group(1)))
        if title.startswith("6. DESIGN.md"):
            design |= {c.strip('"') for c in first_cells}
        if title.startswith("7. The notes"):
            notes |= set(re.findall(r"notes/([A-Za-z0-9_-]+\.md)", sec))
        if title.startswith("8. Issues"):
            issues |= {c for c in first_cells if c.isdigit()}
        keys |= set(re.findall(r"^\| \[([a-z0-9-]+)\] \|", sec, flags=re.M))
    return seeds, cited, issues, keys, design, notes


def comment_of(line, ext):
    if ext in (".h", ".cpp"):
        i = line.find("//")
        return line[i + 2:] if i >= 0 else None
    i = line.find("#")
    return line[i + 1:] if i >= 0 else None


def check(repo):
    seeds, cited, issues, keys, design, notes = load_references(os.path.join(repo, "docs", "references.md"))
    problems = []
    counts = {k: 0 for k in ("seed", "eq", "claim", "lemma", "def", "table", "issue", "key", "design", "notes")}
    for top in SCAN:
        for root, _, files in os.walk(os.path.join(repo, top)):
            for f in sorted(files):
                if not f.endswith(EXTENSIONS) or f == os.path.basename(__file__):
                    continue
                path = os.path.join(root, f)
                rel = os.path.relpath(path, repo)
                ext = os.path.splitext(f)[1]
                block_seed = None  # the last seed a comment block named: its later lines continue it
                for ln, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                    c = comment_of(line, ext)
                    if not c:
                        block_seed = None
                        continue
                    where = f"{rel}:{ln}"
                    for m in SEED.finditer(c):
                        counts["seed"] += 1
                        if m.group(1) not in seeds:
                            problems.append(f"{where}: seed {m.group(1)}: not in the seeds table")
                    for kind, pat in KINDS.items():
                        for m in pat.finditer(c):
                            before = c[: m.start()]
                            named = SEED.findall(before)
                            if not named and OTHER_PAPER.search(before):
                                continue  # another paper's numbering
                            seed = named[-1] if named else (block_seed or "000")
                            for n in numbers(m.group(1), m.group(2)):
                                counts[kind] += 1
                                known = cited.get(seed, set())
                                if (kind, n) not in known and ("any", n) not in known:
                                    problems.append(f"{where}: seed {seed} {kind} {n}: no row of references.md section for seed {seed}")
                    if SEED.findall(c):
                        block_seed = SEED.findall(c)[-1]
                    for m in ISSUE.finditer(c):
                        for n in [m.group(1)] + re.findall(r"\d+", m.group(2)):
                            counts["issue"] += 1
                            if n not in issues:
                                problems.append(f"{where}: issue {n}: not in the issues table")
                    for m in DESIGN.finditer(c):
                        counts["design"] += 1
                        if not any(m.group(1).startswith(d) or d.startswith(m.group(1)) for d in design):
                            problems.append(f'{where}: DESIGN.md "{m.group(1)}": not in section 6 (the brief\'s names)')
                    for m in NOTES.finditer(c):
                        counts["notes"] += 1
                        if m.group(1) not in notes:
                            problems.append(f"{where}: notes/{m.group(1)}: not in section 7 (the notes)")
                    for m in REF_KEY.finditer(c):
                        counts["key"] += 1
                        if m.group(1) not in keys:
                            problems.append(f"{where}: ref. [{m.group(1)}]: not in the short-keys table")
    return problems, counts


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems, counts = check(repo)
    summary = ", ".join(f"{n} {k}" for k, n in counts.items())
    if problems:
        print("\n".join(problems))
        print(f"{len(problems)} citation(s) do not resolve through docs/references.md (checked: {summary})")
        return 1
    print(f"every citation resolves through docs/references.md (checked: {summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Citations a reader can follow (docs/references.md): every pointer to the theory or the history
in the prose of src/, python/, examples/, bench/ and tests/ (comments and string literals, never
code) must resolve inside the repository. Run by CTest as Structure.CitationsResolve; exits 1
listing each unresolved citation (file:line, what it cites, why), 0 otherwise.

    /usr/bin/python3 tests/check_citations.py [REPO_DIR]

What is checked, and against what:
  - "seed NNN" followed by its numbers (eq./eqs., Table, section/§, a bare section number such as
    1.2.1 or A.2.2, App./Appendix, Claim, Lemma, Def., Theorem, footnote, Fig., "Part I 0", a
    quoted section name, seed 002's "strategy s = ..."): the seed must be a row of the seeds table
    ("## 1. The seeds") and each number a row of that seed's table, whose first column names it
    (`| eq. (11) |`, `| eqs. (8)-(10) |`: a range counts for every number in it). A seed named
    with no number next to it only has to exist.
  - an equation cited without a seed ("eq. (18)", "eqs. 18-20") is seed 000's, the convention at
    the top of docs/references.md; a dotted one ("eq. 1.61") is seed 002's, the only seed that
    numbers its equations (1.N).
  - reference keys "[spectral]", "[sqrt-rule]" in a comment or a string: a bracketed lower-case
    word right after "ref." / "references.md" / "et al." (or a list of them there), any
    hyphenated one, and any the table defines; not x[i], v[seed][i], [members] or a TOML table
    name such as [grid]. The key must be a row of the short-keys table ("### 9.1").
  - "issue N" / "issues N and M": N must be a row of the issues table ("## 8. Issues").
  - docs/design.md "Section": the quoted name must be a heading of docs/design.md.
  - the design brief and its notes, which are not in the repository: any mention of
    DESIGN dot md or of the notes folder is an error, code included (cite docs/design.md or
    docs/references.md instead).
This file itself is not scanned (its docstring and patterns would cite themselves).
"""
import collections
import io
import os
import re
import sys
import tokenize

SCAN_DIRS = ["src", "python", "examples", "bench", "tests"]
EXTENSIONS = (".cpp", ".h", ".hpp", ".py", ".toml", ".sh")
SELF = os.path.join("tests", "check_citations.py")
# The summary line's order.
KINDS = ["seed", "seed eq", "seed table", "seed sec", "seed app", "seed claim", "seed lemma", "seed theorem",
         "seed def", "seed footnote", "seed fig", "seed part", "seed name", "seed strategy", "seed label", "bare eq",
         "ref key", "issue", "design.md section", "design brief / notes"]

# ---------------------------------------------------------------------------------------------------
# Prose: the comments and string literals of a file, everything else blanked.
#
# prose(text, ext) returns a string of the same length as text in which every character of code
# is replaced by SEP, comment markers and quotes by a space, and prose kept as it is. A citation
# can then run across comment lines ("seed 000\n// A.2.2") but never across code.
SEP = "\x00"


def _mask_hash(text, in_string_quotes):
    """TOML and shell: '#' comments; strings in the given quote characters."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if c == "\n":
            out.append(c)
            i += 1
            line_start = True
            continue
        if c == "#" and (line_start or i == 0 or text[i - 1] in " \t"):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " + text[i + 1:j])
            i = j
            continue
        if c in in_string_quotes:
            q = text[i:i + 3] if text[i:i + 3] in ('"""', "'''") else c
            j = i + len(q)
            while j < n and not text.startswith(q, j):
                j += 2 if (text[j] == "\\" and q.startswith('"')) else 1
            body = text[i + len(q):j]
            out.append(" " * len(q) + re.sub(r"\\.", "  ", body) + " " * len(q))
            i = min(j + len(q), n)
            line_start = False
            continue
        out.append(c if c in " \t" else SEP)
        line_start = line_start and c in " \t"
        i += 1
    return "".join(out)[:n].ljust(n, SEP)


def _mask_cpp(text):
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append("  " + text[i + 2:j])
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j
            body = re.sub(r"(?m)^(\s*)\*", r"\1 ", text[i + 2:j])
            out.append("  " + body + "  ")
            i = j + 2
        elif c == "R" and re.match(r'R"([^(\s]*)\(', text[i:]):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i + m.end())
            end = n if end < 0 else end
            out.append(" " * m.end() + text[i + m.end():end] + " " * (len(m.group(1)) + 2))
            i = end + len(m.group(1)) + 2
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"' and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " + re.sub(r"\\.", "  ", text[i + 1:j]) + " ")
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.|[^'\\\n])*'", text[i:])
            k = m.end() if m else 1
            out.append(SEP * k)
            i += k
        else:
            out.append(c if c in " \t\n" else SEP)
            i += 1
    return "".join(out)[:n].ljust(n, SEP)


def _mask_python(text):
    chars = [c if c == "\n" else SEP for c in text]
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def off(pos):
        return starts[pos[0] - 1] + pos[1]

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return _mask_hash(text, "\"'")
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            a = off(tok.start)
            chars[a] = " "
            chars[a + 1:off(tok.end)] = text[a + 1:off(tok.end)]
        elif tok.type == getattr(tokenize, "FSTRING_MIDDLE", None):  # Python >= 3.12
            chars[off(tok.start):off(tok.end)] = text[off(tok.start):off(tok.end)]
        elif tok.type == tokenize.STRING:
            a, b = off(tok.start), off(tok.end)
            s = text[a:b]
            m = re.match(r"(?i)[rbuf]*('''|\"\"\"|'|\")", s)
            q = len(m.group(0))
            body = s[q:len(s) - len(m.group(1))]
            chars[a:b] = " " * q + body + " " * len(m.group(1))
    for i, c in enumerate(text):  # whitespace inside code stays whitespace
        if chars[i] == SEP and c in " \t":
            chars[i] = c
    return "".join(chars)


def prose(text, ext):
    if ext in (".cpp", ".h", ".hpp"):
        return _mask_cpp(text)
    if ext == ".py":
        return _mask_python(text)
    return _mask_hash(text, "\"'")


# ---------------------------------------------------------------------------------------------------
# Citation items: "eq. (11)", "eqs. 18-20", "Claims 5.1-5.5", "A.2.2", ...
NUM = r"(?:[A-Z]\.)?\d+(?:\.\d+)*"
NUMP = r"(?:\(" + NUM + r"\)|" + NUM + r")"
LIST_SEP = r"\s*(?:-|–|,\s*and|,|/|and|&)\s*"


def _expand(a, b):
    """The numbers from a to b: '8'-'10' -> 8, 9, 10; '5.1'-'5.5' -> 5.1 .. 5.5; 'E.5'-'E.6'."""
    pa, pb = a.rsplit(".", 1) if "." in a else ("", a), b.rsplit(".", 1) if "." in b else ("", b)
    if pa[0] != pb[0] or not pa[1].isdigit() or not pb[1].isdigit() or int(pb[1]) < int(pa[1]) \
            or int(pb[1]) - int(pa[1]) > 200:
        return [a, b]
    pre = pa[0] + "." if pa[0] else ""
    return [pre + str(k) for k in range(int(pa[1]), int(pb[1]) + 1)]


def _shape(num):
    return "letter" if num[0].isalpha() else ("dotted" if "." in num else "int")


def parse_numlist(s, pos):
    """Numbers at s[pos:] joined by ranges and lists; returns (numbers, end). A list stops where the
    shape changes ('Claims 5.1-5.5, H.2': H.2 is not a claim)."""
    m = re.compile(NUMP).match(s, pos)
    if not m:
        return [], pos
    first = m.group(0).strip("()")
    nums, end, prev = [first], m.end(), first
    while True:
        sm = re.compile(LIST_SEP).match(s, end)
        if not sm:
            break
        nm = re.compile(NUMP + r"(?![\w/^])").match(s, sm.end())
        if not nm:
            break
        num = nm.group(0).strip("()")
        if _shape(num) != _shape(first):
            break
        if sm.group(0).strip() in ("-", "–"):
            nums.pop()
            nums.extend(_expand(prev, num))
        else:
            nums.append(num)
        prev, end = num, nm.end()
    return nums, end


KEYWORDS = [  # (regex for the word, kind)
    (r"[Ee]qs?\.\s*|[Ee]quations?\s+", "eq"),
    (r"Tables?\s+", "table"),
    (r"[Ss]ections?\s+|§\s*", "sec"),
    (r"Claims?\s+", "claim"),
    (r"Lemmas?\s+|Lemmata\s+", "lemma"),
    (r"Theorems?\s+|Thm\.\s*", "theorem"),
    (r"Defs?\.\s*|Definitions?\s+", "def"),
    (r"[Ff]ootnotes?\s+", "footnote"),
    (r"Figs?\.\s*|Figures?\s+", "fig"),
]
KEYWORD_RES = [(re.compile(r"(?:" + k + r")(?=\(?[A-Z0-9])"), kind) for k, kind in KEYWORDS]
APP_RE = re.compile(r"(?:App\.|Appendix|Appendices)\s*([A-Z](?:\.\d+)*)\b")
PART_RE = re.compile(r"Part\s+(I{1,3}|IV)\s+(?:§\s*)?(\d+)\b")
QUOTED_RE = re.compile(r'"([A-Z][A-Za-z]*(?: [A-Za-z]+){0,3})"')
STRATEGY_RE = re.compile(r"strateg(?:y|ies)\s+s\s*=\s*(\d+(?:/\d+)?)")
LABEL_RE = re.compile(r"(E\d+)\b")
BARE_RE = re.compile(r"(?=[A-Z]\.\d|\d+\.\d)")


def parse_item(s, pos):
    """One citation item at s[pos:]: (list of (kind, number), end) or (None, pos). "App. C" is an
    appendix, "App. L.2" and a bare "L.2" or "1.2.1" a section."""
    for rx, kind in KEYWORD_RES:
        m = rx.match(s, pos)
        if m:
            nums, end = parse_numlist(s, m.end())
            if nums:
                return [(kind, n) for n in nums], end
    m = APP_RE.match(s, pos)
    if m:
        label = m.group(1)
        return [("sec" if "." in label else "app", label)], m.end()
    m = PART_RE.match(s, pos)
    if m:
        return [("part", m.group(1) + " " + m.group(2))], m.end()
    m = STRATEGY_RE.match(s, pos)
    if m:
        return [("strategy", m.group(1))], m.end()
    m = QUOTED_RE.match(s, pos)
    if m:
        return [("name", m.group(1))], m.end()
    m = LABEL_RE.match(s, pos)
    if m:
        return [("label", m.group(1))], m.end()
    if BARE_RE.match(s, pos):
        nums, end = parse_numlist(s, pos)
        if nums and not re.match(r"\w|\.\d", s[end:end + 2]):
            return [("sec", n) for n in nums], end
    return None, pos


ITEM_SEP = re.compile(r"(?:'s)?(?:\s*(?:,|/|&|\band\b|\bor\b)\s*|\s+)")


def parse_chain(s, pos):
    """The items following 'seed NNN' at s[pos:]. A parenthetical right after the seed is searched
    for items up to its first ';' ("seed 004 (Tensor Programs VI, Claims 5.1-5.5)", "seed 004
    (Depth-muP, Yang et al. 2023) Claim 5.5"), and the chain goes on after it."""
    items = []
    m = re.compile(r"\s*\(").match(s, pos)
    if m:
        depth, end = 0, m.end() - 1
        while end < len(s):
            depth += {"(": 1, ")": -1}.get(s[end], 0)
            if depth == 0 or s[end] == SEP:
                break
            end += 1
        inner = s[:end].split(";", 1)[0] if ";" in s[m.end():end] else s[:end]
        i = m.end()
        while i < len(inner):
            if inner[i - 1] in " ,(/":
                got, stop = parse_item(inner, i)
                if got:  # a quoted name in there is a title or a pointer, not a section name
                    items.extend((kind, num, i) for kind, num in got if kind != "name")
                    i = stop
                    continue
            i += 1
        pos = end + 1 if end < len(s) and s[end] == ")" else end
    while True:
        sm = ITEM_SEP.match(s, pos)
        start = sm.end() if sm else pos
        got, end = parse_item(s, start)
        if not got:
            break
        items.extend((kind, num, start) for kind, num in got)
        pos = end
    return items, pos


def describe(kind, num):
    return {"eq": "eq. ({})", "table": "Table {}", "sec": "section {}", "app": "App. {}", "claim": "Claim {}",
            "lemma": "Lemma {}", "theorem": "Theorem {}", "def": "Def. {}", "footnote": "footnote {}",
            "fig": "Fig. {}", "part": "Part {}", "name": '"{}"', "strategy": "strategy s = {}",
            "label": "{}"}[kind].format(num)


# ---------------------------------------------------------------------------------------------------
# docs/references.md: which seeds, numbers, keys and issues it resolves.


def _table_first_cells(lines):
    for line in lines:
        if line.startswith("|") and not re.match(r"\|\s*-+\s*\|", line):
            cells = line.split("|")
            if len(cells) > 2:
                yield cells[1].strip()


def cell_items(cell):
    """The citations a first cell of a seed's table names: '| eqs. (8)-(10) |', '| App. K, eq. (9) |',
    '| §2 (and 2.1) |', '| "seed 002 section 5" |', '| strategies s = 0, 1/2, 1 |'."""
    cell = re.sub(r'^"seed \d{3}\s*(.*)"$', r"\1", cell.strip("`"))
    out, pos = set(), 0
    while pos < len(cell):
        if pos == 0 or cell[pos - 1] in " ,/;" or (cell[pos - 1] == "(" and not cell[pos].isdigit()):
            got, end = parse_item(cell, pos)
            if got:
                out.update(got)
                pos = end
                continue
        pos += 1
    for s in re.findall(r"strateg(?:y|ies)\s+s\s*=\s*([\d/]+(?:,\s*[\d/]+)*)", cell):
        out.update(("strategy", v.strip()) for v in s.split(","))
    return out


def load_references(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    sections, current = {}, None
    for line in text.splitlines():
        if line.startswith("## ") or line.startswith("### "):
            current = line.lstrip("#").strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    seeds, numbers, keys, issues = set(), {}, set(), set()
    for title, lines in sections.items():
        cells = list(_table_first_cells(lines))
        if re.match(r"\d+\. The seeds", title):
            seeds.update(c for c in cells if re.fullmatch(r"\d{3}", c))
        m = re.match(r"\d+\. Seed (\d{3})\b", title)
        if m:
            got = numbers.setdefault(m.group(1), set())
            for cell in cells:
                got.update(cell_items(cell))
        if re.match(r"\d+\. Issues", title):
            issues.update(c for c in cells if c.isdigit())
        if "Short keys" in title:
            keys.update(re.findall(r"\[([a-z][a-z0-9-]*)\]", " ".join(cells)))
    return seeds, numbers, keys, issues


def load_design_headings(path):
    """The headings of docs/design.md, each also without a trailing parenthetical ("Data flow of a
    sweep (TOML to report)" is cited as "Data flow of a sweep" too)."""
    with open(path, encoding="utf-8") as f:
        names = {line.lstrip("#").strip() for line in f if line.startswith("#")}
    return names | {re.sub(r"\s*\(.*\)$", "", h) for h in names}


# ---------------------------------------------------------------------------------------------------
SEED_RE = re.compile(r"\b[Ss]eeds?\s+(\d{3})\b")
BARE_EQ_RE = re.compile(r"(?<![\w.])(?:[Ee]qs?\.\s*|[Ee]quations?\s+)(?=\(?\d)")
KEY_RE = re.compile(r"(?<![\w\]])\[([a-z][a-z0-9]*(?:-[a-z0-9]+)*)\](?!\[)")
# What makes a bracketed word a reference key: "ref. [key]", "references.md [a], [b]", "Li et al.
# [surge]"; otherwise only a hyphenated word ("[sqrt-rule]") or a key the table defines.
REF_MARK_RE = re.compile(r"(?:\brefs?\.|references\.md|\bet al\.)\s*(?:\[[a-z0-9-]+\]\s*(?:,|and)\s*)*$")
ISSUE_RE = re.compile(r"\b[Ii]ssues?\s+#?(\d+)((?:\s*(?:,|and|&)\s*#?\d+)*)")
DESIGN_POINTER_RE = re.compile(r"design\.md\"?\s*(?:,\s*)?\"([^\"]+)\"")
FORBIDDEN_RE = re.compile(r"DESIGN\.md|(?<![\w.-])notes/")


def scan_file(path, rel, refs, headings, counts, errors):
    seeds, numbers, keys, issues = refs
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    line_of = []
    ln = 1
    for c in text:
        line_of.append(ln)
        ln += c == "\n"

    found = []

    def err(pos, what, why):
        line = line_of[min(pos, len(line_of) - 1)]
        found.append((line, f"{rel}:{line}: {what}: {why}"))

    for m in FORBIDDEN_RE.finditer(text):
        counts["design brief / notes"] += 1
        err(m.start(), m.group(0), "not in the repository; cite docs/design.md or docs/references.md")

    p = prose(text, os.path.splitext(path)[1])
    # Collapse whitespace (newlines and comment markers included) so a citation can wrap; keep a map
    # back to offsets in the file.
    flat, where = [], []
    prev_space = False
    for i, c in enumerate(p):
        if c in " \t\n\r":
            if not prev_space:
                flat.append(" ")
                where.append(i)
            prev_space = True
        else:
            flat.append(c)
            where.append(i)
            prev_space = False
    s = "".join(flat)

    consumed = [False] * (len(s) + 1)
    for m in SEED_RE.finditer(s):
        seed = m.group(1)
        counts["seed"] += 1
        if seed not in seeds:
            err(where[m.start()], m.group(0), "no such seed in docs/references.md \"The seeds\"")
            continue
        items, end = parse_chain(s, m.end())
        for k in range(m.start(), end):
            consumed[k] = True
        for kind, num, at in items:
            counts["seed " + kind] += 1
            if (kind, num) not in numbers.get(seed, set()):
                err(where[at], f"seed {seed} {describe(kind, num)}",
                    f"no row for it under seed {seed} in docs/references.md")
    for m in BARE_EQ_RE.finditer(s):
        if consumed[m.start()]:
            continue
        nums, end = parse_numlist(s, m.end())
        for num in nums:
            seed = "002" if re.fullmatch(r"\d+\.\d+", num) else "000"
            counts["bare eq"] += 1
            if ("eq", num) not in numbers.get(seed, set()):
                err(where[m.start()], f"eq. ({num}) (seed {seed} by convention)",
                    f"no row for it under seed {seed} in docs/references.md")
    for m in KEY_RE.finditer(s):
        key = m.group(1)
        marked = REF_MARK_RE.search(s[max(0, m.start() - 40):m.start()])
        if not (marked or "-" in key or key in keys):
            continue  # x[i], [members], a TOML table name such as [grid]: not a reference key
        counts["ref key"] += 1
        if key not in keys:
            err(where[m.start()], f"[{key}]", "no such key in docs/references.md \"Short keys\"")
    for m in ISSUE_RE.finditer(s):
        for num in [m.group(1)] + re.findall(r"\d+", m.group(2)):
            counts["issue"] += 1
            if num not in issues:
                err(where[m.start()], f"issue {num}", "no row for it in docs/references.md \"Issues\"")
    for m in DESIGN_POINTER_RE.finditer(s):
        counts["design.md section"] += 1
        if m.group(1) not in headings:
            err(where[m.start()], f'docs/design.md "{m.group(1)}"', "no such heading in docs/design.md")
    errors.extend(message for _, message in sorted(found, key=lambda f: f[0]))


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    refs = load_references(os.path.join(repo, "docs", "references.md"))
    headings = load_design_headings(os.path.join(repo, "docs", "design.md"))
    counts, errors = collections.Counter(), []
    for top in SCAN_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(repo, top)):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                if not name.endswith(EXTENSIONS) or os.path.relpath(path, repo) == SELF:
                    continue
                scan_file(path, os.path.relpath(path, repo), refs, headings, counts, errors)
    for e in errors:
        print(e)
    summary = ", ".join(f"{k} {counts[k]}" for k in KINDS + sorted(set(counts) - set(KINDS)))
    print(f"checked: {summary}")
    print(f"{len(errors)} unresolved citation(s)" if errors else "every citation resolves")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

"""examples/python/model_table.py without running a model (issue 59): the one table rendered from
given results (escaped cells, the mup-moe and quantity tags, the deciding rows with their
tolerances), a family whose library is missing reported as skipped, and the block between the
markers of a file replaced atomically, or refused with the file untouched where the markers are
missing, repeated or out of order."""
import contextlib
import importlib.util
import io
import os
import stat
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "python")


def load(stem):
    sys.path.insert(0, EXAMPLES)
    spec = importlib.util.spec_from_file_location(stem, os.path.join(EXAMPLES, stem + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MT = load("model_table")


def verdict(param, passed, failures, row, seconds):
    return {"param": param, "passed": passed, "failures": failures, "rows": 400, "row": row, "seconds": seconds,
            "lines": []}


def row(quantity, module, measured, predicted, tolerance, stable=None):
    return {"quantity": quantity, "module": module, "step": 2, "measured": measured, "predicted": predicted,
            "tolerance": tolerance, "stable": stable, "zero": False}


def result(name, param="mup", quantities=None, notes=()):
    """A fake model result: passes under param, fails under standard."""
    return {"name": name, "class": "Toy", "library": "toylib", "version": "1.2.3", "what": "a toy",
            "roles": {"hidden": 4, "embedding": 1}, "quantities": quantities, "notes": list(notes),
            "mup": verdict(param, True, 0, row("||dW||", "blocks.0.w", -0.26, 0.0, 0.41), 12.4),
            "standard": verdict("standard", False, 1, row("dh", "head", 0.93, None, 0.3, stable=False), 3.2)}


class Table(unittest.TestCase):
    def test_rows_columns_and_escapes(self):
        text = MT.mc.render_table([result("toy"), result("moe", "mup-moe", ("h", "dh"))])
        lines = text.split("\n")
        self.assertEqual(len(lines), 4)
        self.assertEqual(lines[0], "| model | library | what it has | roles found | overrides | mup (mup-moe) | standard | "
                                   "seconds (mup + standard) |")
        self.assertEqual(lines[1], "|---|---|---|---|---|---|---|---|")
        self.assertEqual(lines[2], "| `Toy` toy | toylib 1.2.3 | a toy | embedding 1, hidden 4 | none | PASS: 0 failures; "
                                   "closest \\|\\|dW\\|\\| blocks.0.w step 2: -0.26 vs +0.00 (tolerance 0.41) | "
                                   "FAIL: 1 failure; worst dh head step 2: +0.93 vs - | 12 + 3 |")
        cells = lines[3].split(" | ")
        self.assertEqual(len(cells), 8)
        self.assertTrue(cells[5].startswith("PASS (mup-moe; h, dh): 0 failures; closest"), cells[5])
        self.assertTrue(cells[6].startswith("FAIL (h, dh): 1 failure; worst"), cells[6])

    def test_expected_verdicts(self):
        ok = result("toy")
        self.assertTrue(MT.mc.expected(ok))
        ok["standard"]["passed"] = True
        self.assertFalse(MT.mc.expected(ok))
        # a model whose plan says the check fails there is expected to fail under mup
        cannot = result("resnet", notes=["conv3 ... so the check fails there (fix: ...)"])
        self.assertFalse(MT.mc.expected(cannot))
        cannot["mup"]["passed"] = False
        self.assertTrue(MT.mc.expected(cannot))


class Skipped(unittest.TestCase):
    def test_a_family_without_its_library_is_skipped_not_run(self):
        ran = []
        fam = types.SimpleNamespace(
            FAMILY="toys", DEFAULT_WIDTHS="32,64", DEFAULT_MODELS="a,b", BATCH_TEXT="1", TOLERANCE=True,
            missing=lambda n: "toylib is not importable here (ModuleNotFoundError: toylib)" if n == "b" else None,
            libraries=lambda names: "toylib 1.2.3", settings=lambda args: contextlib.nullcontext(),
            run_model=lambda name, *a: ran.append((name, a)) or result(name),
            head_line=lambda res: res["name"], note_shown=lambda n: True)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            results, skipped = MT.run_family(fam, 1, [])
        self.assertEqual([r["name"] for r in results], ["a"])
        self.assertEqual(ran, [("a", ([32, 64], 3, 3, 1e-3, 0))])
        self.assertEqual(skipped, ["b (toylib is not importable here (ModuleNotFoundError: toylib))"])
        self.assertIn("toys: skipped b", out.getvalue())
        fam.missing = lambda n: "gone"
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(MT.run_family(fam, 1, []), ([], ["a (gone)", "b (gone)"]))
        block = MT.block("made here", results, ["toys: b (gone)"])
        self.assertTrue(block.startswith("made here\n\n| model |"), block)
        self.assertTrue(block.endswith("\n\nSkipped (library not importable): toys: b (gone)."), block)


class Markers(unittest.TestCase):
    DOC = "# Title\n\ntext before\n<!-- model-table:begin -->\nold table\nold line\n<!-- model-table:end -->\ntext after\n"

    def test_replaced_between_the_markers_only(self):
        got = MT.replace_between_markers(self.DOC, "new\ntable")
        self.assertEqual(got, "# Title\n\ntext before\n<!-- model-table:begin -->\nnew\ntable\n"
                              "<!-- model-table:end -->\ntext after\n")
        self.assertEqual(MT.replace_between_markers(got, "new\ntable"), got)  # idempotent

    def test_bad_markers_are_refused(self):
        begin, end = MT.BEGIN, MT.END
        for bad in ("no markers\n", f"{begin}\nx\n", f"{end}\nx\n{begin}\n", f"{begin}\n{begin}\nx\n{end}\n",
                    f"{begin}\nx\n{end}\n{end}\n"):
            with self.assertRaises(ValueError, msg=bad):
                MT.replace_between_markers(bad, "t")

    def test_written_atomically_keeping_the_mode(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "doc.md")
            with open(path, "w") as f:
                f.write(self.DOC)
            os.chmod(path, 0o640)
            MT.write_between_markers(path, "| a |")
            with open(path) as f:
                self.assertIn("<!-- model-table:begin -->\n| a |\n<!-- model-table:end -->", f.read())
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o640)
            self.assertEqual(os.listdir(d), ["doc.md"])  # no temporary file left
            with open(path, "w") as f:
                f.write("no markers here\n")
            with self.assertRaises(ValueError):
                MT.write_between_markers(path, "| a |")
            with open(path) as f:
                self.assertEqual(f.read(), "no markers here\n")
            self.assertEqual(os.listdir(d), ["doc.md"])

    def test_write_checks_the_markers_and_all_families_before_running(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "doc.md")
            with open(path, "w") as f:
                f.write("no markers\n")
            with self.assertRaises(ValueError):
                MT.main(["--write", path])
            with self.assertRaises(SystemExit) as e:
                MT.main(["--write", path, "--families", "vision"])
            self.assertIn("--families", str(e.exception))


if __name__ == "__main__":
    unittest.main()

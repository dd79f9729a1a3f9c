"""scaleinv.store.from_records (no torch needed): records, a dict of columns and a DataFrame go
through the importer `scaleinv import-results` calls (src/brain/sweep/import_results.h), so the CLI and
Python write the same points; bad input is one scaleinv.UserError line and nothing is written."""
import csv
import io
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import unittest

import scaleinv

CSV = ("N,D,lr,bs,loss\n"
       "214663680,100000000000,0.0003453,736,2.413517\n"
       "214663680,100000000000,0.0006906,736,2.401\n"
       "2.15e9,100000000000,0.0003453,736,2.2\n"
       "2.15e9,100000000000,0.0006906,736,nan\n"
       "2.15e9,100000000000,0.0013812,736,\n")
MAPPING = dict(lr="lr", loss="loss", scales={"N": "N", "D": "D"}, hparams={"batch_size": "bs"},
               units={"N": "params", "D": "tokens"})


def points(db):
    with sqlite3.connect(db) as c:
        return c.execute("SELECT id, final_loss, diverged FROM points ORDER BY id").fetchall()


class StoreTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="scaleinv-store-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.csv = os.path.join(self.tmp, "r.csv")
        with open(self.csv, "w") as f:
            f.write(CSV)

    def cli_import(self, db):
        r = subprocess.run([os.environ.get("SCALEINV_BIN", "scaleinv"), "import-results", self.csv, "--out", db,
                            "--lr", "lr", "--loss", "loss", "--scale", "N=N", "--scale", "D=D",
                            "--hparam", "batch_size=bs", "--unit", "N=params", "--unit", "D=tokens"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_records_and_the_cli_write_the_same_points(self):
        rows = list(csv.DictReader(io.StringIO(CSV)))
        py_db = os.path.join(self.tmp, "py.db")
        s = scaleinv.store.from_records(rows, py_db, source="a test", **MAPPING)
        self.assertEqual((s["rows"], s["points"], s["diverged"], s["skipped"]), (5, 4, 1, 1))
        self.assertEqual(s["cells"]["N"], [["214663680", 2], ["2.15e9", 2]])
        self.assertIn("| N (params) | 2 |", str(s))
        cli_db = os.path.join(self.tmp, "cli.db")
        self.cli_import(cli_db)
        self.assertEqual(points(py_db), points(cli_db))
        # read back by the analysis as one sweep, the 64-bit scale as written
        rep = scaleinv.report([py_db])
        self.assertEqual(rep["rows"], 4)

    def test_a_dataframe_and_a_dict_of_columns(self):
        try:
            import pandas as pd
        except ImportError:
            self.skipTest("pandas is not installed")
        cli_db = os.path.join(self.tmp, "cli.db")
        self.cli_import(cli_db)
        df = pd.read_csv(self.csv, dtype={"N": str})  # (a float column would spell N 214663680.0: the same point)
        df = df[df["loss"].notna() | (df["lr"] != 0.0013812)]  # pandas reads the empty loss as NaN: drop it
        df_db = os.path.join(self.tmp, "df.db")
        scaleinv.store.from_records(df, df_db, **MAPPING)
        self.assertEqual(points(df_db), points(cli_db))
        cols_db = os.path.join(self.tmp, "cols.db")
        scaleinv.store.from_records({k: list(v) for k, v in df.to_dict("list").items()}, cols_db, **MAPPING)
        self.assertEqual(points(cols_db), points(cli_db))

    def test_bad_input_is_one_line_and_writes_nothing(self):
        rows = list(csv.DictReader(io.StringIO(CSV)))
        db = os.path.join(self.tmp, "bad.db")
        cases = [
            (dict(MAPPING, lr="LR"), "its columns: N, D, lr, bs, loss"),
            (dict(MAPPING, scales={"N": "bs", "D": "D"}), None),  # two rows of one point: N=736 twice at one LR
            (dict(MAPPING, scales="N"), "scales"),
            (dict(MAPPING, units={"X": "params"}), "units"),
        ]
        for kwargs, words in cases:
            with self.subTest(kwargs=repr(kwargs)):
                with self.assertRaises(scaleinv.UserError) as cm:
                    scaleinv.store.from_records(rows, db, **kwargs)
                msg = str(cm.exception)
                self.assertEqual(len(msg.splitlines()), 1, msg)
                self.assertIn("fix:", msg)
                if words:
                    self.assertIn(words, msg)
                self.assertEqual(sorted(os.listdir(self.tmp)), ["r.csv"])
        bad = [dict(r) for r in rows]
        bad[1]["loss"] = "oops"
        with self.assertRaises(scaleinv.UserError) as cm:
            scaleinv.store.from_records(bad, db, **MAPPING)
        self.assertIn("data row 2", str(cm.exception))
        self.assertIn("'oops'", str(cm.exception))
        self.assertIn("scaleinv.store.from_records", str(cm.exception))
        for records in ([], 3, [1, 2]):
            with self.assertRaises(scaleinv.UserError):
                scaleinv.store.from_records(records, db, **MAPPING)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["r.csv"])

    def test_import_scaleinv_store_needs_no_torch(self):
        code = "import sys, scaleinv; scaleinv.store.from_records; print('torch' in sys.modules)"
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "False")


if __name__ == "__main__":
    unittest.main()

"""The README's benchmark table holds only figures that a committed results file holds
(issue #26: reruns quoted from memory, a CPU figure from an older run). Each number in the
table's figure columns (Umbra, nginx, Varnish and the two ratios; not the targets) must
appear in one of the files under bench/results/ that git tracks, as the same value at the
precision the README gives it."""

import os
import re
import subprocess
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")


def table_rows(readme):
    """The cells of each data row of the table under '## Benchmarks'."""
    section = readme.split("\n## Benchmarks", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| ---") and "scenario (" not in line:
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def figures(cell):
    """The numbers of a figure cell, without what a backtick quotes (commands, settings) and
    without a parenthesis's explanation (bench/readme.py's account of a capped anchor derives
    its requests per connection from the results file's figures)."""
    cell = re.sub(r"`[^`]*`", "", cell)
    cell = re.sub(r"\([^()]*\)", "", cell)
    return NUMBER.findall(cell)


def known_values(text):
    """Every number of the results files, as written and as floats."""
    vals = set()
    for n in NUMBER.findall(text):
        try:
            vals.add(float(n.replace(",", "")))
        except ValueError:
            pass
    return vals


def appears(fig, vals):
    """fig (as the README writes it) is some value of vals at fig's precision."""
    digits = len(fig.split(".")[1]) if "." in fig else 0
    want = float(fig.replace(",", ""))
    half = 0.5 * 10 ** -digits + 1e-9  # either way of rounding a half
    return any(abs(v - want) <= half for v in vals)


class BenchFiguresTest(unittest.TestCase):
    def test_every_figure_is_in_a_committed_results_file(self):
        files = subprocess.run(["git", "-C", ROOT, "ls-files", "bench/results"],
                               stdout=subprocess.PIPE, check=True).stdout.decode().split()
        self.assertTrue(files, "no committed results file")
        text = ""
        for f in files:
            with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
                text += fh.read() + "\n"
        vals = known_values(text)
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
            rows = table_rows(fh.read())
        self.assertGreater(len(rows), 20, "the benchmark table was not found")
        missing = []
        for row in rows:
            for cell in row[1:6]:
                for fig in figures(cell):
                    if not appears(fig, vals):
                        missing.append("%s: %s (in %r)" % (row[0], fig, cell))
        self.assertEqual(missing, [], "figures in the README that no committed results file "
                         "holds:\n" + "\n".join(missing))

    def test_a_figure_from_nowhere_is_caught(self):
        vals = known_values("| x | 243204.11 | 1.84 |")
        self.assertTrue(appears("243,204", vals))
        self.assertTrue(appears("1.84", vals))
        self.assertFalse(appears("243,360", vals))
        self.assertFalse(appears("1.08", vals))


if __name__ == "__main__":
    unittest.main()

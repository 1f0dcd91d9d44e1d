"""The README's benchmark figures cannot drift from the committed results (issue 26): the
section between `<!-- bench: begin -->` and `<!-- bench: end -->` is exactly what
bench/readme.py makes from bench/results/ (the run of every scenario and the reruns); a
rerun's rows stand below the first run's; a row whose anchor stopped at its own limit
(nginx's keepalive_requests on HTTP/2) gives no ratio. Needs no benchmark tool and no
server: it reads files."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

SRC = os.environ.get("UMBRA_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(SRC, "bench", "readme.py")


def load_readme_module():
    spec = importlib.util.spec_from_file_location("bench_readme", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def readme_section():
    with open(os.path.join(SRC, "README.md"), encoding="utf-8") as f:
        text = f.read()
    b, e = text.index("<!-- bench: begin -->"), text.index("<!-- bench: end -->")
    return text[b + len("<!-- bench: begin -->") + 1:e]


def table_row(text, label_start):
    for ln in text.split("\n"):
        if ln.startswith("| " + label_start):
            return [c.strip() for c in ln.strip().strip("|").split(" | ")]
    raise AssertionError("no row starting %r" % label_start)


class BenchReadme(unittest.TestCase):
    def test_readme_is_the_scripts_output(self):
        out = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        self.assertEqual(readme_section(), out,
                         "README.md's benchmark section is not bench/readme.py's output: "
                         "run bench/readme.py --write")
        chk = subprocess.run([sys.executable, SCRIPT, "--check"], capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(chk.returncode, 0, chk.stdout + chk.stderr)

    def test_check_fails_on_a_changed_figure(self):
        # A copy of the tree's README, results and script, with one figure changed in the
        # README: --check must fail and name it.
        with tempfile.TemporaryDirectory() as tmp:
            os.mkdir(os.path.join(tmp, "bench"))
            shutil.copy(SCRIPT, os.path.join(tmp, "bench", "readme.py"))
            shutil.copytree(os.path.join(SRC, "bench", "results"),
                            os.path.join(tmp, "bench", "results"))
            with open(os.path.join(SRC, "README.md"), encoding="utf-8") as f:
                text = f.read()
            row = table_row(readme_section(), "static 1 KiB")
            changed = text.replace("| " + row[4] + " |", "| 9.99 |", 1)
            self.assertNotEqual(changed, text)
            with open(os.path.join(tmp, "README.md"), "w", encoding="utf-8") as f:
                f.write(changed)
            chk = subprocess.run([sys.executable, os.path.join(tmp, "bench", "readme.py"),
                                  "--check"], capture_output=True, text=True, timeout=60)
            self.assertEqual(chk.returncode, 1)
            self.assertIn("9.99", chk.stdout)

    def test_capped_h2_rows_give_no_ratio(self):
        # The committed run's nginx echo rounds are 10 connections x keepalive_requests
        # 100000 in 6 s: 166,666.67 req/s, nginx's limit. The README must not present a
        # ratio for them.
        sec = readme_section()
        echo = table_row(sec, "HTTP/2 over TLS")
        self.assertNotIn("4.35", sec)
        self.assertIn("to be re-measured", echo[4])
        self.assertIn("keepalive_requests 100,000", echo[2])
        hit1k = table_row(sec, "HTTP/2: 1 KiB cache hit")
        self.assertIn("to be re-measured", hit1k[4])
        # The 1 MiB hit's rounds are far from the limit: their ratio stands.
        hit1m = table_row(sec, "HTTP/2: 1 MiB cache hit")
        self.assertRegex(hit1m[4], r"^[0-9]+\.[0-9]+$")

    def test_figures_without_a_results_file_are_gone(self):
        # Figures of reruns and runs that no committed file holds (issue 26).
        sec = readme_section()
        for gone in ("243,360", "224,408", "239,363", "236,693", "61,000", "41,000",
                     "1.24 in the last run", "4.1-4.3"):
            self.assertNotIn(gone, sec)

    def test_rerun_stands_beside_the_first_run(self):
        mod = load_readme_module()
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(os.path.join(SRC, "bench", "results", "README.md"),
                        os.path.join(tmp, "README.md"))
            os.mkdir(os.path.join(tmp, "reruns"))
            # The committed run's h2 section as a scenario file of its own, with the limit
            # out of reach and nginx's echo at another figure.
            run = mod.Results(os.path.join(tmp, "README.md"))
            h2 = run.sections["h2"].lines
            body = []
            for ln in h2:
                ln = ln.replace("keepalive_requests 100000;", "keepalive_requests 1000000000;")
                if ln.startswith("| h2/echo | nginx |"):
                    ln = ("| h2/echo | nginx | 200000.00 | req/s | - | - | - | 90 | 4.0 | 80 | "
                          "200000.00 210000.00 190000.00 | none |")
                if ln.startswith("| h2/echo | umbra |"):
                    ln = ln.replace("| 4.35 |", "| 3.62 |")
                body.append(re.sub(r"^#(#+) ", r"\1 ", ln))
            with open(os.path.join(tmp, "reruns", "h2-2026-12-06-010203.md"), "w",
                      encoding="utf-8") as f:
                f.write("# h2: Umbra vs nginx speaking HTTP/2 over TLS\n\n"
                        "- command: `ROUNDS=5 DURATION=10 bench/run --rerun h2`\n"
                        "- rerun: the h2 scenario only\n" + "\n".join(body) + "\n")
            out = mod.section(tmp)
        lines = out.split("\n")
        first = [i for i, ln in enumerate(lines) if ln.startswith("| HTTP/2 over TLS")]
        self.assertEqual(len(first), 1)
        # The first run's row stays, the rerun's comes right below it.
        self.assertIn("to be re-measured", lines[first[0]])
        rerun = [c.strip() for c in lines[first[0] + 1].strip().strip("|").split(" | ")]
        self.assertTrue(rerun[0].startswith("↳ rerun"), rerun[0])
        self.assertEqual(rerun[4], "3.62")
        self.assertEqual(rerun[2], "200,000 req/s")
        # Its command and commit are listed.
        self.assertIn("`ROUNDS=5 DURATION=10 bench/run --rerun h2`", out)
        self.assertIn("h2-2026-12-06-010203.md", out)
        # Rows of scenarios not rerun get no rerun row.
        static = [i for i, ln in enumerate(lines) if ln.startswith("| static 1 KiB")][0]
        self.assertFalse(lines[static + 1].startswith("| ↳"))


if __name__ == "__main__":
    unittest.main()

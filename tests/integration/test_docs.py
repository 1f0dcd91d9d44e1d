"""The documentation cannot drift from the program: every setting the configuration loader
knows (build/tests/umbra-settings prints them from the loader's own key lists) is described
in umbra.lua(5) and in the README's reference; the version is one (CMakeLists.txt's
project VERSION, which umbra -v prints, and which debian/changelog and the man pages'
headers must say too); both man pages render with `man --warnings` without a warning."""

import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from umbra_harness import source_dir, umbra_bin  # noqa: E402

SRC = source_dir()
MAN_PAGES = ("man/umbra.8", "man/umbra.lua.5")


def read(rel):
    with open(os.path.join(SRC, rel), encoding="utf-8") as f:
        return f.read()


def settings_bin():
    """umbra-settings beside the test origin (build/tests/), else beside the binary."""
    cands = [os.path.join(os.path.dirname(os.path.abspath(umbra_bin())), "tests",
                          "umbra-settings")]
    origin = os.environ.get("UMBRA_TEST_ORIGIN")
    if origin:
        cands.insert(0, os.path.join(os.path.dirname(origin), "umbra-settings"))
    for c in cands:
        if os.access(c, os.X_OK):
            return c
    raise AssertionError("umbra-settings not found (CMake builds it with the tests): %s"
                         % cands)


def known_settings():
    out = subprocess.run([settings_bin()], capture_output=True, check=True, timeout=30)
    names = out.stdout.decode().split()
    assert len(names) > 50, names  # the loader knows far more than a handful
    return names


def roff_text(text):
    """The words of a roff source, without font escapes, comments and requests' names."""
    lines = []
    for line in text.splitlines():
        if line.startswith('.\\"'):
            continue
        line = re.sub(r"^\.(B|BR|BI|I|IR|RB|TP|PP|SH|SS|TH|RS|RE|nf|fi)\b ?", "", line)
        line = re.sub(r"\\f[BIRP]", "", line).replace("\\-", "-").replace("\\(dq", '"')
        lines.append(line.replace('"', " "))
    return "\n".join(lines)


def mentioned(text, name):
    """name as a term of its own in text (not part of a longer name)."""
    return re.search(r"(?<![\w.\[\]])" + re.escape(name) + r"(?![\w\[])", text) is not None


def cmake_version():
    m = re.search(r"^project\(umbra VERSION (\d+\.\d+\.\d+)", read("CMakeLists.txt"), re.M)
    assert m, "no project(umbra VERSION x.y.z) in CMakeLists.txt"
    return m.group(1)


class SettingsDocumentedTest(unittest.TestCase):
    def test_every_setting_is_in_umbra_lua_5(self):
        text = roff_text(read("man/umbra.lua.5"))
        missing = [s for s in known_settings() if not mentioned(text, s)]
        self.assertEqual(missing, [], "settings the loader knows that man/umbra.lua.5 does "
                         "not describe")

    def test_every_setting_is_in_the_readme(self):
        readme = read("README.md")
        # The route keys are the rows of the README's route table.
        table = readme[readme.index("\nA route:"):readme.index("\nRoutes are matched")]
        missing = []
        for s in known_settings():
            if re.search(r"`" + re.escape(s) + r"[`.]", readme):
                continue
            m = re.fullmatch(r"routes\[N\]\.(\w+)", s)
            if m and re.search(r"^\|.*`%s`.*\|" % m.group(1), table, re.M):
                continue
            missing.append(s)
        self.assertEqual(missing, [], "settings the loader knows that README.md does not "
                         "describe")

    def test_every_key_table_the_loader_checks_is_listed(self):
        # A new table of keys must reach um_config_settings, or its keys would escape the
        # two tests above: the loader's own in src/config/settings.c, a module's in the
        # tables of its struct um_settings (umbra/settings.h), in the folder that reads them.
        listed = read("src/config/settings.c")
        used = []
        for folder in os.listdir(os.path.join(SRC, "src")):
            d = os.path.join(SRC, "src", folder)
            texts = []
            for name in os.listdir(d) if os.path.isdir(d) else []:
                if name.endswith(".c"):
                    with open(os.path.join(d, name)) as f:
                        texts.append(f.read())
            tables = "".join(re.findall(r"struct um_settings_table \w+\[\] = \{(.*?)\};",
                                        "".join(texts), re.S))
            # (um__cfg_route_keys_all(): the route keys and the modules' route keys)
            for k in re.findall(r"um_settings_check_keys\([^;]*?,\s*(\w+)(?:\(\))?\)",
                                "".join(texts)):
                k = re.sub(r"_all$", "", k)
                used.append((folder, k, folder == "config" and mentioned(listed, k)
                             or mentioned(tables, k)))
        self.assertTrue([u for u in used if u[0] == "config"], "no check_keys call in src/config")
        self.assertTrue([u for u in used if u[0] == "compress"], "none in src/compress")
        self.assertEqual(sorted(k for _, k, ok in used if not ok), [])

    def test_the_check_sees_a_missing_setting(self):
        # The check itself: a name the man page lacks is reported.
        self.assertFalse(mentioned(roff_text(read("man/umbra.lua.5")), "limits.no_such_key"))
        self.assertFalse(mentioned("routes[N].path", "path"))
        self.assertTrue(mentioned(roff_text(".B limits.max_connections\n"),
                                  "limits.max_connections"))


class VersionTest(unittest.TestCase):
    def test_one_version_everywhere(self):
        v = cmake_version()
        m = re.match(r"umbra \(([^)]+)\)", read("debian/changelog"))
        self.assertTrue(m, "debian/changelog does not start with 'umbra (VERSION)'")
        self.assertEqual(m.group(1), v, "debian/changelog and CMakeLists.txt disagree")
        for page in MAN_PAGES:
            th = re.search(r'^\.TH .* "umbra ([^"]+)"', read(page), re.M)
            self.assertTrue(th, page)
            self.assertEqual(th.group(1), v, page)

    def test_v_prints_version_commit_and_libraries(self):
        r = subprocess.run([umbra_bin(), "-v"], capture_output=True, timeout=10)
        self.assertEqual(r.returncode, 0)
        out = r.stdout.decode()
        self.assertRegex(out, r"^umbra %s \(commit ([0-9a-f]{7,}(-dirty)?|unknown)\)\n"
                         % re.escape(cmake_version()))
        self.assertRegex(out, r"\nOpenSSL: OpenSSL 3\.")
        self.assertRegex(out, r"\nLuaJIT: LuaJIT 2\.")
        self.assertRegex(out, r"\nlibcurl: libcurl/\d+\.\d+")

    def test_v_names_a_commit_of_the_tree(self):
        # The commit the binary was built from: HEAD, or one before it when the binary was
        # built before the last commit (ctest does not rebuild).
        if subprocess.run(["git", "-C", SRC, "rev-parse", "HEAD"], capture_output=True,
                          timeout=10).returncode != 0:
            self.skipTest("not a git checkout: no commit to compare")
        out = subprocess.run([umbra_bin(), "-v"], capture_output=True, timeout=10).stdout
        m = re.match(r"umbra \S+ \(commit ([0-9a-f]+)(-dirty)?\)", out.decode())
        self.assertTrue(m, out)
        r = subprocess.run(["git", "-C", SRC, "merge-base", "--is-ancestor", m.group(1), "HEAD"],
                           capture_output=True, timeout=10)
        self.assertEqual(r.returncode, 0, "umbra -v names %s, not a commit of this tree's "
                         "history" % m.group(1))


class ManPagesTest(unittest.TestCase):
    def test_pages_render_without_warnings(self):
        # third_party/install.sh installs man-db: under CI (CI set) a missing man is a
        # failure, not a skip; elsewhere tests/package/run checks the rendering too.
        if not shutil.which("man"):
            if os.environ.get("CI"):
                self.fail("man is not installed under CI: third_party/install.sh installs man-db")
            self.skipTest("man is not installed (man-db): third_party/install.sh installs it")
        for page in MAN_PAGES:
            r = subprocess.run(["man", "--warnings", "-l", os.path.join(SRC, page)],
                               capture_output=True, timeout=30,
                               env=dict(os.environ, MANWIDTH="80"))
            self.assertEqual(r.returncode, 0, page)
            self.assertEqual(r.stderr.decode(), "", page)
            self.assertIn("SYNOPSIS", r.stdout.decode(), page)


if __name__ == "__main__":
    unittest.main()

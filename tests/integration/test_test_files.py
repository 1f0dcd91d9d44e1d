#!/usr/bin/env python3
"""A test of the tests: no test is defined where it never runs.

unittest.main() inside `if __name__ == "__main__":` runs the tests defined above it and
exits: a class or test function written below that block is never collected (as
test_http1.py's ConcurrencyTest was, issue #26). This parses every
tests/integration/test_*.py and fails on any class, def or assignment that follows the
main block."""
import ast
import glob
import os
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def is_main_block(node):
    """`if __name__ == "__main__":` (either side of the comparison)."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    sides = [node.test.left] + list(node.test.comparators)
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    consts = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and consts == ["__main__"]


def after_main(source, filename):
    """The (line, description) of every statement after the main block, or [] when the
    main block is last; None when there is no main block."""
    body = ast.parse(source, filename).body
    for i, node in enumerate(body):
        if is_main_block(node):
            return [(n.lineno, type(n).__name__ + (" " + n.name if hasattr(n, "name") else ""))
                    for n in body[i + 1:]]
    return None


class TestFilesTest(unittest.TestCase):
    def test_nothing_after_unittest_main(self):
        files = sorted(glob.glob(os.path.join(HERE, "test_*.py")))
        self.assertGreater(len(files), 10, "the integration tests were not found")
        bad = {}
        for path in files:
            with open(path, encoding="utf-8") as f:
                found = after_main(f.read(), path)
            name = os.path.basename(path)
            if found is None:
                bad[name] = "no `if __name__ == \"__main__\": unittest.main()` block"
            elif found:
                bad[name] = "defined after the main block, never run: %s" % found
        self.assertEqual(bad, {})

    def test_the_check_sees_a_late_class(self):
        # The check itself: a class after the main block is reported, one before is not.
        late = "import unittest\nif __name__ == '__main__':\n    unittest.main()\n\n" \
               "class LateTest(unittest.TestCase):\n    def test_x(self):\n        pass\n"
        self.assertEqual(after_main(late, "late.py"), [(5, "ClassDef LateTest")])
        ok = "import unittest\nclass T(unittest.TestCase):\n    pass\n\n" \
             "if __name__ == '__main__':\n    unittest.main()\n"
        self.assertEqual(after_main(ok, "ok.py"), [])


if __name__ == "__main__":
    unittest.main()

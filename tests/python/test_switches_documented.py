"""docs/switches.md lists every DEEPINFER_* environment variable the engine reads, and nothing else.

The engine's names: every "DEEPINFER_..." string literal in the C++ / CUDA sources under src/ and include/ (lines
that are // comments skipped), and every quoted DEEPINFER_... name in the Python package under python/. The
documented names: the first column of docs/switches.md's tables. The test fails naming each undocumented switch
and each documented one that no longer exists. Runs under CTest (python/CMakeLists.txt globs tests/python/test_*.py)
or directly: python3 tests/python/test_switches_documented.py."""
import os
import re
import unittest

ROOT = os.environ.get("DEEPINFER_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "switches.md")

CPP_EXTENSIONS = (".h", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh")
NAME = r"DEEPINFER_[A-Z0-9_]+"
CPP_LITERAL = re.compile(r'"(' + NAME + r')"')
PY_LITERAL = re.compile(r"""["'](""" + NAME + r""")["']""")


def source_files(folder, extensions):
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, folder)):
        dirnames.sort()
        for f in sorted(filenames):
            if f.endswith(extensions):
                yield os.path.join(dirpath, f)


def names_in_code(text, literal, comment_prefixes):
    """The quoted DEEPINFER_* names of `text`, skipping lines that are whole comments."""
    found = set()
    for line in text.splitlines():
        if line.lstrip().startswith(comment_prefixes):
            continue
        found.update(literal.findall(line))
    return found


def engine_switches():
    """{name: first file that reads it} over src/, include/ and python/."""
    where = {}

    def add(path, names):
        for n in sorted(names):
            where.setdefault(n, os.path.relpath(path, ROOT))

    for folder in ("src", "include", "python"):
        for path in source_files(folder, CPP_EXTENSIONS):
            with open(path, encoding="utf-8", errors="replace") as f:
                add(path, names_in_code(f.read(), CPP_LITERAL, ("//",)))
    for path in source_files("python", (".py",)):
        with open(path, encoding="utf-8", errors="replace") as f:
            add(path, names_in_code(f.read(), PY_LITERAL, ("#",)))
    return where


def documented_switches(text):
    """The names in the first column of the markdown tables of `text`, as a list (duplicates kept)."""
    names = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = line.strip().strip("|").split("|")
        names.extend(re.findall(NAME, cells[0]))
    return names


def differences(code, documented):
    """The messages for every name in one set and not the other (empty: the two agree)."""
    messages = []
    for n in sorted(set(code) - set(documented)):
        where = code[n] if isinstance(code, dict) else "the sources"
        messages.append(f"undocumented: {n} (read in {where}); add a row to docs/switches.md")
    for n in sorted(set(documented) - set(code)):
        messages.append(f"documented but not read anywhere: {n}; remove its row from docs/switches.md")
    return messages


class SwitchesDocumented(unittest.TestCase):
    def setUp(self):
        with open(DOC, encoding="utf-8") as f:
            self.doc = f.read()

    def test_every_switch_has_a_row_and_every_row_a_switch(self):
        code = engine_switches()
        self.assertGreater(len(code), 0, "no DEEPINFER_* name found under " + ROOT)
        documented = documented_switches(self.doc)
        messages = differences(code, documented)
        self.assertEqual(messages, [], "\n" + "\n".join(messages))

    def test_one_row_per_switch(self):
        documented = documented_switches(self.doc)
        twice = sorted({n for n in documented if documented.count(n) > 1})
        self.assertEqual(twice, [], "documented in more than one row: " + ", ".join(twice))

    def test_the_comparison_names_both_directions(self):
        # The check itself: a missing row and a stale row are both reported.
        doc = "| Variable | Values |\n|---|---|\n| `DEEPINFER_A` | `0` |\n| `DEEPINFER_GONE` | `1` |\n"
        code = {"DEEPINFER_A": "src/a.cpp", "DEEPINFER_NEW": "src/b.cu"}
        messages = differences(code, documented_switches(doc))
        self.assertEqual(len(messages), 2, messages)
        self.assertIn("undocumented: DEEPINFER_NEW (read in src/b.cu)", messages[0])
        self.assertIn("documented but not read anywhere: DEEPINFER_GONE", messages[1])
        # Names in other columns (e.g. "needs DEEPINFER_X on") are not rows.
        self.assertEqual(documented_switches("| `DEEPINFER_A` | needs `DEEPINFER_B` |\n"), ["DEEPINFER_A"])
        # Whole-line comments do not count as reads; code lines do.
        text = '// EnvSwitch<bool> g{"DEEPINFER_EXAMPLE", parse};\nstd::getenv("DEEPINFER_REAL");\n'
        self.assertEqual(names_in_code(text, CPP_LITERAL, ("//",)), {"DEEPINFER_REAL"})


if __name__ == "__main__":
    unittest.main()

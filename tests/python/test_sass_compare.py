"""tools/gpu/sass_compare.py on small hand-written listings (the shape tools/gpu/sass.sh writes): identical kernels,
a kernel renamed by a template argument, a kernel that differs only in an immediate (a moved global symbol's
offset), a kernel whose code changed, a kernel gone and one new; the exit status is 1 whenever an existing kernel
differs or is gone, 0 otherwise."""
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(os.environ.get("DEEPINFER_SOURCE_DIR", "."), "tools/gpu/sass_compare.py")


def listing(kernels):
    """A SASS listing: {name: [instruction]} as `.text.<name>:` sections of addressed instruction lines."""
    lines = []
    for name, code in kernels.items():
        lines.append(f".text.{name}:")
        for i, ins in enumerate(code):
            lines.append(f"        /*{i * 16:04x}*/                   {ins} ;   /* 0x000fe20000000f00 */")
    return "\n".join(lines) + "\n"


def compare(before, after):
    with tempfile.TemporaryDirectory() as d:
        paths = [os.path.join(d, "before.sass"), os.path.join(d, "after.sass")]
        for path, kernels in zip(paths, (before, after)):
            with open(path, "w") as f:
                f.write(listing(kernels))
        run = subprocess.run([sys.executable, TOOL, *paths], capture_output=True, text=True, timeout=60)
        return run.returncode, run.stdout


BASE = {
    "_Z4copyPf": ["MOV R1, c[0x0][0x28]", "LDG.E R2, [R4.64]", "STG.E [R6.64], R2", "EXIT"],
    "_Z6selectIiEvPf": ["UIADD3 UR5, UR5, 0x860, URZ", "BRA `(.L_x_12)", "EXIT"],
}


class SassCompare(unittest.TestCase):
    def test_identical(self):
        status, out = compare(BASE, BASE)
        self.assertEqual(status, 0, out)
        self.assertIn("0 differ or are gone (0 in immediates only), 0 new", out)

    def test_renamed_and_relabelled_is_the_same(self):
        after = {"_Z4copyPfi": BASE["_Z4copyPf"],  # a template argument added renames the kernel
                 "_Z6selectIiEvPf": ["UIADD3 UR5, UR5, 0x860, URZ", "BRA `(.L_x_40)", "EXIT"]}  # labels renumbered
        status, out = compare(BASE, after)
        self.assertEqual(status, 0, out)
        self.assertIn("renamed, same instructions: _Z4copyPf -> _Z4copyPfi", out)

    def test_immediates_only(self):
        after = dict(BASE, _Z6selectIiEvPf=["UIADD3 UR5, UR5, 0x880, URZ", "BRA `(.L_x_12)", "EXIT"])
        status, out = compare(BASE, after)
        self.assertEqual(status, 1, out)
        self.assertIn("differs in immediates only: _Z6selectIiEvPf (3 instructions; 0x860 -> 0x880 x1)", out)
        self.assertIn("1 differ or are gone (1 in immediates only)", out)

    def test_code_change_gone_and_new(self):
        after = {"_Z4copyPf": ["MOV R1, c[0x0][0x28]", "LDG.E R3, [R4.64]", "STG.E [R6.64], R3", "EXIT"],
                 "_Z3newv": ["EXIT"]}
        status, out = compare(BASE, after)
        self.assertEqual(status, 1, out)
        self.assertIn("differs: _Z4copyPf (4 -> 4 instructions; first at 1: LDG.E R2, [R4.64] -> LDG.E R3, [R4.64])",
                      out)
        self.assertIn("only before: _Z6selectIiEvPf", out)
        self.assertIn("new: _Z3newv (1 instructions)", out)
        self.assertIn("2 differ or are gone (0 in immediates only), 1 new", out)


if __name__ == "__main__":
    unittest.main()

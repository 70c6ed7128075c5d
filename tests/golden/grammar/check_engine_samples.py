#!/usr/bin/env python3
"""Independent check of constrained sampling in the engine (issue 6).

Runs the StructuredEngine tests of test_runtime (v4_tiny + a byte-level tokenizer, seeded sampling under
JSON-schema and DSML tool-call grammars), then checks every finished sample without our code:
  * JSON schema samples: json.loads + jsonschema (Draft 2020-12, FormatChecker);
  * DSML samples: parsed here by a separate regex parser (tag spelling per version: V4 `<｜DSML｜invoke`,
    V4.1 `<｜DSML｜ invoke`), compared with what our output parser returned, and each call's arguments
    validated with jsonschema against its tool's parameter schema.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import jsonschema

D = "｜DSML｜"


def parse_dsml(text, version):
    sp = " " if version == "v4.1" else ""
    block = " calls" if version == "v4.1" else "tool_calls"
    inv = re.compile(re.escape("<" + D + sp + "invoke name=\"") + r'([^"]+)">\n(.*?)' +
                     re.escape("</" + D + sp + "invoke>"), re.S)
    par = re.compile(re.escape("<" + D + sp + "parameter name=\"") + r'([^"]+)" string="(true|false)">(.*?)' +
                     re.escape("</" + D + sp + "parameter>"), re.S)
    calls = []
    for m in inv.finditer(text):
        args = {}
        for p in par.finditer(m.group(2)):
            args[p.group(1)] = p.group(3) if p.group(2) == "true" else json.loads(p.group(3))
        calls.append({"name": m.group(1), "arguments": args})
    closing = "</" + D + block + ">"
    return calls, closing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "samples.json")
        env = dict(os.environ, DEEPINFER_GRAMMAR_SAMPLES=out)
        r = subprocess.run([args.binary, "--gtest_filter=StructuredEngine.JsonSchema*:StructuredEngine.Dsml*"],
                           env=env, capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout[-4000:], r.stderr[-2000:])
            return 1
        samples = json.load(open(out, encoding="utf-8"))
    fmt = jsonschema.FormatChecker()
    n_json = n_calls = n_dsml = 0
    errors = []
    for i, s in enumerate(samples):
        if s["kind"] == "json":
            try:
                jsonschema.validate(json.loads(s["text"]), s["schema"], format_checker=fmt)
                n_json += 1
            except Exception as e:  # noqa: BLE001
                errors.append(f"sample {i}: {s['text']!r}: {e}")
            continue
        n_dsml += 1
        calls, closing = parse_dsml(s["text"], s["version"])
        if s["tool_choice"] == "required" and not (calls and s["text"].endswith("\n" + closing)):
            errors.append(f"sample {i}: no complete tool-call block: {s['text']!r}")
        if calls != s["calls"]:
            errors.append(f"sample {i}: our parser {s['calls']} != independent parse {calls}")
        tools = {t["function"]["name"]: t["function"] for t in s["tools"]}
        for c in calls:
            schema = tools[c["name"]].get("parameters", {"type": "object"})
            try:
                jsonschema.validate(c["arguments"], schema, format_checker=fmt)
                n_calls += 1
            except Exception as e:  # noqa: BLE001
                errors.append(f"sample {i}: call {c}: {e}")
    print(f"json samples valid: {n_json}; dsml samples: {n_dsml}, tool calls valid: {n_calls}; errors: {len(errors)}")
    for e in errors[:20]:
        print(e)
    if errors or n_json < 20 or n_calls < 16:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

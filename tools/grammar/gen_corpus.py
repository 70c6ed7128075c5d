#!/usr/bin/env python3
"""Deterministic corpus of JSON schemas (plus a few regexes / EBNF grammars) for the structured-output engine.

    python3 tools/grammar/gen_corpus.py --count 520 --seed 1 --out corpus.jsonl [--hard-only]

Each line: {"id", "kind": "json"|"regex"|"ebnf", "source": text, "anchor": bool}. anchor = false marks cases
whose language is known to differ from the anchors by design (see EXPECTED_DIFFERENCES in run_corpus.py),
e.g. string formats, where every engine picks its own regular approximation.
Generated schemas always set additionalProperties: false so the three engines agree on the language.
"""
import argparse
import json
import random

WORDS = ["name", "id", "age", "email", "tags", "items", "value", "count", "kind", "status", "url", "price",
         "title", "notes", "enabled", "score", "owner", "created", "level", "x", "y", "label", "über", "日本",
         "a b", "quote\"d", "back\\slash", "data", "meta", "z"]
STR_ENUMS = ["red", "green", "blue", "ok", "fail", "über", "日本語", "a\"b", "tab\tx", "x y", "", "null"]
PATTERNS = ["^[a-z]+$", "^[A-Z][a-z]{1,8}$", "^\\d{3}-\\d{4}$", "^(foo|bar|baz)+$", "^[0-9a-f]{8}$",
            "^[a-zA-Z_][a-zA-Z0-9_]*$", "^\\w+@\\w+\\.com$", "^v\\d+(\\.\\d+){0,2}$", "^[^,]{0,10}$"]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def scalar(self):
        r = self.r
        k = r.randrange(12)
        if k == 0:
            return {"type": "string"}
        if k == 1:
            s = {"type": "string"}
            lo = r.randrange(0, 4)
            s["minLength"] = lo
            s["maxLength"] = lo + r.randrange(0, 12)
            return s
        if k == 2:
            return {"type": "string", "pattern": r.choice(PATTERNS)}
        if k == 3:
            return {"type": "integer"}
        if k == 4:
            lo = r.randrange(-1000, 1000)
            s = {"type": "integer", "minimum": lo}
            if r.random() < 0.7:
                s["maximum"] = lo + r.randrange(0, 5000)
            return s
        if k == 5:
            return {"type": "number"}
        if k == 6:
            return {"type": "boolean"}
        if k == 7:
            return {"enum": r.sample(STR_ENUMS, r.randrange(1, 5))}
        if k == 8:
            return {"const": r.choice([1, "fixed", True, None, 2.5, "日本"])}
        if k == 9:
            return {"type": ["string", "null"]}
        if k == 10:
            return {"enum": [1, 2, 3, "x", None, True][: r.randrange(2, 7)]}
        return {"type": "integer", "exclusiveMinimum": 0, "maximum": r.randrange(1, 100)}

    def schema(self, depth):
        r = self.r
        if depth <= 0:
            return self.scalar()
        k = r.randrange(10)
        if k < 4:
            return self.obj(depth)
        if k < 6:
            s = {"type": "array", "items": self.schema(depth - 1)}
            if r.random() < 0.6:
                s["minItems"] = r.randrange(0, 3)
            if r.random() < 0.6:
                s["maxItems"] = s.get("minItems", 0) + r.randrange(0, 4)
            return s
        if k == 6:
            return {"anyOf": [self.schema(depth - 1) for _ in range(r.randrange(2, 4))]}
        if k == 7:
            return {"type": "array", "prefixItems": [self.scalar() for _ in range(r.randrange(1, 4))],
                    "items": False}
        return self.scalar()

    def obj(self, depth):
        r = self.r
        names = r.sample(WORDS, r.randrange(1, 6))
        props = {n: self.schema(depth - 1) for n in names}
        req = [n for n in names if r.random() < 0.6]
        return {"type": "object", "properties": props, "required": req, "additionalProperties": False}


def nested_defs(gen):
    item = gen.obj(1)
    return {"$defs": {"item": item},
            "type": "object",
            "properties": {"first": {"$ref": "#/$defs/item"}, "rest": {"type": "array", "items": {"$ref": "#/$defs/item"},
                                                                         "maxItems": 3}},
            "required": ["first", "rest"], "additionalProperties": False}


def hard_cases():
    """Hand-written cases that stress recursion, escapes, unicode, bounds and unions."""
    tree = {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3}},
        "required": ["v"], "additionalProperties": False}}, "$ref": "#/$defs/node"}
    cases = [
        ("hard_tree", tree, True),
        ("hard_empty_obj", {"type": "object", "additionalProperties": False}, True),
        ("hard_all_optional", {"type": "object", "properties": {k: {"type": "integer"} for k in "abcdef"},
                               "additionalProperties": False}, True),
        ("hard_int_neg_range", {"type": "integer", "minimum": -12345, "maximum": -17}, True),
        ("hard_int_cross_zero", {"type": "integer", "minimum": -9, "maximum": 1000000}, True),
        ("hard_int_exclusive", {"type": "integer", "exclusiveMinimum": 99, "exclusiveMaximum": 1001}, True),
        ("hard_unicode_enum", {"enum": ["日本語", "emoji 😀", "a\"b\\c", "\u0001ctl", "é"]}, True),
        ("hard_const_obj", {"const": {"a": [1, 2, {"b": None}], "c": "d"}}, True),
        ("hard_prefix_items", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                               "items": {"type": "boolean"}, "minItems": 1, "maxItems": 5}, True),
        ("hard_array_bounds", {"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 3}, True),
        ("hard_any_of_objects", {"anyOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False},
            {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"], "additionalProperties": False}]}, True),
        ("hard_one_of_discriminated", {"oneOf": [
            {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind", "x"],
             "additionalProperties": False},
            {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind", "y"],
             "additionalProperties": False}]}, True),
        ("hard_all_of_merge", {"allOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"properties": {"b": {"type": "string"}}, "required": ["b"]}]}, True),
        ("hard_type_union", {"type": ["integer", "string", "null"]}, True),
        ("hard_pattern_unicode", {"type": "string", "pattern": "^[а-я]{2,5}-\\d+$"}, True),
        ("hard_pattern_quote", {"type": "string", "pattern": "^a\"b\\\\c$"}, True),
        ("hard_nested_arrays", {"type": "array", "items": {"type": "array", "items": {"type": "array",
                                "items": {"type": "integer"}, "maxItems": 2}, "maxItems": 2}, "maxItems": 2}, True),
        ("hard_additional_schema", {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                                    "additionalProperties": {"type": "integer"}}, True),
        ("hard_max_length_zero", {"type": "string", "maxLength": 0}, True),
        ("hard_number_nonneg", {"type": "number", "minimum": 0}, True),
        ("hard_format_date", {"type": "string", "format": "date"}, False),
        ("hard_format_datetime", {"type": "string", "format": "date-time"}, False),
        ("hard_format_uuid", {"type": "string", "format": "uuid"}, False),
        ("hard_format_ipv4", {"type": "string", "format": "ipv4"}, False),
        ("hard_format_email", {"type": "string", "format": "email"}, False),
        ("hard_unanchored_pattern", {"type": "string", "pattern": "ab+c"}, False),
        ("hard_any_value", {}, True),
        ("hard_linked_list", {"$defs": {"l": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
            "h": {"type": "integer"}, "t": {"$ref": "#/$defs/l"}}, "required": ["h", "t"], "additionalProperties": False}]}},
            "$ref": "#/$defs/l"}, True),
        ("hard_many_props", {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(30)},
                             "required": [f"p{i}" for i in range(0, 30, 3)], "additionalProperties": False}, True),
        ("hard_deep", {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "object",
            "properties": {"c": {"type": "object", "properties": {"d": {"type": "string", "maxLength": 3}},
                                 "required": ["d"], "additionalProperties": False}}, "required": ["c"],
            "additionalProperties": False}}, "required": ["b"], "additionalProperties": False}}, "required": ["a"],
            "additionalProperties": False}, True),
    ]
    return cases


REGEXES = ["[a-z]{3,8}@[a-z]+\\.(com|org)", "\\d{3}-\\d{2}-\\d{4}", "(0|[1-9]\\d*)(\\.\\d+)?",
           "[A-Z][a-z]*( [A-Z][a-z]*){0,3}", "#[0-9a-fA-F]{6}", "(true|false|null)", "[^\\n]{1,20}\\n",
           "(ab|cd)*e+", "[а-яё]+", "(\\+|-)?\\d+(,\\d{3})*", "https?://[a-z0-9.]+(/[a-z0-9]*)*", "\\w+(\\.\\w+)*"]
EBNFS = [
    'root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= factor (("*" | "/") factor)*\n'
    'factor ::= [0-9]+ | "(" expr ")"\n',
    'root ::= "[" (item ("," item)*)? "]"\nitem ::= "\\"" [a-z]* "\\""\n',
    'root ::= "SELECT " cols " FROM " name\ncols ::= name (", " name)*\nname ::= [a-z_]+\n',
    'root ::= "(" root* ")"\n',
    'root ::= pair ("\\n" pair)*\npair ::= [a-z]+ "=" [0-9]+\n',
    'root ::= b\nb ::= "T" | "F" | "!" b | "(" b ("&" | "|") b ")"\n',
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=520)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--hard-only", action="store_true")
    a = ap.parse_args()
    gen = Gen(a.seed)
    rows = []
    for name, s, anchor in hard_cases():
        rows.append({"id": name, "kind": "json", "source": json.dumps(s, ensure_ascii=False), "anchor": anchor})
    for i, rx in enumerate(REGEXES):
        rows.append({"id": f"regex_{i}", "kind": "regex", "source": rx, "anchor": True})
    for i, g in enumerate(EBNFS):
        rows.append({"id": f"ebnf_{i}", "kind": "ebnf", "source": g, "anchor": True})
    if not a.hard_only:
        for i in range(a.count):
            s = nested_defs(gen) if i % 17 == 0 else gen.obj(gen.r.randrange(1, 4))
            rows.append({"id": f"gen_{i}", "kind": "json", "source": json.dumps(s, ensure_ascii=False), "anchor": True})
    with open(a.out, "w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()

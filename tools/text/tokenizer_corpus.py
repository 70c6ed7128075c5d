#!/usr/bin/env python3
"""Deterministic corpus for tokenizer parity tests and benchmarks (no external data).

cases(seed, n) yields n byte strings mixing English prose, code, CJK/kana/hangul, emoji sequences, whitespace
runs, numbers in many scripts, random code points from all planes (including ones unassigned before or after
Unicode 16), adversarial strings (long runs, stacked combining marks, control characters, added-token
literals and fragments of them) and invalid UTF-8. Everything comes from random.Random(seed), so a given
Python version always produces the same corpus.
"""
import random

WORDS = ("the of and to in is that it was for on are as with his they at be this from have or by one had not "
         "but what all were when we there can an your which their said if do will each about how up out them "
         "then she many some so these would other into has more her two like him see time could no make than "
         "first been its who now people my made over did down only way find use may water long little very "
         "after words called just where most know tokenizer model inference engine attention expert router "
         "DeepSeek Transformer GPU kernel don't I'm we'll it's O'Neil e.g. i.e. U.S.A. naïve café résumé "
         "Zürich coöperate façade São Paulo Ελληνικά русский язык العربية עברית हिन्दी বাংলা ไทย Tiếng Việt "
         "한국어 日本語 中文 ქართული Հայերեն አማርኛ").split()
CODE_SNIPPETS = [
    "def f(x):\n    return x * 2  # double\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "#include <vector>\nstd::vector<int32_t> ids{1, 2, 3};\n",
    "if x != None and y >= 3:\r\n    print(f\"{x!r}: {y:08.3f}\")\r\n",
    "SELECT id, name FROM users WHERE age > 21 ORDER BY name;\n",
    '{"key": [1, 2.5e-3, true, null], "nested": {"a": "b\\n"}}',
    "<div class=\"x\">&nbsp;<a href='https://example.com/?q=1&r=2'>link</a></div>",
    "fn main() -> Result<(), Box<dyn Error>> { let v: Vec<u8> = vec![0xFF; 16]; Ok(()) }",
    "    \n\n\t\t// TODO(someone): fix this!!!\n\n\n",
    "x=>x**2;a&&b||c;a<<=2;b>>>=1;c?.d??e;",
    "$ echo $HOME && ls -la | grep '^d' > out.txt 2>&1",
    "\\begin{equation} E = mc^2 \\end{equation} % LaTeX",
]
SPECIAL_LITERALS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                    "<think>", "</think>", "<｜System｜>", "｜DSML｜", "<｜DSML｜tool_calls>", "<｜DSML｜ invoke name=\"f\">",
                    "<｜latest_reminder｜>", "<｜▁pad▁｜>", "<｜fim▁hole｜>", "<|EOT|>", "<｜tool▁sep｜>"]
WHITESPACE = [" ", " ", " ", "\t", "\n", "\n", "\r", "\r\n", "\u3000", "\u00a0", "\u2028", "\u2029", "\x0b", "\x0c",
              "\x85", "\u1680", "\u2003", "\u202f", "\u205f", "\u180e", "\u200b", "\x1c", "\x1f", "\ufeff"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇸", "❤️", "✈︎", "🧑🏿‍💻", "🫠", "🪿", "#️⃣", "©", "™", "☃", "🀄",
         "\U0001FAE8", "\U0001FACE"]
# Interesting code point ranges: (start, end) inclusive. Includes blocks added in Unicode 15, 16 and 17 so
# the category table version is exercised, plus unassigned and private-use points.
RANGES = [(0x20, 0x7E), (0xA0, 0x24F), (0x250, 0x36F), (0x370, 0x3FF), (0x400, 0x52F), (0x590, 0x6FF),
          (0x900, 0x9FF), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x1680, 0x16FF), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF),
          (0x2000, 0x206F), (0x2070, 0x218F), (0x2190, 0x2BFF), (0x2E80, 0x2FFF), (0x3000, 0x30FF),
          (0x3100, 0x33FF), (0x3400, 0x4DBF), (0x4DC0, 0x4E10), (0x9F90, 0x9FFF), (0xA000, 0xA4CF),
          (0xAC00, 0xD7FF), (0xE000, 0xE0FF), (0xF900, 0xFAFF), (0xFB00, 0xFDFF), (0xFE00, 0xFE6F),
          (0xFF00, 0xFFFF), (0x10000, 0x1034F), (0x10D40, 0x10D8F), (0x10940, 0x1095F), (0x11F00, 0x11F5F),
          (0x1CC00, 0x1CEBF), (0x1D400, 0x1D7FF), (0x1E030, 0x1E08F), (0x1E290, 0x1E2FF), (0x1F000, 0x1FAFF),
          (0x20000, 0x2A6DF), (0x2EBF0, 0x2EE5F), (0x31350, 0x323AF), (0x323B0, 0x3347F), (0xE0000, 0xE01EF),
          (0xF0000, 0xF0100), (0x10FF00, 0x10FFFF)]


def random_codepoint(rng):
    lo, hi = rng.choice(RANGES)
    cp = rng.randint(lo, hi)
    return chr(cp) if not 0xD800 <= cp <= 0xDFFF else "?"


def english(rng):
    words = [rng.choice(WORDS) for _ in range(rng.randint(1, 40))]
    text = ""
    for w in words:
        text += w + rng.choice([" ", " ", " ", " ", ", ", ". ", "! ", "? ", "; ", " - ", "'s ", " (", ") ", "\n"])
    return text.strip() if rng.random() < 0.5 else text


def code(rng):
    return "".join(rng.choice(CODE_SNIPPETS) for _ in range(rng.randint(1, 4)))


def cjk(rng):
    out = []
    for _ in range(rng.randint(1, 30)):
        r = rng.random()
        if r < 0.4:
            out.append(chr(rng.randint(0x4E00, 0x9FFF)))
        elif r < 0.6:
            out.append(chr(rng.randint(0x3040, 0x30FF)))
        elif r < 0.7:
            out.append(chr(rng.randint(0xAC00, 0xD7A3)))
        elif r < 0.85:
            out.append(rng.choice("，。、！？：；「」『』（）【】・ー〜…—“”‘’《》" + "０１２３４５６７８９ＡＢｃ"))
        else:
            out.append(rng.choice(WORDS) + rng.choice(["", " "]))
    return "".join(out)


def emoji(rng):
    return "".join(rng.choice(EMOJI + [" ", "a", "1", "!", "\n", "🙂🙂"]) for _ in range(rng.randint(1, 12)))


def whitespace(rng):
    out = []
    for _ in range(rng.randint(1, 20)):
        out.append("".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 6))))
        if rng.random() < 0.6:
            out.append(rng.choice(WORDS + ["!", "?!", "(", "123", "x"]))
    return "".join(out)


def numbers(rng):
    digit_sets = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "０１２３４５６７８９", "²³¹¼½¾", "ⅠⅡⅢⅣⅫ", "①②③⑩", "〇"]
    out = []
    for _ in range(rng.randint(1, 10)):
        ds = rng.choice(digit_sets)
        out.append("".join(rng.choice(ds) for _ in range(rng.randint(1, 12))))
        out.append(rng.choice(["", " ", ".", ",", "-", "e", "x", "%", "$", "km", "\n", "年", "1"]))
    return "".join(out)


def random_unicode(rng):
    return "".join(random_codepoint(rng) for _ in range(rng.randint(1, 40)))


def adversarial(rng):
    kind = rng.randrange(12)
    n = rng.choice([50, 300, 2000, 10000])
    if kind == 0:
        return rng.choice(["a", " ", "1", "!", "\n", "é", "中", "\u0301", "🙂", "ab", " \n", "\t "]) * n
    if kind == 1:  # stacked combining marks, alone and after letters / digits / spaces
        base = rng.choice(["a", "1", " ", "", "!", "\n", "中"])
        return base + "".join(chr(rng.randint(0x300, 0x36F)) for _ in range(rng.randint(1, 60))) + rng.choice(["", "b", " c"])
    if kind == 2:  # mixed scripts without spaces
        return "".join(rng.choice(["abc", "абв", "αβγ", "אבג", "ابت", "अआइ", "中文", "かな", "カナ", "한글", "123", "_", "-"])
                       for _ in range(rng.randint(2, 30)))
    if kind == 3:  # control characters
        return "".join(chr(rng.choice(list(range(0, 32)) + [127, 0x80, 0x9F, 0x85, 0xAD, 0x200D, 0x2066]))
                       + rng.choice(["", "a", " ", "1"]) for _ in range(rng.randint(1, 30)))
    if kind == 4:  # added-token literals, fragments and near misses, glued to text
        parts = []
        for _ in range(rng.randint(1, 8)):
            lit = rng.choice(SPECIAL_LITERALS)
            r = rng.random()
            if r < 0.2:
                lit = lit[: rng.randint(1, len(lit))]
            elif r < 0.3:
                lit = lit + lit
            parts.append(lit + rng.choice(["", " ", "hello", "\n", "<", "｜", "123"]))
        return "".join(parts)
    if kind == 5:  # punctuation / symbol runs followed by newlines
        return "".join(rng.choice(["!!", "...", " ?", "\r\n", "\n\n", "->", "==", "'s", "'S", "\"a", "$x", "€", "©"])
                       for _ in range(rng.randint(1, 40)))
    if kind == 6:  # long number runs with separators
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 100))) + rng.choice(["", " ", "a"])
    if kind == 7:  # whitespace before end / before letters
        return rng.choice(["a", "!", "1", ""]) + " " * rng.randint(1, 10) + rng.choice(["", "b", "\n", "\t", "!"])
    if kind == 8:  # CJK / kana / punctuation interleavings (kana block contains P, S, Lm, Mn)
        return "".join(chr(rng.choice([0x30FB, 0x30A0, 0x309B, 0x3099, 0x30FC, 0x3040, 0x3097, 0x4E00, 0x9FA5, 0x9FA6,
                                        0x3005, 0x3007, 0x3001, 0x20]))
                       for _ in range(rng.randint(1, 30)))
    if kind == 9:  # random printable ASCII soup
        return "".join(chr(rng.randint(0x20, 0x7E)) for _ in range(rng.randint(1, 200)))
    if kind == 10:  # long single word
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))
    return "".join(rng.choice([english, code, cjk, emoji, whitespace, numbers, random_unicode])(rng) for _ in range(3))


def invalid_utf8(rng):
    """Text with ill-formed bytes spliced in: truncated sequences, overlongs, surrogates, stray bytes."""
    bad = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
           b"\xf5", b"\xff", b"\xfe", b"\xe4\xb8", b"\xf0\x9f\x98", b"\xc3", b"\xe2\x82"]
    out = b""
    for _ in range(rng.randint(1, 10)):
        out += rng.choice([english, cjk, emoji, whitespace, numbers])(rng).encode()[: rng.randint(0, 30)]
        out += rng.choice(bad) if rng.random() < 0.7 else bytes([rng.randint(0x80, 0xFF)])
    return out


GENERATORS = [(english, 18), (code, 10), (cjk, 12), (emoji, 6), (whitespace, 10), (numbers, 8),
              (random_unicode, 14), (adversarial, 14), (invalid_utf8, 8)]


def cases(seed, n):
    rng = random.Random(seed)
    gens = [g for g, w in GENERATORS for _ in range(w)]
    for literal in SPECIAL_LITERALS:  # every literal on its own and in context, always included
        yield literal.encode()
        yield ("Hi " + literal + " there").encode()
    for i in range(n - 2 * len(SPECIAL_LITERALS)):
        text = rng.choice(gens)(rng)
        yield text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")

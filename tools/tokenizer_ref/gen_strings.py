#!/usr/bin/env python3
"""Writes the tokenizer comparison strings, one JSON string per line, to stdout.

Deterministic (a fixed-seed random.Random, no clock, no locale): the same list on every machine, so a mismatch
found on CI can be replayed anywhere. The strings aim at the places where byte-level BPE implementations differ:
the pre-tokenizer regex (contractions, letter/number/punctuation classes, whitespace runs and the \\s+(?!\\S)
lookahead), Unicode normalisation and classes (CJK, combining marks, emoji with ZWJ and skin tones, RTL
scripts), digit grouping (Llama 3 splits numbers in runs of 1-3), special-token look-alikes, and code.

    python3 tools/tokenizer_ref/gen_strings.py [--count N] > strings.jsonl
"""
import argparse
import json
import random

FIXED = [
    "",
    " ",
    "  ",
    "\n",
    "\n\n\n",
    "\t",
    " \t \n ",
    "Hello world",
    "Hello, world!",
    " Hello world",
    "hello  world",
    "hello   world  ",
    "I'm you're he's we've they'll I'd can't won't",
    "I'M YOU'RE HE'S WE'VE THEY'LL I'D",
    "don't'll 's 't 're 've 'm 'll 'd",
    "rock 'n' roll 'tis the season",
    "1234567890",
    "3.14159 2,718 1e-9 0x1F 0b1010 1_000_000",
    "12 123 1234 12345 123456 1234567",
    "Call 555-0199 or +1 (800) 555-0100.",
    "The year 2026, the 21st century.",
    "$100.00 €50 £3 ¥1000 ₹20",
    "naïve café résumé façade coöperate",
    "Ångström Øresund Ærø straße ß ẞ",
    "e\u0301 a\u0300 o\u0308 n\u0303 (combining)",
    "\u1100\u1161\u11a8 decomposed hangul",
    "Ǆ ǅ ǆ ﬁ ﬂ ㎏ ① Ⅻ",
    "中文分词测试，你好世界。",
    "日本語のテキスト、カタカナとひらがな。",
    "한국어 텍스트입니다.",
    "Русский текст, ёжик в тумане.",
    "Ελληνικά: αβγδε ΑΒΓΔΕ",
    "עברית מימין לשמאל",
    "العربية من اليمين إلى اليسار",
    "हिन्दी देवनागरी लिपि",
    "ไทย ภาษาไทย",
    "Tiếng Việt có dấu",
    "😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️",
    "emoji🙂inside😉words",
    "🇫🇷🇯🇵🇺🇸 flags",
    "\u200b zero\u200bwidth \u200d joiner \ufeff bom",
    "tabs\tand\tnew\nlines\r\nwindows",
    "trailing spaces   ",
    "   leading spaces",
    "multiple\n\n\nnewlines\n\n",
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }",
    "if x != None and y >= 3 or z <= -1:",
    "const f = (a, b) => a ?? b; // nullish",
    "SELECT * FROM users WHERE id = 'abc' AND n > 10;",
    "<div class=\"x\">&amp; &lt;tag&gt;</div>",
    "https://example.com/path?q=1&r=two#frag",
    "user@example.com and @mention #hashtag",
    '{"key": [1, 2.5, true, null], "s": "v"}',
    "a\\b\\c /d/e/f ~/g",
    "____ ---- ==== **** ~~~~ ....",
    "!!!??? ... --- ;;; ::",
    "CamelCaseWord snake_case_word kebab-case-word",
    "ALLCAPS lowercase MiXeD",
    "<|endoftext|>",
    "text <|endoftext|> more",
    "<|begin_of_text|>hi<|end_of_text|>",
    "<|im_start|>user\nhello<|im_end|>",
    "<s> </s> <unk> <pad>",
    "<|endoftext",
    "endoftext|>",
    "a" * 300,
    " " * 50 + "x",
    "x" + " " * 50,
    "\n" * 20,
    "9" * 40,
    "ab" * 100,
    "\u00a0nbsp\u00a0\u2003emspace\u3000ideographic",
    "\x00\x01\x02 control \x7f chars",
    "\ufffd replacement",
    "\U0001d400\U0001d401 math bold",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 fraktur",
    "½ ¾ ² ³ ⁴ ₁ ₂",
    "Wait... what?! Really?!?",
    "It's 5 o'clock; 'quoted' and \"double\".",
    "l'homme c'est qu'il",
]

WORDS = (
    "the of and to in is was for on that with as by at from his her they be this which or an are "
    "not but had have were one all their there can would what so if about when who will more no out "
    "time people year way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government number "
    "night point home water room mother area money story fact month lot right study book eye job word "
    "business issue side kind head house service friend father power hour game line end member law car "
    "city community name president team minute idea kid body information back parent face others level "
    "office door health person art war history party result change morning reason research girl guy "
    "moment air teacher force education"
).split()
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "n't"]
PUNCT = list(".,;:!?-()[]{}\"'/\\@#$%^&*+=<>|~`_")
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", " \n", "\n ", "\r\n", "\u00a0", "\u3000", "    "]
UNICODE_POOL = (
    "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿ"
    "ĀāĂăĄąĆćĈĉŁłŃńŒœŠšŸŽž"
    "αβγδεζηθικλμνξοπρστυφχψω"
    "абвгдежзийклмнопрстуфхцчшщъыьэюя"
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年"
    "あいうえおかきくけこさしすせそアイウエオカキクケコ"
    "가나다라마바사아자차카타파하"
    "אבגדהוזחטיכלמנסעפצקרשת"
    "ابتثجحخدذرزسشصضطظعغفقكلمنهوي"
    "अआइईउऊएऐओऔकखगघ"
    "กขคงจฉชซ"
)
COMBINING = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u0327", "\u0331", "\u20dd", "\u0489"]
EMOJI = [
    "😀", "😂", "🥲", "🤖", "🚀", "🔥", "✨", "🎉", "👍", "👍🏻", "👍🏿", "❤️", "✔️", "🇩🇪", "🇧🇷",
    "👩‍💻", "👨‍👩‍👧", "🧑🏽‍🚀", "🏴‍☠️", "☕", "⚡", "🐍", "🦀", "🌍",
]
CODE = [
    "x = [i * 2 for i in range(10)]",
    "std::vector<int> v{1, 2, 3};",
    "fn main() -> Result<(), Box<dyn Error>> {",
    "    if (err != nil) { return err }",
    "let s = `template ${x}`;",
    "<?php echo $var; ?>",
    "SELECT count(*) FROM t GROUP BY a;",
    "a += b; c -= d; e *= f; g /= h;",
    "\tindented\twith\ttabs",
    "// comment\n/* block */",
    "#!/usr/bin/env bash\nset -euo pipefail",
    "0xDEADBEEF 0o755 1.5e+10f",
]


def random_string(rng):
    kind = rng.randrange(10)
    n = rng.randint(1, 24)
    parts = []
    for _ in range(n):
        r = rng.random()
        if kind in (0, 1, 2):  # mostly English prose with contractions and punctuation
            if r < 0.6:
                w = rng.choice(WORDS)
                if rng.random() < 0.15:
                    w = w.capitalize()
                elif rng.random() < 0.05:
                    w = w.upper()
                parts.append(w)
            elif r < 0.7:
                parts.append(rng.choice(CONTRACTIONS))
            elif r < 0.85:
                parts.append(rng.choice(PUNCT))
            else:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 9))))
            parts.append(rng.choice(SPACES) if rng.random() < 0.15 else " ")
        elif kind == 3:  # unicode letters, sometimes with combining marks
            w = "".join(rng.choice(UNICODE_POOL) for _ in range(rng.randint(1, 8)))
            if rng.random() < 0.3:
                w += rng.choice(COMBINING)
            parts.append(w)
            parts.append(rng.choice(SPACES + ["", "", ""]))
        elif kind == 4:  # emoji mixed with words
            parts.append(rng.choice(EMOJI) if r < 0.5 else rng.choice(WORDS))
            parts.append(rng.choice(["", " ", "  "]))
        elif kind == 5:  # whitespace runs
            parts.append(rng.choice(SPACES) * rng.randint(1, 6))
            if r < 0.5:
                parts.append(rng.choice(WORDS + PUNCT))
        elif kind == 6:  # digits of every length
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 15))))
            parts.append(rng.choice(["", " ", ".", ",", "-", "/", ":"]))
        elif kind == 7:  # code
            parts.append(rng.choice(CODE))
            parts.append(rng.choice(["\n", "\n    ", " ", "\n\n"]))
        elif kind == 8:  # random code points from many blocks (valid scalar values only)
            lo, hi = rng.choice(
                [(0x20, 0x7F), (0xA0, 0x17F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
                 (0x900, 0x97F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
                 (0x1F300, 0x1F64F), (0x2000, 0x206F), (0x300, 0x36F)])
            parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 6))))
        else:  # mixed bag
            parts.append(rng.choice([rng.choice(WORDS), rng.choice(EMOJI), rng.choice(PUNCT),
                                     rng.choice(SPACES), rng.choice(UNICODE_POOL),
                                     str(rng.randint(0, 99999)), rng.choice(CONTRACTIONS)]))
    return "".join(parts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=20261122)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    out = list(FIXED)
    while len(out) < args.count:
        out.append(random_string(rng))
    for s in out:
        print(json.dumps(s, ensure_ascii=True))


if __name__ == "__main__":
    main()

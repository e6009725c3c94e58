#!/usr/bin/env python3
"""Prints the strings tests/unit/chat_template_test.cpp expects, rendered by Python's jinja2 configured as
transformers' apply_chat_template configures it (transformers/utils/chat_template_utils.py:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with loop controls, a tojson filter that is
json.dumps(ensure_ascii=False), raise_exception and strftime_now globals; messages, tools=None, documents=None,
add_generation_prompt and the special tokens as variables). Needs only `pip install jinja2` (run with 3.1.6).

    python3 tests/data/chat_templates/render_expected.py
"""
import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))

# (template file, bos_token, eos_token): the tokens each model's tokenizer_config.json names.
MODELS = [
    ("meta-llama-Meta-Llama-3-8B-Instruct", "<|begin_of_text|>", "<|eot_id|>"),
    ("meta-llama-Llama-3.1-8B-Instruct", "<|begin_of_text|>", "<|eot_id|>"),
    ("Qwen-Qwen2.5-7B-Instruct", "", "<|im_end|>"),
    ("Qwen-Qwen3-0.6B", "", "<|im_end|>"),
    ("mistralai-Mistral-7B-Instruct-v0.2", "<s>", "</s>"),
    ("mistralai-Mixtral-8x7B-Instruct-v0.1", "<s>", "</s>"),
    ("mistralai-Mistral-Nemo-Instruct-2407", "<s>", "</s>"),
    ("deepseek-ai-DeepSeek-V3.1", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
]

CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant"},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi there"},
    {"role": "user", "content": "Who are you"},
]


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def c_literal(s):
    out = '"'
    for ch in s:
        if ch == "\n":
            out += "\\n"
        elif ch == '"':
            out += '\\"'
        elif ch == "\\":
            out += "\\\\"
        else:
            out += ch
    return out + '"'


def main():
    env = environment()
    for name, bos, eos in MODELS:
        source = open(os.path.join(HERE, name + ".jinja"), encoding="utf-8").read()
        tmpl = env.from_string(source)
        for gen in (False, True):
            # Mixtral's template refuses a system message; it gets the conversation without one.
            msgs = CONVERSATION[1:] if "Mixtral" in name else CONVERSATION
            try:
                out = tmpl.render(messages=msgs, tools=None, documents=None, add_generation_prompt=gen,
                                  bos_token=bos, eos_token=eos)
            except jinja2.exceptions.TemplateError as e:
                out = "raise_exception: " + str(e)
            print(f"{name} add_generation_prompt={gen}:\n  {c_literal(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

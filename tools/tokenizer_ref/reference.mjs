// Reference encoder for the tokenizer comparison test: Hugging Face's own JavaScript tokenizers
// (@huggingface/tokenizers, Apache-2.0), an implementation independent of ours.
//
//   node tools/tokenizer_ref/reference.mjs NODE_MODULES_DIR TOKENIZER_JSON < strings.jsonl > ref.jsonl
//
// Input: one JSON string per line. Output: one JSON object per line:
//   {"ids": [...], "ids_plain": [...], "decoded": "..."}
// ids: encode(text) (HF's default, add_special_tokens true); ids_plain: add_special_tokens false;
// decoded: decode(ids_plain) without clean-up of tokenization spaces.
import { readFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { createInterface } from "node:readline";

const [nodeModules, tokenizerPath] = process.argv.slice(2);
if (!nodeModules || !tokenizerPath) {
  console.error("usage: reference.mjs NODE_MODULES_DIR TOKENIZER_JSON < strings.jsonl");
  process.exit(2);
}
const lib = await import(pathToFileURL(join(nodeModules, "@huggingface/tokenizers/dist/tokenizers.mjs")).href);
const tokenizerJson = JSON.parse(readFileSync(tokenizerPath, "utf8"));
const configPath = join(dirname(tokenizerPath), "tokenizer_config.json");
const tokenizerConfig = existsSync(configPath) ? JSON.parse(readFileSync(configPath, "utf8")) : {};
const tok = new lib.Tokenizer(tokenizerJson, tokenizerConfig);

const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
const out = [];
for await (const line of rl) {
  if (line.length === 0) continue;
  const text = JSON.parse(line);
  const ids = tok.encode(text).ids;
  const plain = tok.encode(text, { add_special_tokens: false }).ids;
  // decode() refuses an empty list (the empty string encodes to nothing): its text is "".
  const decoded =
    plain.length === 0 ? "" : tok.decode(plain, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  out.push(JSON.stringify({ ids, ids_plain: plain, decoded }));
}
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));

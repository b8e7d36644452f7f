// The reference tokenizers from the npm registry, for tests/io/bpe.sh:
//   node bpe_reference.js tiktoken-file NAME OUT     write js-tiktoken's NAME ranks (gpt2,
//                                                    cl100k_base) as a tiktoken rank file
//   node bpe_reference.js gpt3 TEXT                  GPT-2 ids of TEXT (gpt-3-encoder), JSON
//   node bpe_reference.js tiktoken NAME TEXT         ids of TEXT by js-tiktoken's NAME, JSON
// Modules are looked up under NODE_PATH.
"use strict";
const fs = require("fs");
const [mode, a, b] = process.argv.slice(2);

function tiktoken(name) {
  const { Tiktoken } = require("js-tiktoken/lite");
  return new Tiktoken(require(`js-tiktoken/ranks/${name}`));
}

if (mode === "tiktoken-file") {
  const lines = [];
  for (const [rank, bytes] of tiktoken(a).textMap)
    lines.push(`${Buffer.from(bytes).toString("base64")} ${rank}`);
  fs.writeFileSync(b, lines.join("\n") + "\n");
} else if (mode === "gpt3") {
  const { encode } = require("gpt-3-encoder");
  process.stdout.write(JSON.stringify(encode(fs.readFileSync(a, "utf8"))));
} else if (mode === "tiktoken") {
  process.stdout.write(JSON.stringify(tiktoken(a).encode(fs.readFileSync(b, "utf8"))));
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}

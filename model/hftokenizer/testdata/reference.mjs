// Reference encoder for TestRealTokenizersMatchReference: Hugging Face's
// pure-JavaScript tokenizers (@huggingface/tokenizers@0.2.0, the tokenizer
// library of transformers.js, which translates the Oniguruma split patterns
// of tokenizer.json into JavaScript regexes), fetched and pinned by
// .ci/tokenizers into .cache/tokenizers/_reference/tokenizers.mjs.
//
// usage: node reference.mjs MODULE TOKENIZER_DIR < texts.json > ids.json
// texts.json is a JSON array of strings; ids.json is a JSON array of id
// arrays, each text encoded with add_special_tokens: false (no BOS/EOS),
// as asyncrl's Encode does.
import fs from "node:fs";
import { pathToFileURL } from "node:url";

const [modulePath, dir] = process.argv.slice(2);
const { Tokenizer } = await import(pathToFileURL(modulePath).href);
const tokenizerJSON = JSON.parse(fs.readFileSync(`${dir}/tokenizer.json`, "utf8"));
const tokenizerConfig = JSON.parse(fs.readFileSync(`${dir}/tokenizer_config.json`, "utf8"));
const tok = new Tokenizer(tokenizerJSON, tokenizerConfig);
const texts = JSON.parse(fs.readFileSync(0, "utf8"));
const out = texts.map((t) => tok.encode(t, { add_special_tokens: false }).ids);
process.stdout.write(JSON.stringify(out));

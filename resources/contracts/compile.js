// Compile Solidity sources with solc-js's standard JSON interface; write one artifact per contract:
// {contractName, compiler, settings, sources: {file: sha256}, abi, bytecode}.
// Usage: node compile.js <entry.sol> <Contract>=<out.json> [<Contract>=<out.json> ...]
// Imports resolve next to the entry file; every file read goes into "sources", so a test can check that the
// committed artifact was built from the committed sources. Deterministic: optimizer settings are fixed and
// metadata hashes are left out of the bytecode.
const fs = require("fs");
const crypto = require("crypto");
const path = require("path");
const solc = require("solc");

const [entry, ...outputs] = process.argv.slice(2);
const dir = path.dirname(entry);
const read = {};
function load(name) {
  const content = fs.readFileSync(path.join(dir, name), "utf8");
  read[name] = crypto.createHash("sha256").update(content).digest("hex");
  return content;
}
const settings = {
  optimizer: { enabled: true, runs: 200 },
  evmVersion: "paris", // no PUSH0: runs on every EVM chain, old and new
  metadata: { bytecodeHash: "none", appendCBOR: false },
  outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
};
const input = {
  language: "Solidity",
  sources: { [path.basename(entry)]: { content: load(path.basename(entry)) } },
  settings,
};
const imports = (name) => {
  try {
    return { contents: load(path.normalize(name).replace(/^\.\//, "")) };
  } catch (e) {
    return { error: `cannot read ${name}: ${e.message}` };
  }
};
const result = JSON.parse(solc.compile(JSON.stringify(input), { import: imports }));
for (const e of result.errors || []) console.error(e.formattedMessage);
if ((result.errors || []).some((e) => e.severity === "error")) process.exit(1);
const found = {};
for (const file of Object.values(result.contracts)) Object.assign(found, file);
for (const spec of outputs) {
  const [name, out] = spec.split("=");
  const contract = found[name];
  if (!contract) {
    console.error(`no contract ${name} in ${entry}`);
    process.exit(1);
  }
  const sources = Object.fromEntries(Object.keys(read).sort().map((k) => [k, read[k]]));
  const artifact = {
    contractName: name,
    compiler: `solc-js ${solc.version()}`,
    settings,
    sources,
    abi: contract.abi,
    bytecode: "0x" + contract.evm.bytecode.object,
  };
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, JSON.stringify(artifact, null, 1) + "\n");
  console.log(`wrote ${out}`);
}

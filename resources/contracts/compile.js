// Compile one Solidity file with solc-js's standard JSON interface; write {abi, bytecode, compiler, source_sha256}.
// Deterministic: optimizer settings are fixed and metadata hashes are left out of the bytecode.
const fs = require("fs");
const crypto = require("crypto");
const path = require("path");
const solc = require("solc");

const [src, out] = process.argv.slice(2);
const source = fs.readFileSync(src, "utf8");
const name = path.basename(src, ".sol");
const input = {
  language: "Solidity",
  sources: { [path.basename(src)]: { content: source } },
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: "paris", // no PUSH0: runs on every EVM chain, old and new
    metadata: { bytecodeHash: "none", appendCBOR: false },
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
  },
};
const result = JSON.parse(solc.compile(JSON.stringify(input)));
const errors = (result.errors || []).filter((e) => e.severity === "error");
for (const e of result.errors || []) console.error(e.formattedMessage);
if (errors.length) process.exit(1);
const contract = result.contracts[path.basename(src)][name];
const artifact = {
  contractName: name,
  compiler: `solc-js ${solc.version()}`,
  settings: input.settings,
  source_sha256: crypto.createHash("sha256").update(source).digest("hex"),
  abi: contract.abi,
  bytecode: "0x" + contract.evm.bytecode.object,
};
fs.writeFileSync(out, JSON.stringify(artifact, null, 1) + "\n");

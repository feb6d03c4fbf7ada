// Build the chat page into dist/ (shipped in the wheel): one ES module bundle with the SDK,
// the stylesheet and the page. dist/BUILD.json records the sources' hashes, which a test
// compares with the sources, so a change not rebuilt fails the suite.
import { createHash } from "node:crypto";
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { build } from "esbuild";

const here = new URL(".", import.meta.url).pathname;
const dist = `${here}dist`;

export function sourceHashes() {
  const files = ["package.json", "package-lock.json", "build.mjs", ...readdirSync(`${here}src`).sort().map((f) => `src/${f}`)];
  return Object.fromEntries(files.map((f) => [f, createHash("sha256").update(readFileSync(`${here}${f}`)).digest("hex")]));
}

rmSync(dist, { recursive: true, force: true });
mkdirSync(dist);
await build({
  entryPoints: [`${here}src/main.js`], bundle: true, format: "esm", minify: true,
  target: ["es2020"], outfile: `${dist}/app.js`, legalComments: "eof", logLevel: "warning",
});
copyFileSync(`${here}src/app.css`, `${dist}/app.css`);
copyFileSync(`${here}src/index.html`, `${dist}/index.html`);
const sdk = JSON.parse(readFileSync(`${here}node_modules/@langchain/langgraph-sdk/package.json`));
writeFileSync(`${dist}/BUILD.json`, `${JSON.stringify({ sdk: sdk.version, sources: sourceHashes() }, null, 2)}\n`);

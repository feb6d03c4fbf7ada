// Build the chat page into dist/ (shipped in the wheel): one ES module bundle with the SDK,
// the stylesheet, the page, and THIRD_PARTY_LICENSES.txt (the licence of every package bundled). dist/BUILD.json records the sources' hashes, which a test
// compares with the sources, so a change not rebuilt fails the suite.
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { build } from "esbuild";

const here = new URL(".", import.meta.url).pathname;
const dist = `${here}dist`;

export function sourceHashes() {
  const files = ["package.json", "package-lock.json", "build.mjs", ...readdirSync(`${here}src`).sort().map((f) => `src/${f}`)];
  return Object.fromEntries(files.map((f) => [f, createHash("sha256").update(readFileSync(`${here}${f}`)).digest("hex")]));
}

/**
 * The folder (with a package.json) of the package an input file belongs to: the innermost
 * node_modules/NAME; a package another one vendors (the SDK's dist/node_modules/.pnpm/...) is
 * found under the top node_modules, else counted as part of the package that vendors it.
 */
function packageOf(input) {
  const names = [...input.matchAll(/node_modules\/((?:@[^/]+\/)?[^/.][^/]*)/g)].map((m) => m[1]);
  if (!names.length) return null;
  const innermost = /^(.*node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(input)[1];
  for (const folder of [innermost, `node_modules/${names[names.length - 1]}`, `node_modules/${names[0]}`]) {
    if (existsSync(`${here}${folder}/package.json`)) return folder;
  }
  return null;
}

/** Each bundled package's name, version, licence and licence text. */
function licences(inputs) {
  const folders = [...new Set(inputs.map(packageOf).filter(Boolean))].sort();
  const parts = folders.map((folder) => {
    const meta = JSON.parse(readFileSync(`${here}${folder}/package.json`));
    const file = readdirSync(`${here}${folder}`).find((f) => /^licen[cs]e/i.test(f));
    const text = file && existsSync(`${here}${folder}/${file}`) ? readFileSync(`${here}${folder}/${file}`, "utf8").trim() : "(no licence file in the package)";
    return `${meta.name} ${meta.version} (${meta.license})\n\n${text}\n`;
  });
  return `Packages bundled in app.js, with their licences.\n\n${parts.join(`\n${"-".repeat(72)}\n\n`)}`;
}

rmSync(dist, { recursive: true, force: true });
mkdirSync(dist);
const built = await build({
  entryPoints: [`${here}src/main.js`], bundle: true, format: "esm", minify: true, metafile: true,
  target: ["es2020"], outfile: `${dist}/app.js`, legalComments: "eof", logLevel: "warning",
});
writeFileSync(`${dist}/THIRD_PARTY_LICENSES.txt`, licences(Object.keys(built.metafile.inputs)));
copyFileSync(`${here}src/app.css`, `${dist}/app.css`);
copyFileSync(`${here}src/index.html`, `${dist}/index.html`);
const sdk = JSON.parse(readFileSync(`${here}node_modules/@langchain/langgraph-sdk/package.json`));
writeFileSync(`${dist}/BUILD.json`, `${JSON.stringify({ sdk: sdk.version, sources: sourceHashes() }, null, 2)}\n`);

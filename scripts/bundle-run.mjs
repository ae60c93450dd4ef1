#!/usr/bin/env node
/**
 * Bundles `llmc run`'s path (the CLI with only the run command, and the TS runtime) from dist/ into
 * one file, dist/llmc-run.mjs, which bin/llmc.js runs for `llmc run`: resolving and reading ~80 ES
 * modules one by one costs a fresh process ~80 ms before the first token (docs/lab/speed-history.md, start-up).
 * Likewise `llmc compile` (dist/llmc-compile.mjs: the compile command, its driver and the gguf
 * target; ~200 modules, zod's ~95 among them, of which the bundle keeps what is used): 0.2 s of CPU
 * less per compile (docs/lab/speed-history.md, "GGUF from BF16 vs `cp`: where the CPU goes").
 * Everything else the run path can reach (other targets' runners, the tokenizer, checkpoints on
 * onnxruntime) stays in dist/ and loads as before; so do the modules whose state or classes must be
 * one across that line (errors for `instanceof`, interrupt clean-ups, the kernel store, atomic writes).
 * dist/llmc-<command>.json lists the bundled files with the build's time: bin/llmc.js uses a bundle only
 * while none of them is newer (a `tsc` after this falls back to dist/ until the next bundle).
 * Run after `tsc -p tsconfig.json` (npm run build does both); without esbuild it says so and exits 0.
 */
import { renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const DIST = path.join(ROOT, 'dist');
/** Modules loaded from dist/ by a bundle and by whatever it loads lazily alike: one instance each. */
const SHARED = ['src/core/errors.js', 'src/core/util/interrupt.js', 'src/core/util/atomic.js', 'src/exec/runtime/kernel-store.js'];
/** Per command: the dynamic imports inlined into its bundle; all others stay lazy, in dist/. */
const BUNDLES = {
  run: ['src/app/cli/commands/run.js', 'backends/ts/run.js'],
  compile: ['src/app/cli/commands/compile.js', 'src/app/compile/compile.js', 'backends/gguf/index.js', 'backends/gguf/emit.js'],
};
const inDist = (files) => files.map((f) => path.join(DIST, f));

let esbuild;
try {
  esbuild = await import('esbuild');
} catch {
  console.error('bundle-run: esbuild is not installed; `llmc run` and `llmc compile` load from dist/ (slower start-up)');
  process.exit(0);
}
const relative = (abs) => {
  const r = path.relative(DIST, abs).split(path.sep).join('/');
  return r.startsWith('.') ? r : `./${r}`;
};
const { kernelFingerprint } = await import(pathToFileURL(path.join(DIST, 'src/exec/runtime/kernel-files.js')).href);

async function bundle(command, inline) {
  const OUT = path.join(DIST, `llmc-${command}.mjs`);
  const INDEX = path.join(DIST, `llmc-${command}.json`);
  const INLINE = inDist(inline);
  const KEEP = inDist(SHARED);
  rmSync(INDEX, { force: true }); // never a stale index beside a new bundle
  const built = Date.now();
  const result = await esbuild.build({
    entryPoints: [path.join(DIST, 'src/app/cli/main.js')],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    outfile: `${OUT}.tmp`,
    metafile: true,
    logLevel: 'warning',
    // Without comments the file is ASCII and a third smaller: Node decodes (UTF-8 → string) and V8
    // parses a one-byte source faster (decoding the 392 KiB with comments took 2× as long). Names stay.
    minifyWhitespace: true,
    // commander is CommonJS: its require() of node builtins needs a require in an ES module.
    banner: { js: "import { createRequire as __llmcRequire } from 'node:module'; const require = __llmcRequire(import.meta.url);" },
    // The kernel cache's key, from the sources beside kernel-files.js (the bundle has none beside it).
    define: { LLMC_BUNDLED_KERNEL_KEY: JSON.stringify(kernelFingerprint(path.join(DIST, 'src/exec/runtime/kernel-files.js'))) },
    plugins: [
      {
        // commander requires child_process at load for executable subcommands, which llmc has none of:
        // loading it (with net, dgram and streams) costs ~10 ms; here it loads on first use instead.
        name: 'lazy-child-process',
        setup(b) {
          b.onResolve({ filter: /^(node:)?child_process$/ }, (a) => (a.importer.includes(`${path.sep}commander${path.sep}`) ? { path: 'child_process', namespace: 'lazy-builtin' } : undefined));
          b.onLoad({ filter: /.*/, namespace: 'lazy-builtin' }, () => ({
            contents: "let m; const get = () => (m ??= require('node:child_process')); module.exports = new Proxy({}, { get: (_, k) => get()[k], has: (_, k) => k in get() });",
            loader: 'js',
          }));
        },
      },
      {
        name: 'llmc-run-path',
        setup(b) {
          b.onResolve({ filter: /^\./ }, (a) => {
            const abs = path.resolve(a.resolveDir, a.path);
            if (KEEP.includes(abs) || (a.kind === 'dynamic-import' && !INLINE.includes(abs))) return { path: relative(abs), external: true };
            return undefined;
          });
        },
      },
    ],
  });
  renameSync(`${OUT}.tmp`, OUT);
  // Files only (not the lazy child_process shim, which lives in the plugin's namespace).
  const inputs = Object.keys(result.metafile.inputs).filter((f) => !f.includes(':')).map((f) => path.relative(ROOT, path.resolve(f)).split(path.sep).join('/'));
  writeFileSync(INDEX, `${JSON.stringify({ built, inputs })}\n`);
  console.error(`bundle-${command}: ${path.relative(ROOT, OUT)} (${inputs.length} modules, ${(statSync(OUT).size / 1024).toFixed(0)} KiB)`);
}

for (const [command, inline] of Object.entries(BUNDLES)) await bundle(command, inline);

#!/usr/bin/env node
// The compiled CLI lives in dist/ (built by `npm install` via the prepare script). `llmc run` and
// `llmc compile` start from dist/llmc-<command>.mjs, their paths in one file (scripts/bundle-run.mjs),
// while that is up to date.
import { readFileSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const argv = process.argv.slice(2);
// A reader that stops early (`llmc compile --help | head`) closes the pipe: end quietly, no stack trace.
for (const stream of [process.stdout, process.stderr]) stream.on('error', (err) => {
    if (err.code === 'EPIPE') process.exit(0);
    throw err;
  });

/** The command's bundle, if it has one and no file it was built from has changed since (LLMC_RUN_BUNDLE=off: never). */
function bundle() {
  const command = argv.find((a) => !a.startsWith('-'));
  if ((command !== 'run' && command !== 'compile') || process.env.LLMC_RUN_BUNDLE === 'off') return null;
  try {
    const root = fileURLToPath(new URL('../', import.meta.url));
    const { built, inputs } = JSON.parse(readFileSync(`${root}dist/llmc-${command}.json`, 'utf8'));
    for (const f of inputs) if (statSync(root + f).mtimeMs > built) return null;
    return new URL(`../dist/llmc-${command}.mjs`, import.meta.url).href;
  } catch {
    return null;
  }
}

const { main } = await import(bundle() ?? '../dist/src/app/cli/main.js');
process.exitCode = await main(argv);

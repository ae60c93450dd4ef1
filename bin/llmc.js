#!/usr/bin/env node
// The compiled CLI lives in dist/ (built by `npm install` via the prepare script). `llmc run` starts
// from dist/llmc-run.mjs, its path in one file (scripts/bundle-run.mjs), while that is up to date.
import { readFileSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const argv = process.argv.slice(2);

/** The bundle when the command is `run` and no file it was built from has changed since (LLMC_RUN_BUNDLE=off: never). */
function runBundle() {
  if (argv.find((a) => !a.startsWith('-')) !== 'run' || process.env.LLMC_RUN_BUNDLE === 'off') return null;
  try {
    const root = fileURLToPath(new URL('../', import.meta.url));
    const { built, inputs } = JSON.parse(readFileSync(`${root}dist/llmc-run.json`, 'utf8'));
    for (const f of inputs) if (statSync(root + f).mtimeMs > built) return null;
    return new URL('../dist/llmc-run.mjs', import.meta.url).href;
  } catch {
    return null;
  }
}

const { main } = await import(runBundle() ?? '../dist/src/app/cli/main.js');
process.exitCode = await main(argv);

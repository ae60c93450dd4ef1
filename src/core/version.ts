import { readFileSync } from 'node:fs';

/** llmc's version, from package.json (works from src/ under vitest, from dist/ and from dist/llmc-run.mjs). */
export const LLMC_VERSION: string = (() => {
  for (const rel of ['../../package.json', '../../../package.json', '../package.json']) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(rel, import.meta.url), 'utf8'));
      if (pkg.name === 'llmc') return String(pkg.version);
    } catch {
      /* try the next */
    }
  }
  return '0.0.0';
})();

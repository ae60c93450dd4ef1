/**
 * The runtime core must run in a browser bundle: nothing reachable from src/exec/runtime/index.ts may
 * import a Node built-in or a package (node.ts, the file loader, is the one exception and is not reachable).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(__dirname, '..');

function importsOf(file: string): string[] {
  const src = readFileSync(file, 'utf8');
  const out: string[] = [];
  // Type-only imports are erased by every compiler and bundler: they reach nothing at run time.
  for (const m of src.matchAll(/(?:^|\n)\s*(?:import|export)\s+(?!type\s)[^'"]*?from\s+['"]([^'"]+)['"]/g)) out.push(m[1]);
  for (const m of src.matchAll(/import\(\s*['"]([^'"]+)['"]\s*\)/g)) out.push(m[1]);
  for (const m of src.matchAll(/(?:^|\n)\s*import\s+['"]([^'"]+)['"]/g)) out.push(m[1]); // side-effect imports
  return out;
}

describe('runtime core is browser-safe', () => {
  it('reaches no Node built-in and no package from src/exec/runtime/index.ts', () => {
    const seen = new Set<string>();
    const bad: string[] = [];
    const visit = (file: string) => {
      if (seen.has(file)) return;
      seen.add(file);
      for (const spec of importsOf(file)) {
        if (!spec.startsWith('.')) {
          bad.push(`${path.relative(ROOT, file)} imports ${spec}`);
          continue;
        }
        visit(path.resolve(path.dirname(file), spec.replace(/\.js$/, '.ts')));
      }
    };
    visit(path.join(ROOT, 'src/exec/runtime/index.ts'));
    expect(bad).toEqual([]);
    expect([...seen].map((f) => path.relative(ROOT, f))).toContain('src/exec/runtime/wasm.ts');
    expect([...seen].map((f) => path.relative(ROOT, f))).not.toContain('src/exec/runtime/node.ts');
  });
});

describe('runtime core as a browser bundle', () => {
  it('bundles with esbuild for platform=browser, and the bundle alone runs stories260K to the reference ids', async () => {
    const { promises: fsp } = await import('node:fs');
    const os = await import('node:os');
    const esbuild = await import('esbuild'); // vitest's own bundler (via vite)
    const tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-bundle-'));
    try {
      const outfile = path.join(tmp, 'runtime.mjs');
      await esbuild.build({ entryPoints: [path.join(ROOT, 'src/exec/runtime/index.ts')], bundle: true, platform: 'browser', format: 'esm', outfile, logLevel: 'silent' });
      const bundle = readFileSync(outfile, 'utf8');
      expect(bundle).not.toMatch(/require\(|from ['"]node:/);
      // Compile the artifact with the real CLI pipeline, then load it through the bundle only.
      const { openCheckpoint } = await import('../src/core/checkpoint/index.js');
      const { compile } = await import('../src/app/compile/compile.js');
      const { silentProgress } = await import('../src/core/util/progress.js');
      const stories = path.resolve(ROOT, 'fixtures/models/stories260K');
      const source = await openCheckpoint(stories);
      const art = path.join(tmp, 'art');
      await compile({ source, target: 'ts', outDir: art, passes: [], quant: 'F32', progress: silentProgress, note: () => {} });
      await source.close();
      const rt = await import(outfile);
      const model = await rt.load(
        { manifest: readFileSync(path.join(art, 'llmc-manifest.json'), 'utf8'), weights: rt.bufferSource(new Uint8Array(readFileSync(path.join(art, 'weights.bin')))) },
        { verifyChecksums: true },
      );
      const ref = JSON.parse(readFileSync(path.join(stories, 'reference.json'), 'utf8'));
      const out: number[] = [];
      for await (const id of model.generate(ref.prompt_ids, { maxTokens: ref.greedy_ids.length, stopTokens: [] })) out.push(id);
      expect(out).toEqual(ref.greedy_ids);
    } finally {
      await fsp.rm(tmp, { recursive: true, force: true });
    }
  });
});

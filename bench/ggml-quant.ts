/**
 * ggml's reference quantizers as a baseline: builds bench/c/ggml-quantize.c against the
 * ggml-quants.c of the checkout named by GGML_SRC twice — gcc -O2 (a portable build) and
 * -O3 -march=native (ggml's default Release + GGML_NATIVE build) — and times the types on the given
 * input; a reason string when it cannot.
 */
import { execFile } from 'node:child_process';
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { REPO_ROOT } from './harness.js';

const run = promisify(execFile);

const BUILDS: Record<string, string[]> = { '-O2': ['-O2'], '-O3 -march=native': ['-O3', '-march=native'] };

/** Per build, best seconds per type for quantizing all of `x` (rows of `row`); or why it was skipped. */
export async function ggmlQuantizeSeconds(x: Float32Array, row: number, budgetMs: number, types: string[]): Promise<Record<string, Record<string, number>> | string> {
  const root = process.env.GGML_SRC;
  if (!root) return 'skipped: set GGML_SRC to a ggml checkout (git clone https://github.com/ggml-org/ggml) to compare with its reference quantizers';
  // A ggml checkout has src/ and include/; llama.cpp has them under ggml/.
  const base = existsSync(path.join(root, 'src/ggml-quants.c')) ? root : path.join(root, 'ggml');
  if (!existsSync(path.join(base, 'src/ggml-quants.c'))) return `skipped: no src/ggml-quants.c under GGML_SRC=${root}`;
  const work = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-ggml-quant-'));
  try {
    const input = path.join(work, 'x.f32');
    await fsp.writeFile(input, new Uint8Array(x.buffer, x.byteOffset, x.byteLength));
    const out: Record<string, Record<string, number>> = {};
    for (const [name, flags] of Object.entries(BUILDS)) {
      const exe = path.join(work, `ggml-quantize${flags.join('')}`);
      try {
        await run('gcc', [...flags, `-I${base}/src`, `-I${base}/include`, path.join(base, 'src/ggml-quants.c'), path.join(REPO_ROOT, 'bench/c/ggml-quantize.c'), '-lm', '-o', exe]);
      } catch (e) {
        return `skipped: gcc could not build the ggml harness (${(e as Error).message.split('\n')[0]})`;
      }
      const { stdout } = await run(exe, [input, String(row), String(budgetMs), ...types]);
      out[name] = JSON.parse(stdout) as Record<string, number>;
    }
    return out;
  } finally {
    await fsp.rm(work, { recursive: true, force: true });
  }
}

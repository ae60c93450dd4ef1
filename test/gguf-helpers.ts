/** Shared by the gguf tests: compile through the real driver, run real llama.cpp (node-llama-cpp). */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { gguf } from '@huggingface/gguf';
import path from 'node:path';
import { compile } from '../src/app/compile/compile.js';
import { openCheckpoint, type ModelSource } from '../src/core/checkpoint/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import type { Manifest } from '../src/core/records/manifest.js';

export const ROOT = path.resolve(__dirname, '..');
export const STORIES = path.resolve(ROOT, 'fixtures/models/stories260K');

export async function compileGguf(
  source: string | ModelSource,
  outDir: string,
  opts: { quant?: string; tensorTypes?: [string, string][] } = {},
): Promise<{ manifest: Manifest; notes: string[]; file: string }> {
  const src = typeof source === 'string' ? await openCheckpoint(source) : source;
  const notes: string[] = [];
  try {
    const manifest = await compile({
      source: src,
      target: 'gguf',
      outDir,
      passes: [],
      quant: opts.quant, tensorTypes: (opts.tensorTypes ?? []).map(([p, t]) => ({ pattern: new RegExp(p), type: t })),
      progress: silentProgress,
      note: (m) => notes.push(m),
    });
    return { manifest, notes, file: path.join(outDir, 'model.gguf') };
  } finally {
    if (typeof source === 'string') await (src as unknown as { close(): Promise<void> }).close();
  }
}

type Token = import('node-llama-cpp').Token;
type Llama = Awaited<ReturnType<typeof import('node-llama-cpp')['getLlama']>>;
let llamaP: Promise<Llama> | undefined;

/** One CPU-only llama.cpp instance (the prebuilt binaries inside node-llama-cpp; never builds). */
export async function llama(): Promise<Llama> {
  llamaP ??= import('node-llama-cpp').then(({ getLlama, LlamaLogLevel }) =>
    getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error }),
  );
  return llamaP;
}

/**
 * Greedy continuation of `prompt` (token ids, no BOS added) by llama.cpp. `f32KvCache`: the KV cache in
 * F32 rather than llama.cpp's default F16, for comparisons with a float32 reference.
 */
export async function llamaGreedy(modelPath: string, prompt: number[], n: number, opts: { f32KvCache?: boolean } = {}): Promise<number[]> {
  const l = await llama();
  const model = await l.loadModel({ modelPath });
  try {
    const kv = opts.f32KvCache ? ({ experimentalKvCacheKeyType: 'F32', experimentalKvCacheValueType: 'F32' } as const) : {};
    const ctx = await model.createContext({ contextSize: 256, threads: 1, ...kv });
    try {
      const out: number[] = [];
      if (n > 0) {
        for await (const t of ctx.getSequence().evaluate(prompt as Token[], { temperature: 0 })) {
          out.push(t);
          if (out.length >= n) break;
        }
      }
      return out;
    } finally {
      await ctx.dispose();
    }
  } finally {
    await model.dispose();
  }
}

/** llama.cpp's tokenization of `text` (no BOS/EOS added). */
export async function llamaTokenize(modelPath: string, text: string): Promise<number[]> {
  const l = await llama();
  const model = await l.loadModel({ modelPath });
  try {
    return [...model.tokenize(text)];
  } finally {
    await model.dispose();
  }
}

/** Length of the common prefix, and the fraction of equal positions. */
export function agreement(a: readonly number[], b: readonly number[]): { prefix: number; positional: number } {
  let prefix = 0;
  while (prefix < a.length && prefix < b.length && a[prefix] === b[prefix]) prefix++;
  const n = Math.min(a.length, b.length);
  let same = 0;
  for (let i = 0; i < n; i++) if (a[i] === b[i]) same++;
  return { prefix, positional: n ? same / n : 0 };
}

/** llama.cpp's logits after each token of `tokens` (teacher-forced, one row per position). */
export async function llamaLogits(modelPath: string, tokens: number[], nVocab: number): Promise<Float32Array[]> {
  const l = await llama();
  const model = await l.loadModel({ modelPath });
  try {
    const ctx = await model.createContext({ contextSize: 256, threads: 1 });
    try {
      const res = await ctx.getSequence().controlledEvaluate(tokens.map((t) => [t as Token, { generateNext: { logits: true } }] as const));
      return res.map((r) => {
        const row = new Float32Array(nVocab);
        for (const [tok, v] of r?.next?.logits ?? new Map<number, number>()) row[tok] = v;
        return row;
      });
    } finally {
      await ctx.dispose();
    }
  } finally {
    await model.dispose();
  }
}

/** RMS of (a - b) over RMS of b, across all positions. */
export function relRms(a: Float32Array[], b: Float32Array[]): number {
  let num = 0;
  let den = 0;
  for (let p = 0; p < a.length; p++) {
    for (let i = 0; i < a[p].length; i++) {
      num += (a[p][i] - b[p][i]) ** 2;
      den += b[p][i] ** 2;
    }
  }
  return Math.sqrt(num / den);
}

/**
 * llama.cpp's own Python package gguf-py (its GGUF reader, writer and scripts), from the llama.cpp
 * source that node-llama-cpp ships as a git bundle (llama/gitRelease.bundle), extracted into `dir`:
 * the PYTHONPATH to use, or why not (no git, python3, numpy or bundle here).
 */
export function llamaCppGgufPy(dir: string): { pythonPath: string } | { skip: string } {
  const bundle = path.join(ROOT, 'node_modules/node-llama-cpp/llama/gitRelease.bundle');
  if (!existsSync(bundle)) return { skip: 'node-llama-cpp ships no llama.cpp source bundle here' };
  const ok = (cmd: string, args: string[], cwd?: string) => spawnSync(cmd, args, { cwd, stdio: 'ignore' }).status === 0;
  if (!ok('python3', ['-c', 'import numpy'])) return { skip: 'python3 with numpy is not available' };
  const repo = path.join(dir, 'llama.cpp');
  mkdirSync(repo, { recursive: true });
  if (!ok('git', ['init', '-q'], repo) || !ok('git', ['fetch', '-q', bundle, 'HEAD'], repo)) return { skip: 'git cannot read the llama.cpp bundle' };
  const tar = spawnSync('sh', ['-c', 'git archive FETCH_HEAD gguf-py | tar -x'], { cwd: repo, stdio: 'ignore' });
  if (tar.status !== 0) return { skip: 'git archive of gguf-py failed' };
  // gguf-py's scripts draw progress bars with tqdm; a silent stand-in keeps them from needing it.
  writeFileSync(path.join(repo, 'tqdm.py'), 'class tqdm:\n    def __init__(self, *a, **k): pass\n    def update(self, n): pass\n    def close(self): pass\n');
  return { pythonPath: [path.join(repo, 'gguf-py'), repo].join(path.delimiter) };
}

/**
 * Metadata (values as JSON), tensor infos and each tensor's bytes and sha256 of a GGUF file, tensors by
 * name (llama-quantize writes them in its loader's order, llmc in convert_hf_to_gguf.py's).
 */
export async function ggufContents(file: string) {
  const { metadata, tensorInfos, tensorDataOffset } = await gguf(file, { allowLocalFile: true });
  const bytes = readFileSync(file);
  const start = Number(tensorDataOffset);
  const json = (v: unknown) => JSON.stringify(v, (_k, x) => (typeof x === 'bigint' ? `${x}n` : x));
  const meta = Object.fromEntries(Object.entries(metadata).map(([k, v]) => [k, json(v)]));
  const tensors = tensorInfos.map((t, i) => {
    const from = start + Number(t.offset);
    const to = i + 1 < tensorInfos.length ? start + Number(tensorInfos[i + 1].offset) : bytes.length;
    return { name: t.name, type: t.dtype, shape: t.shape.map(Number), sha256: createHash('sha256').update(bytes.subarray(from, to)).digest('hex'), data: bytes.subarray(from, to) };
  });
  tensors.sort((x, y) => (x.name < y.name ? -1 : x.name > y.name ? 1 : 0));
  return { meta, tensors };
}

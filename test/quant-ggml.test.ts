/**
 * The quantizers against real ggml: llama.cpp's own libggml-base.so (shipped prebuilt inside
 * node-llama-cpp) is driven through a tiny C shim that calls ggml_quantize_chunk (without an imatrix:
 * the quantize_row_*_ref paths llama-quantize uses; and with one: the quant_weights paths of
 * `llama-quantize --imatrix`) and the type's to_float. Every type must give the same bytes block for
 * block (for NaN/inf inputs too), and our dequantizer the same floats bit for bit.
 * Skipped (with a note) where gcc or the library is not available.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import {
  closeQuantWorkers, dequantize, quantize, quantizeParallel, QUANT_TYPES, resolveWorkerScript, type QuantType,
} from '../src/core/quant/index.js';
import { useWasmKernels } from '../src/core/quant/kquants.js';
import { quantizeRowsWeighted, WEIGHTED_TYPES } from '../src/core/quant/weighted.js';
import { Rng } from '../src/core/util/rng.js';
import { hasGcc, LLAMA_BINS } from './native.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const STORIES = path.resolve(ROOT, 'fixtures/models/stories260K');
const LIB = path.join(LLAMA_BINS, 'libggml-base.so');
const TYPES = Object.keys(QUANT_TYPES) as QuantType[];

const AVAILABLE = fs.existsSync(LIB) && hasGcc();
if (!AVAILABLE) console.warn(`quant-ggml: skipped (needs gcc and ${LIB})`);

/** Our own shim: ggml is called, not copied. argv: lib ggml_type n_per_row q|d [imatrix.f32]; data on stdin/stdout. */
const SHIM = String.raw`
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct traits { const char *name; int64_t blck; int64_t inter; size_t tsize; bool isq;
                void (*to_float)(const void *, float *, int64_t); void (*from_ref)(const float *, void *, int64_t); };
typedef size_t (*qchunk_t)(int, const float *, void *, int64_t, int64_t, int64_t, const float *);
typedef const struct traits *(*traits_t)(int);
static unsigned char *slurp(size_t *n) {
  size_t cap = 1 << 20, len = 0, r; unsigned char *b = malloc(cap);
  while ((r = fread(b + len, 1, cap - len, stdin)) > 0) { len += r; if (len == cap) { cap *= 2; b = realloc(b, cap); } }
  *n = len; return b;
}
int main(int argc, char **argv) {
  if (argc != 5 && argc != 6) return 2;
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "%s\n", dlerror()); return 3; }
  qchunk_t quantize_chunk = (qchunk_t)dlsym(h, "ggml_quantize_chunk");
  traits_t get_traits = (traits_t)dlsym(h, "ggml_get_type_traits");
  if (!quantize_chunk || !get_traits) return 4;
  int type = atoi(argv[2]); int64_t n_per_row = atoll(argv[3]);
  const struct traits *t = get_traits(type);
  size_t n; unsigned char *in = slurp(&n);
  float *imatrix = NULL;
  if (argc == 6) {
    FILE *f = fopen(argv[5], "rb"); if (!f) return 6;
    imatrix = malloc(n_per_row * 4);
    if (fread(imatrix, 4, n_per_row, f) != (size_t)n_per_row) return 7;
    fclose(f);
  }
  if (argv[4][0] == 'q') {
    int64_t rows = (int64_t)(n / 4) / n_per_row;
    size_t bytes = rows * (n_per_row / t->blck) * t->tsize;
    void *out = malloc(bytes + 1);
    if (quantize_chunk(type, (const float *)in, out, 0, rows, n_per_row, imatrix) != bytes) return 5;
    fwrite(out, 1, bytes, stdout);
  } else {
    int64_t count = (int64_t)(n / t->tsize) * t->blck;
    float *out = malloc(count * 4 + 4);
    if (t->to_float) t->to_float(in, out, count); else memcpy(out, in, count * 4);
    fwrite(out, 4, count, stdout);
  }
  return 0;
}
`;

let shim = '';
let tmp = '';

function ggmlQuantize(type: QuantType, x: Float32Array, rowLength: number, imatrix?: Float32Array): Uint8Array {
  const args = [LIB, String(QUANT_TYPES[type].ggmlType), String(rowLength), 'q'];
  if (imatrix) {
    const f = path.join(tmp, `imatrix-${rowLength}.f32`);
    fs.writeFileSync(f, Buffer.from(imatrix.buffer, imatrix.byteOffset, imatrix.byteLength));
    args.push(f);
  }
  const out = execFileSync(shim, args, {
    input: Buffer.from(x.buffer, x.byteOffset, x.byteLength), maxBuffer: 1 << 30,
  });
  return new Uint8Array(out.buffer, out.byteOffset, out.length);
}

function ggmlDequantize(type: QuantType, bytes: Uint8Array): Float32Array {
  const out = execFileSync(shim, [LIB, String(QUANT_TYPES[type].ggmlType), '256', 'd'], { input: Buffer.from(bytes), maxBuffer: 1 << 30 });
  return new Float32Array(out.buffer.slice(out.byteOffset, out.byteOffset + out.length));
}

/** First differing byte, reported with its block and offset so a failure points at the field. */
function firstByteDiff(type: QuantType, a: Uint8Array, b: Uint8Array): string | null {
  if (a.length !== b.length) return `length ${a.length} != ${b.length}`;
  const ts = QUANT_TYPES[type].typeSize;
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) return `byte ${i} (block ${Math.floor(i / ts)}, offset ${i % ts}): ours ${a[i]} ggml ${b[i]}`;
  }
  return null;
}

/** Bitwise float comparison (so -0 != +0); any NaN matches any NaN (payloads of garbage scales are not a format property). */
function firstFloatDiff(a: Float32Array, b: Float32Array): string | null {
  if (a.length !== b.length) return `length ${a.length} != ${b.length}`;
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < a.length; i++) {
    if (ua[i] !== ub[i] && !(Number.isNaN(a[i]) && Number.isNaN(b[i]))) return `element ${i}: ours ${a[i]} ggml ${b[i]}`;
  }
  return null;
}

/** Inputs that walk every branch: scales across 40 orders of magnitude, zero/constant/one-sided blocks, ties, outliers. */
function syntheticInputs(): Map<string, Float32Array> {
  const rng = new Rng(20261122);
  const cases = new Map<string, Float32Array>();
  const gauss = new Float32Array(256 * 96);
  for (let i = 0; i < gauss.length; i++) gauss[i] = rng.normal() * Math.exp(((i >> 8) % 24) - 16); // 1e-7 .. 1e3 per block
  cases.set('gaussian, per-block scale 1e-7..1e3', gauss);

  const special = new Float32Array(256 * 40);
  const blocks: ((i: number) => number)[] = [
    () => 0, () => 1, () => -1, () => 0.3, () => -7e-6,
    (i) => (i === 37 ? 100 : rng.normal() * 0.01), // one outlier
    (i) => (i === 200 ? -100 : rng.normal() * 0.01), // one negative outlier
    (i) => Math.abs(rng.normal()), (i) => -Math.abs(rng.normal()), // one-sided
    (i) => ((i % 64) - 32) / 8, (i) => (i % 32) / 8, (i) => ((i * 7) % 17) - 8, // ties on k/8 and integer grids
    (i) => (i % 2 ? 1 : -1) * 2 ** ((i % 40) - 20), // powers of two
    (i) => (i % 16 === 0 ? 1 : 0), (i) => (i < 128 ? 0 : rng.normal()), // sparse, half-empty
    () => rng.normal() * 1e-16, () => rng.normal() * 1e-14, () => rng.normal() * 1e-20, // around GROUP_MAX_EPS
    () => rng.normal() * 1e-40, // f32 subnormals
    () => rng.normal() * 1e-5, () => rng.normal() * 3e-8, // f16-subnormal scales
    () => rng.normal() * 3e4, () => (rng.next() < 0.5 ? 65504 : -65504) * rng.next(), // near the f16 limit
    () => rng.normal() * 1e6, // scales overflow f16 for some types
    (i) => (i % 32 === 5 ? 8 : i % 32 === 9 ? -8 : rng.normal()), // equal |max| of both signs
    (i) => (i % 32 === 5 ? -8 : i % 32 === 9 ? 8 : rng.normal()),
    () => rng.next(), () => -rng.next(), () => rng.next() * 1e-3 + 5, // offset blocks
    (i) => Math.sin(i) * (1 + (i % 16)), (i) => ((i % 16) - 8) * 0.125, (i) => (i % 16 < 8 ? 1 : -1),
    () => (rng.next() < 0.9 ? 0 : rng.normal()), () => Math.round(rng.normal() * 4) / 4,
    () => rng.normal() * 0.02, () => rng.normal() * 0.02 + 0.01, () => rng.normal(), () => rng.normal() ** 3,
  ];
  for (let b = 0; b < 40; b++) for (let i = 0; i < 256; i++) special[b * 256 + i] = blocks[b % blocks.length](i);
  cases.set('special blocks', special);

  // Non-finite and near-FLT_MAX values: ggml's arithmetic on them (NaN scales, inf products) is reproduced too.
  const wild = new Float32Array(256 * 6);
  for (let i = 0; i < wild.length; i++) wild[i] = Math.sin(i) * 0.1;
  [[5, Infinity], [256 + 7, -Infinity], [512 + 9, NaN], [768 + 3, 3e38], [768 + 4, -3e38], [1024 + 100, NaN], [1024 + 101, Infinity]]
    .forEach(([i, v]) => { wild[i] = v; });
  cases.set('inf / NaN / +-3e38', wild);
  return cases;
}

describe.skipIf(!AVAILABLE)('quantizers are byte-identical to ggml (libggml-base from node-llama-cpp)', () => {
  const inputs = new Map<string, Float32Array>();

  beforeAll(async () => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'llmc-quant-ggml-'));
    fs.writeFileSync(path.join(tmp, 'shim.c'), SHIM);
    shim = path.join(tmp, 'shim');
    execFileSync('gcc', ['-O1', '-o', shim, path.join(tmp, 'shim.c'), '-ldl']);
    for (const [k, v] of syntheticInputs()) inputs.set(k, v);
    // Real weights: every stories260K tensor, flattened into rows of 256.
    const ckpt = await openCheckpoint(STORIES);
    try {
      const parts: Float32Array[] = [];
      for (const t of ckpt.tensors) parts.push(await ckpt.readF32(t.name));
      const total = parts.reduce((s, p) => s + p.length, 0);
      const all = new Float32Array(Math.floor(total / 256) * 256);
      let o = 0;
      for (const p of parts) {
        const take = Math.min(p.length, all.length - o);
        all.set(p.subarray(0, take), o);
        o += take;
      }
      inputs.set('stories260K weights', all);
    } finally {
      await ckpt.close();
    }
  });

  afterAll(async () => {
    await closeQuantWorkers();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  test.each(TYPES)('%s: quantize == ggml_quantize_chunk, dequantize == ggml to_float', (type) => {
    let blocks = 0;
    for (const [name, x] of inputs) {
      const ours = quantize(type, x, 256);
      const ref = ggmlQuantize(type, x, 256);
      expect(firstByteDiff(type, ours, ref), `${type} on ${name}`).toBeNull();
      expect(firstFloatDiff(dequantize(type, ref, x.length), ggmlDequantize(type, ref)), `${type} dequantize on ${name}`).toBeNull();
      blocks += ref.length / QUANT_TYPES[type].typeSize;
    }
    console.log(`${type}: ${blocks} blocks identical to ggml`);
  });

  test.each(TYPES)('%s: dequantize of arbitrary bytes (any f16 scale, NaN/inf included) == ggml to_float', (type) => {
    const rng = new Rng(7 + QUANT_TYPES[type].ggmlType);
    const bytes = new Uint8Array(QUANT_TYPES[type].typeSize * 512);
    for (let i = 0; i < bytes.length; i++) bytes[i] = rng.int(256);
    const count = (bytes.length / QUANT_TYPES[type].typeSize) * QUANT_TYPES[type].blockSize;
    expect(firstFloatDiff(dequantize(type, bytes, count), ggmlDequantize(type, bytes))).toBeNull();
  });

  test('K-quants: the wasm kernels are in use, and the JS fallback gives ggml\'s bytes too', () => {
    expect(useWasmKernels(true)).toBe(true); // Node 20 has WebAssembly SIMD: the tests above ran the kernels
    try {
      expect(useWasmKernels(false)).toBe(false);
      for (const type of ['Q2_K', 'Q3_K', 'Q4_K', 'Q5_K', 'Q6_K'] as QuantType[]) {
        for (const [name, x] of inputs) {
          if (name === 'stories260K weights') continue; // the synthetic cases cover the edge cases; keep it fast
          expect(firstByteDiff(type, quantize(type, x, 256), ggmlQuantize(type, x, 256)), `${type} (JS) on ${name}`).toBeNull();
        }
      }
    } finally {
      useWasmKernels(true);
    }
  });

  test('row lengths other than 256: 32-block types on rows of 96, K-quants on rows of 512', () => {
    const rng = new Rng(3);
    const x = new Float32Array(96 * 512);
    for (let i = 0; i < x.length; i++) x[i] = rng.normal() * (1 + (i % 96));
    for (const type of ['Q8_0', 'Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'F16', 'BF16'] as QuantType[]) {
      expect(firstByteDiff(type, quantize(type, x, 96), ggmlQuantize(type, x, 96)), type).toBeNull();
    }
    for (const type of ['Q2_K', 'Q3_K', 'Q4_K', 'Q5_K', 'Q6_K'] as QuantType[]) {
      expect(firstByteDiff(type, quantize(type, x, 512), ggmlQuantize(type, x, 512)), type).toBeNull();
    }
  });

  /** An importance row as llama-quantize feeds it (mean x² per column): spread over decades, some zeros. */
  function importance(n: number, seed: number): Float32Array {
    const rng = new Rng(seed);
    const w = new Float32Array(n);
    for (let i = 0; i < n; i++) w[i] = i % 53 === 7 ? 0 : rng.next() * Math.exp(rng.normal() * 2);
    return w;
  }

  test.each([...WEIGHTED_TYPES])('%s with an importance matrix == ggml_quantize_chunk(imatrix)', (type) => {
    const rowLength = 256;
    const qw = importance(rowLength, QUANT_TYPES[type].ggmlType);
    let blocks = 0;
    for (const [name, full] of inputs) {
      // the weighted searches are slow in JS: the synthetic cases whole, 128 rows of the real weights
      const x = name === 'stories260K weights' ? full.subarray(0, 256 * 128) : full;
      const ours = new Uint8Array((x.length / QUANT_TYPES[type].blockSize) * QUANT_TYPES[type].typeSize);
      quantizeRowsWeighted(type, x, rowLength, qw, ours);
      const ref = ggmlQuantize(type, x, rowLength, qw);
      expect(firstByteDiff(type, ours, ref), `${type} with imatrix on ${name}`).toBeNull();
      // the importance changes the result (it is not ignored)
      if (name === 'stories260K weights') expect(firstByteDiff(type, ours, ggmlQuantize(type, x, rowLength)), type).not.toBeNull();
      blocks += ref.length / QUANT_TYPES[type].typeSize;
    }
    console.log(`${type} + imatrix: ${blocks} blocks identical to ggml`);
  });

  test('with an importance matrix on rows of 512 (K-quants, IQ4_XS) and 96 (32-block types): per-row sigma and offsets', () => {
    const rng = new Rng(11);
    const x = new Float32Array(96 * 64);
    for (let i = 0; i < x.length; i++) x[i] = rng.normal() * (1 + (i % 96));
    for (const type of WEIGHTED_TYPES) {
      const rowLength = QUANT_TYPES[type].blockSize === 32 ? 96 : 512;
      const qw = importance(rowLength, 5);
      const ours = new Uint8Array((x.length / QUANT_TYPES[type].blockSize) * QUANT_TYPES[type].typeSize);
      quantizeRowsWeighted(type, x, rowLength, qw, ours);
      expect(firstByteDiff(type, ours, ggmlQuantize(type, x, rowLength, qw)), type).toBeNull();
    }
  });

  test('quantizeParallel (worker_threads) gives ggml\'s bytes too', async () => {
    expect(resolveWorkerScript()).not.toBeNull();
    const x = inputs.get('gaussian, per-block scale 1e-7..1e3')!;
    const big = new Float32Array(x.length * 4);
    for (let k = 0; k < 4; k++) big.set(x, k * x.length);
    for (const type of ['Q8_0', 'Q4_K', 'Q6_K'] as QuantType[]) {
      const par = await quantizeParallel(type, big, 1024, { threads: 2 });
      expect(firstByteDiff(type, par, ggmlQuantize(type, big, 1024)), type).toBeNull();
    }
  });
});

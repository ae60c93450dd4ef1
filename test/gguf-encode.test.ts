/**
 * The fast bf16 paths of the gguf backend and the hashing that moved off the main thread.
 * References are independent of the code under test: f32ToF16 (half.ts's scalar RNE conversion) and
 * src/core/quant's quantize() on decoded values for the encoders, node:crypto over the whole bytes for hashes.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, openSync, writeSync, closeSync, appendFileSync, mkdirSync, copyFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ChunkEncoder } from '../src/core/quant/encode.js';
import { allFiniteBf16, simdKernels, bf16ToF16Into, bf16ToF16IntoJs, bf16ToF32Into, bf16ToQ8_0Into, bf16ToQ8_0IntoJs, copyF16Into, f16ToF32Into } from '../src/core/quant/bf16.js';
import { quantize, type QuantType } from '../src/core/quant/index.js';
import { quantizeQ4_0Js, quantizeQ4_1Js, quantizeQ5_0Js, quantizeQ5_1Js, quantizeQ8_0Js } from '../src/core/quant/legacy.js';
import { bf16ToF16Bits, bf16ToF16Table, bf16ToF32, f16ToF32, f32ToF16 } from '../src/core/util/half.js';
import { AtomicFile, knownSha256 } from '../src/core/util/atomic.js';
import { BackgroundSha256, sha256Files, WORKER_MIN_BYTES } from '../src/core/util/sha256.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { writeSafetensors } from '../src/core/checkpoint/safetensors.js';
import { generateFixture } from '../fixtures/generate.js';
import { compileGguf } from './gguf-helpers.js';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-gguf-encode-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const isFinite16 = (h: number) => (h & 0x7f80) !== 0x7f80;
const ALL = Uint16Array.from({ length: 65536 }, (_, i) => i);
const FINITE = ALL.filter(isFinite16);
const decode = (bits: Uint16Array) => new Float32Array(Uint32Array.from(bits, (b) => b << 16).buffer);
const bytes = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

/** Deterministic pseudo-random numbers (xorshift), so failures reproduce. */
function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 4294967296;
  };
}

describe('bf16 → F16 bits', () => {
  it('bf16ToF16Bits equals f32ToF16(bf16ToF32(h)) for all 65536 inputs', () => {
    let mismatches = 0;
    for (let h = 0; h < 65536; h++) if (bf16ToF16Bits(h) !== f32ToF16(bf16ToF32(h))) mismatches++;
    expect(mismatches).toBe(0);
    // Spot checks by hand: 1.0, -2.0, 65504 (f16 max) → itself, 65536 → inf, 2^-24 → smallest subnormal.
    expect(bf16ToF16Bits(0x3f80)).toBe(0x3c00);
    expect(bf16ToF16Bits(0xc000)).toBe(0xc000);
    expect(bf16ToF16Bits(0x4780)).toBe(0x7c00);
    expect(bf16ToF16Bits(0x3380)).toBe(0x0001);
    expect(bf16ToF16Bits(0x3300)).toBe(0x0000); // 2^-25: a tie, rounds to even (0)
    expect(bf16ToF16Bits(0x3340)).toBe(0x0001); // 1.5 * 2^-25 rounds up
  });
});

it('the WebAssembly SIMD kernels are available here (else the fast paths below test JS twice)', () => {
  expect(simdKernels()).not.toBeNull();
});

/**
 * Runs a kernel with input and output in the kernels' arena (in place, no copy through the scratch
 * area), as the gguf stream does; odd offsets and lengths included.
 */
function inArena<D extends Uint16Array | Uint8Array>(fn: (src: Uint16Array, dst: D) => boolean) {
  return (src: Uint16Array, dst: D): boolean => {
    const k = simdKernels()!.acquireArena()!;
    const a = k.buffer(0, src.byteLength + 2)!;
    const inp = new Uint16Array(a.buffer, a.byteOffset + 2, src.length);
    inp.set(src);
    const b = k.buffer(1, dst.byteLength + 4)!;
    const out = new (dst.constructor as new (buf: ArrayBufferLike, off: number, n: number) => D)(b.buffer, b.byteOffset + 4, dst.length);
    const ok = fn(inp, out);
    dst.set(out as never);
    k.release();
    return ok;
  };
}

/** Each fast path three ways: the dispatcher (wasm here), in place in the arena, and the JS fallback. */
const PATHS = [
  { name: 'dispatch', bf16ToF16Into, bf16ToQ8_0Into },
  { name: 'arena', bf16ToF16Into: inArena(bf16ToF16Into), bf16ToQ8_0Into: inArena(bf16ToQ8_0Into) },
  { name: 'js', bf16ToF16Into: bf16ToF16IntoJs, bf16ToQ8_0Into: bf16ToQ8_0IntoJs },
];

const toF32Bytes = (s: Uint16Array, d: Uint8Array) => bf16ToF32Into(s, new Float32Array(d.buffer, d.byteOffset, d.length / 4));
describe.each([
  { name: 'dispatch', toF32: toF32Bytes },
  { name: 'arena', toF32: inArena(toF32Bytes) },
])('bf16 → f32 ($name)', ({ toF32 }) => {
  it('decodes every bf16 value exactly and flags Inf/NaN (odd lengths too)', () => {
    const want = decode(ALL);
    for (const n of [65536, 65531]) {
      const got = new Uint8Array(n * 4);
      expect(toF32(ALL.subarray(0, n), got)).toBe(false); // ALL holds Inf and NaN
      expect(Buffer.from(got).equals(bytes(want.subarray(0, n)))).toBe(true);
    }
    const finite = FINITE.subarray(0, 1003);
    const got = new Uint8Array(finite.length * 4);
    expect(toF32(finite, got)).toBe(true);
    expect(Buffer.from(got).equals(bytes(decode(finite)))).toBe(true);
  });
});

const f16ToF32Bytes = (s: Uint16Array, d: Uint8Array) => f16ToF32Into(s, new Float32Array(d.buffer, d.byteOffset, d.length / 4));
describe.each([
  { name: 'dispatch', toF32: f16ToF32Bytes },
  { name: 'arena', toF32: inArena(f16ToF32Bytes) },
])('f16 → f32 ($name)', ({ toF32 }) => {
  it('decodes every f16 value exactly (f16ToF32, the scalar reference) and flags Inf/NaN', () => {
    const finite16 = ALL.filter((h) => (h & 0x7c00) !== 0x7c00);
    const want = Float32Array.from(finite16, f16ToF32);
    for (const n of [finite16.length, finite16.length - 5]) {
      const got = new Uint8Array(n * 4);
      expect(toF32(finite16.subarray(0, n), got)).toBe(true);
      expect(Buffer.from(got).equals(bytes(want.subarray(0, n)))).toBe(true);
    }
    // By hand: 1.0, -2.0, the smallest subnormal 2^-24, the largest normal 65504.
    const got = new Uint8Array(16);
    expect(toF32(Uint16Array.of(0x3c00, 0xc000, 0x0001, 0x7bff), got)).toBe(true);
    expect([...new Float32Array(got.buffer)]).toEqual([1, -2, 2 ** -24, 65504]);
    for (const bad of [0x7c00, 0xfc00, 0x7e00, 0x7c01]) {
      const src = new Uint16Array(13).fill(0x3c00);
      src[9] = bad;
      expect(toF32(src, new Uint8Array(13 * 4))).toBe(false);
    }
  });
});

describe.each([
  { name: 'dispatch', copy: copyF16Into },
  { name: 'arena', copy: inArena(copyF16Into) },
])('f16 copy with the finite check ($name)', ({ copy }) => {
  it('copies every finite value as it is and flags any Inf/NaN, wherever it sits', () => {
    const finite16 = ALL.filter((h) => (h & 0x7c00) !== 0x7c00);
    for (const n of [finite16.length, finite16.length - 3]) {
      const dst = new Uint16Array(n);
      expect(copy(finite16.subarray(0, n), dst)).toBe(true);
      expect(bytes(dst).equals(bytes(finite16.subarray(0, n)))).toBe(true);
    }
    for (let pos = 0; pos < 19; pos++) {
      const src = new Uint16Array(19).fill(0x3c00);
      src[pos] = pos & 1 ? 0xfc00 : 0x7e01;
      expect(copy(src, new Uint16Array(19))).toBe(false);
    }
  });
});

describe.each(PATHS)('bf16 → F16 ($name)', ({ bf16ToF16Into }) => {
  it('bf16ToF16Into gives the bytes of quantize(F16) on the decoded values, aligned or not', () => {
    const ref = quantize('F16', decode(FINITE), FINITE.length);
    for (const off of [0, 1]) {
      const src = new Uint16Array(FINITE.length + 2);
      src.set(FINITE, off);
      const view = src.subarray(off, off + FINITE.length);
      const dst = new Uint16Array(FINITE.length + 1);
      expect(bf16ToF16Into(view, dst.subarray(off, off + FINITE.length))).toBe(true);
      expect(bytes(dst.subarray(off, off + FINITE.length)).equals(Buffer.from(ref))).toBe(true);
    }
    expect(bf16ToF16Table()[0x3f80]).toBe(0x3c00);
  });

  it('bf16ToF16Into on random pairs of finite values (both, one or neither in the f16 normal range)', () => {
    const r = rng(11);
    const src = Uint16Array.from({ length: 1 << 16 }, () => FINITE[(r() * FINITE.length) | 0]);
    const dst = new Uint16Array(src.length);
    expect(bf16ToF16Into(src, dst)).toBe(true);
    expect(bytes(dst).equals(Buffer.from(quantize('F16', decode(src), src.length)))).toBe(true);
  });

  it('reports any Inf/NaN, wherever it sits (word lanes and odd tail)', () => {
    const dst = new Uint16Array(7);
    for (const bad of [0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffff]) {
      for (let pos = 0; pos < 7; pos++) {
        const src = new Uint16Array(7).fill(0x3f80);
        src[pos] = bad;
        expect(bf16ToF16Into(src, dst)).toBe(false);
        expect(allFiniteBf16(src)).toBe(false);
      }
    }
    expect(allFiniteBf16(FINITE)).toBe(true);
  });
});

describe.each(PATHS)('bf16 → Q8_0 ($name)', ({ bf16ToQ8_0Into }) => {
  const blocks = 1 << 12;
  const r = rng(7);
  const cases: [string, () => number][] = [
    // weights-like: N(0, 0.02) rounded to bf16
    ['gaussian', () => { const f = new Float32Array([0.02 * Math.sqrt(-2 * Math.log(r() + 1e-12)) * Math.cos(6.283 * r())]); return new Uint32Array(f.buffer)[0] >>> 16; }],
    // any finite bit pattern: every exponent, subnormals, ±0
    ['random finite bits', () => { let v; do v = (r() * 65536) | 0; while (!isFinite16(v)); return v; }],
  ];
  for (const [name, gen] of cases) {
    it(`equals quantize(Q8_0) on the decoded values: ${name}`, () => {
      const src = Uint16Array.from({ length: blocks * 32 }, gen);
      const out = new Uint8Array(blocks * 34);
      expect(bf16ToQ8_0Into(src, out)).toBe(true);
      expect(Buffer.from(out).equals(Buffer.from(quantize('Q8_0', decode(src), 32)))).toBe(true);
    });
  }

  it('equals quantize(Q8_0) for blocks of one exponent band (ties, tiny and huge scales, zero blocks)', () => {
    const src = new Uint16Array(blocks * 32);
    for (let b = 0; b < blocks; b++) {
      const top = b % 5 === 0 ? (r() * 20) | 0 : (r() * 255) | 0; // many tiny scales (subnormal d)
      const spread = (r() * 12) | 0;
      for (let j = 0; j < 32; j++) {
        const e = Math.max(0, top - ((r() * (spread + 1)) | 0));
        src[b * 32 + j] = b % 97 === 0 ? (j & 1) << 15 : (r() < 0.5 ? 0x8000 : 0) | (e << 7) | ((r() * 128) | 0);
      }
    }
    const out = new Uint8Array(blocks * 34);
    expect(bf16ToQ8_0Into(src, out)).toBe(true);
    expect(Buffer.from(out).equals(Buffer.from(quantize('Q8_0', decode(src), 32)))).toBe(true);
  });

  it('reports a block holding an Inf or NaN', () => {
    const src = new Uint16Array(64).fill(0x3f80);
    src[40] = 0xff80;
    expect(bf16ToQ8_0Into(src, new Uint8Array(68))).toBe(false);
  });
});

/** The f32 → legacy-type kernels and their JS transcriptions (bytes per 32-value block). */
const F32_KERNELS = [
  { type: 'Q8_0' as const, size: 34, wasm: (x: Float32Array, y: Uint8Array) => simdKernels()!.f32ToQ8_0(x, y), js: quantizeQ8_0Js },
  ...([['Q4_0', 18, quantizeQ4_0Js], ['Q5_0', 22, quantizeQ5_0Js], ['Q4_1', 20, quantizeQ4_1Js], ['Q5_1', 24, quantizeQ5_1Js]] as const).map(([type, size, js]) => ({
    type, size, js, wasm: (x: Float32Array, y: Uint8Array) => simdKernels()!.f32ToLegacy(type, x, y),
  })),
];

describe.each(F32_KERNELS)('f32 → $type: the WebAssembly SIMD kernel', ({ type, size, wasm, js }) => {
  // The JS transcriptions are checked against libggml in quant-ggml.test.ts (which, through
  // quantize(), also checks the kernels); here the two paths meet on wilder inputs.
  const r = rng(5);
  const n = 32 * 8192;
  const cases: [string, () => Float32Array][] = [
    ['weights-like', () => Float32Array.from({ length: n }, () => (r() - 0.5) * 0.04)],
    ['ties: equal magnitudes of both signs, zero blocks led by -0', () => Float32Array.from({ length: n }, (_, i) => (i >> 5) % 7 === 0 ? -0 : (((i * 7) % 5) - 2) * 0.25)],
    ['zero extremes: blocks all >= 0 or all <= 0 with +0 and -0 in random order', () => Float32Array.from({ length: n }, (_, i) => {
      const sign = (i >> 5) & 1 ? -1 : 1;
      return r() < 0.3 ? (r() < 0.5 ? 0 : -0) : sign * r();
    })],
    ['any finite bits', () => {
      const bits = Uint32Array.from({ length: n }, () => { let v; do v = (r() * 2 ** 32) >>> 0; while (((v >>> 23) & 0xff) === 0xff); return v; });
      return new Float32Array(bits.buffer);
    }],
    ['blocks of one exponent band (subnormal and Inf scales, ties, zero blocks)', () => {
      const bits = new Uint32Array(n);
      for (let b = 0; b < n / 32; b++) {
        const top = b % 5 === 0 ? (r() * 30) | 0 : (r() * 254) | 0;
        for (let j = 0; j < 32; j++) {
          const e = Math.max(0, top - ((r() * 6) | 0));
          bits[b * 32 + j] = b % 97 === 0 ? ((j & 1) << 31) >>> 0 : ((r() < 0.5 ? 0x80000000 : 0) | (e << 23) | ((r() * 2 ** 23) | 0)) >>> 0;
        }
      }
      return new Float32Array(bits.buffer);
    }],
  ];
  for (const [name, gen] of cases) {
    it(`equals the JS path: ${name}`, () => {
      const x = gen();
      const a = new Uint8Array((n / 32) * size);
      const b = new Uint8Array((n / 32) * size);
      expect(wasm(x, a)).toBe(true);
      js(x, 0, n / 32, b, 0);
      expect(Buffer.from(a).equals(Buffer.from(b))).toBe(true);
    });
  }
  it('declines inputs with Inf or NaN (quantize() then takes the JS path)', () => {
    for (const bad of [NaN, Infinity, -Infinity]) {
      const x = new Float32Array(64).fill(0.5);
      x[40] = bad;
      expect(wasm(x, new Uint8Array(2 * size))).toBe(false);
      const viaJs = new Uint8Array(2 * size);
      js(x, 0, 2, viaJs, 0);
      expect(Buffer.from(quantize(type, x, 64)).equals(Buffer.from(viaJs))).toBe(true);
    }
  });
});

describe('ChunkEncoder on raw bf16 chunks', () => {
  const src = FINITE.subarray(0, 32 * 600);
  for (const type of ['F16', 'BF16', 'F32', 'Q8_0'] as QuantType[]) {
    it(`${type}: bytes of quantize(${type}) on the decoded values`, async () => {
      const enc = new ChunkEncoder();
      const chunk = { bf16: src, length: src.length, source: 't', offset: 0, failNonFinite: (): never => { throw new Error('unexpected'); } };
      const out = await enc.encode(type, chunk, 32 * 20);
      expect(Buffer.from(out).equals(Buffer.from(quantize(type, decode(src), 32 * 20)))).toBe(true);
    });
  }
});

describe('hashing off the main thread', () => {
  it('AtomicFile hashes a big sequential file while writing; the digest dies with any change', async () => {
    const file = path.join(tmp, 'big.bin');
    const f = await AtomicFile.open(file, { expectedSize: WORKER_MIN_BYTES + (5 << 20) });
    const h = createHash('sha256');
    const r = rng(3);
    let total = 0;
    while (total < WORKER_MIN_BYTES + (5 << 20)) {
      const piece = Buffer.alloc(1 + ((r() * (9 << 20)) | 0)); // pieces span ring slots and write pieces
      for (let i = 0; i < piece.length; i++) piece[i] = (total + i) % 251; // a misplaced byte shows
      h.update(piece);
      // Some pieces live in shared memory, as the arena's do: those are lent to the worker, not copied.
      const shared = r() < 0.5 ? new Uint8Array(new SharedArrayBuffer(piece.length + 3), 3, piece.length) : null;
      shared?.set(piece);
      await f.write(shared ?? piece);
      total += piece.length;
    }
    await f.commit();
    const want = h.digest('hex');
    expect(await knownSha256(file)).toBe(want);
    expect(createHash('sha256').update(readFileSync(file)).digest('hex')).toBe(want); // the bytes on disk
    appendFileSync(file, 'x');
    expect(await knownSha256(file)).toBeUndefined();
  });

  it('updates issued before the previous one is handed over keep their order and all settle (the GGUF writer overlaps them)', async () => {
    // Pieces bigger than the worker's ring (4 × 4 MB) issued back to back: several wait for a free
    // slot at once. A single waiter slot used to leave all but the last waiting forever (a compile
    // that wrote its whole temp file, then hung) and would have hashed their bytes out of order.
    const within = <T>(p: Promise<T>) => Promise.race([p, new Promise<never>((_, no) => setTimeout(() => no(new Error('an update never settled')), 20_000))]);
    const hasher = new BackgroundSha256();
    const h = createHash('sha256');
    const r = rng(11);
    const updates: Promise<void>[] = [];
    for (let k = 0; k < 6; k++) {
      const piece = Buffer.alloc((9 << 20) + k);
      for (let i = 0; i < piece.length; i += 4096) piece[i] = (k * 31 + i) & 0xff; // order shows in the digest
      h.update(piece);
      const shared = r() < 0.3 ? new Uint8Array(new SharedArrayBuffer(piece.length)) : null;
      shared?.set(piece);
      updates.push(hasher.update(shared ?? piece));
    }
    await within(Promise.all(updates));
    expect(await within(hasher.digest())).toBe(h.digest('hex'));

    // The same through AtomicFile.append as backends/gguf/emit.ts uses it: the next piece is written
    // while the one before may still be hashing.
    const file = path.join(tmp, 'overlapped.bin');
    const f = await AtomicFile.open(file, { expectedSize: WORKER_MIN_BYTES });
    const whole = createHash('sha256');
    let pending: Promise<void> = Promise.resolve();
    for (let k = 0, total = 0; total < WORKER_MIN_BYTES; k++) {
      const piece = Buffer.alloc(Math.min(18 << 20, WORKER_MIN_BYTES - total), k + 1);
      whole.update(piece);
      const { hashed } = await within(f.append(piece));
      await within(pending);
      pending = hashed;
      total += piece.length;
    }
    await within(pending);
    await f.commit();
    expect(await knownSha256(file)).toBe(whole.digest('hex'));
  });

  it('writeAt turns the running hash off (the manifest reads the file instead)', async () => {
    const file = path.join(tmp, 'patched.bin');
    const f = await AtomicFile.open(file, { expectedSize: WORKER_MIN_BYTES + 16 });
    await f.write(Buffer.alloc(WORKER_MIN_BYTES + 16, 1));
    await f.writeAt(Buffer.from([9]), 0);
    await f.commit();
    expect(await knownSha256(file)).toBeUndefined();
  });

  it('sha256Files (worker for big inputs, inline for small) equals a plain hash of prefix + bytes', async () => {
    const a = path.join(tmp, 'a.bin');
    const b = path.join(tmp, 'b.bin');
    writeFileSync(a, Buffer.alloc(WORKER_MIN_BYTES / 2 + 3, 5));
    writeFileSync(b, Buffer.alloc(WORKER_MIN_BYTES / 2 + 7, 6));
    const want = createHash('sha256').update('héllo').update(readFileSync(a)).update(readFileSync(b)).digest('hex');
    expect(await sha256Files([a, b], 'héllo')).toBe(want);
    expect(await sha256Files([a], 'héllo')).toBe(createHash('sha256').update('héllo').update(readFileSync(a)).digest('hex'));
  });
});

describe('compile from a BF16 or F16 checkpoint', () => {
  it.each(['BF16', 'F16'] as const)('%s: gives the bytes of the same weights stored as F32 (the plain f32 path), for every kind of path', async (dtype) => {
    // Big enough that tensors go to the quantize workers (shared-memory rows) and, together, through
    // the cross-tensor pipeline and the arena's alternating buffers.
    const dims = { hiddenSize: 256, intermediateSize: 768, numHeads: 4, numKvHeads: 2, vocabSize: 1024, numLayers: 2 };
    const bf16Dir = path.join(tmp, `${dtype}-src`, 'm');
    await generateFixture(bf16Dir, { arch: 'llama', dtype, tokenizer: 'none', dims });
    const f32Dir = path.join(tmp, `${dtype}-f32-src`, 'm'); // same basename: same general.name
    mkdirSync(f32Dir, { recursive: true });
    copyFileSync(path.join(bf16Dir, 'config.json'), path.join(f32Dir, 'config.json'));
    const ck = await openCheckpoint(bf16Dir);
    await writeSafetensors(path.join(f32Dir, 'model.safetensors'), ck.tensors.map((t) => ({
      name: t.name, dtype: 'F32' as const, shape: [...t.shape], bytes: async () => new Uint8Array((await ck.readF32(t.name)).buffer),
    })));
    await ck.close();
    const sha = (f: string) => createHash('sha256').update(readFileSync(f)).digest('hex');
    for (const quant of ['F32', 'F16', 'BF16', 'Q8_0', 'Q4_0', 'Q4_K_M', 'Q6_K']) {
      const a = await compileGguf(bf16Dir, path.join(tmp, `from-${dtype}-${quant}`), { quant });
      const b = await compileGguf(f32Dir, path.join(tmp, `from-${dtype}-f32-${quant}`), { quant });
      expect(sha(a.file), quant).toBe(sha(b.file));
      expect(a.manifest.files[0].sha256).toBe(sha(a.file));
    }
    // Two compiles at once in this process: one holds the kernels' arena, the other copies; same bytes.
    const [c, d] = await Promise.all(['Q8_0', 'Q4_K_M'].map((quant) => compileGguf(bf16Dir, path.join(tmp, `${dtype}-both-${quant}`), { quant })));
    expect(sha(c.file)).toBe(sha(path.join(tmp, `from-${dtype}-f32-Q8_0`, 'model.gguf')));
    expect(sha(d.file)).toBe(sha(path.join(tmp, `from-${dtype}-f32-Q4_K_M`, 'model.gguf')));
  }, 120_000);

  it.each([['BF16', [0xc0, 0x7f]], ['F16', [0x00, 0x7e]]] as const)('%s: a NaN in a rotary-permuted tensor is reported at its source element, for every fast path', async (dtype, nan) => {
    const src = path.join(tmp, `${dtype}-nan`);
    await generateFixture(src, { arch: 'llama', dtype, tokenizer: 'none' });
    const ck = await openCheckpoint(src);
    const victim = 'model.layers.0.self_attn.q_proj.weight';
    const info = ck.info(victim);
    await ck.close();
    const element = info.shape[1] * 3 + 5; // row 3 moves under the rotary permutation
    const fd = openSync(info.file, 'r+');
    writeSync(fd, Buffer.from(nan), 0, 2, info.offset + element * 2); // bf16 0x7fc0, f16 0x7e00: NaN
    closeSync(fd);
    for (const quant of ['F16', 'Q8_0', 'BF16', 'F32', 'Q4_K_M']) {
      const out = path.join(tmp, `${dtype}-nan-${quant}`);
      await expect(compileGguf(src, out, { quant })).rejects.toThrow(`tensor "${victim}" holds a non-finite value (NaN) at element ${element}`);
    }
  });
});

describe('f32 → F16 / BF16 (WebAssembly SIMD kernels in quantize)', () => {
  it('equal the scalar conversions on a sweep of all f32 bit patterns, every boundary, and an unaligned tail', () => {
    expect(simdKernels()).not.toBeNull();
    const n = (1 << 18) + 5; // not a multiple of 8: the tail takes the JS encoder
    const bits = new Uint32Array(n);
    for (let i = 0; i < n; i++) bits[i] = (Math.floor(i * (2 ** 32 / n)) + (i % 4099)) >>> 0;
    // NaNs, Infs, zeros, the f16 subnormal/normal edge, overflow to Inf and underflow to zero, both signs
    const edges = [0, 0x7f800000, 0x7fc00000, 0x7f800001, 0x38800000, 0x387fffff, 0x38000000, 0x477ff000, 0x477fefff, 0x477fffff, 0x33000000, 0x33000001, 0x32ffffff, 0x3f7fffff, 0x7f7fffff, 1];
    edges.forEach((e, j) => {
      bits[2 * j] = e;
      bits[2 * j + 1] = (e | 0x80000000) >>> 0;
    });
    const x = new Float32Array(bits.buffer);
    const f16 = new Uint16Array(quantize('F16', x, n).buffer);
    const bf16 = new Uint16Array(quantize('BF16', x, n).buffer);
    // Scalar references: f32ToF16 (RNE), and ggml_compute_fp32_to_bf16 written out (NaN quieted, else RNE)
    const bf16Of = (b: number) => ((b & 0x7fffffff) > 0x7f800000 ? (b >>> 16) | 64 : ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff);
    let bad = 0;
    for (let i = 0; i < n; i++) if (f16[i] !== f32ToF16(x[i]) || bf16[i] !== bf16Of(bits[i])) bad++;
    expect(bad).toBe(0);
  });
});

/**
 * The WebAssembly x quantizers (src/exec/runtime/qact.ts) write the same bytes as test/qdot-layout.ts's scalar
 * quantizeQ8_0 / quantizeQ8_K, block for block, on random values at every scale, exact ties of
 * roundf / nearest_int, zero blocks, both signs of the largest |x|, f16-subnormal and overflowing
 * scales, subnormal inputs, Inf, NaN and random bit patterns; and on plain values they equal the
 * independent ggml reference (test/ggml-vecdot.ts).
 */
import { describe, expect, it } from 'vitest';
import { I32 } from '../src/core/util/wasm-asm.js';
import { Rng } from '../src/core/util/rng.js';
import { kernelModuleBytes } from '../src/exec/runtime/kernel-module.js';
import { QACT_KERNELS } from '../src/exec/runtime/qact.js';
import { Q8_0_BYTES, Q8_K_BYTES } from '../src/exec/runtime/qdot.js';
import { quantizeQ8_0, quantizeQ8_K } from './qdot-layout.js';
import { refQ8_0, refQ8_K } from './ggml-vecdot.js';

const kernels = Object.values(QACT_KERNELS).map(({ name, body }) => ({ name, params: [I32, I32, I32], body: body() }));
const memory = new WebAssembly.Memory({ initial: 64 });
const exp = new WebAssembly.Instance(new WebAssembly.Module(kernelModuleBytes(kernels)), { env: { memory } }).exports as Record<string, (x: number, out: number, n: number) => void>;

/** wasm and JS outputs of quantizing x (a whole number of blocks), as bytes. */
function both(kind: 'q8_0' | 'q8_K', x: Float32Array): { wasm: Uint8Array; js: Uint8Array; blockBytes: number } {
  const [size, blockBytes] = kind === 'q8_0' ? [32, Q8_0_BYTES] : [256, Q8_K_BYTES];
  const nb = x.length / size;
  const X = 64;
  const O = X + x.length * 4 + 16;
  new Float32Array(memory.buffer, X, x.length).set(x);
  new Uint8Array(memory.buffer, O, nb * blockBytes).fill(0xa5); // every byte must be written
  exp[QACT_KERNELS[kind].name](X, O + 4, nb); // an output not 16-byte aligned
  const wasm = new Uint8Array(memory.buffer, O + 4, nb * blockBytes).slice();
  const buf = new ArrayBuffer(nb * blockBytes + 8);
  new Uint8Array(buf).fill(0x5a);
  const [f32, i16, i8] = [new Float32Array(buf), new Int16Array(buf), new Int8Array(buf)];
  if (kind === 'q8_0') quantizeQ8_0(x, 0, nb, f32, i8, 4);
  else quantizeQ8_K(x, 0, nb, f32, i16, i8, 4);
  return { wasm, js: new Uint8Array(buf, 4, nb * blockBytes), blockBytes };
}

function expectSame(kind: 'q8_0' | 'q8_K', x: Float32Array): void {
  const { wasm, js, blockBytes } = both(kind, x);
  for (let b = 0; b * blockBytes < js.length; b++) {
    const [w, j] = [wasm.subarray(b * blockBytes, (b + 1) * blockBytes), js.subarray(b * blockBytes, (b + 1) * blockBytes)];
    if (!Buffer.from(w).equals(Buffer.from(j))) {
      const size = kind === "q8_0" ? 32 : 256;
      expect({ block: b, x: [...x.subarray(b * size, (b + 1) * size)], wasm: [...w] }).toEqual({ block: b, x: [...x.subarray(b * size, (b + 1) * size)], wasm: [...j] });
    }
  }
}

/** Blocks of `size` values covering the edge cases. */
function edgeBlocks(size: number, rng: Rng): Float32Array[] {
  const fill = (f: (j: number) => number) => Float32Array.from({ length: size }, (_, j) => f(j));
  const randn = (scale: number) => fill(() => rng.normal() * scale);
  const out: Float32Array[] = [];
  for (const scale of [1, 1e-3, 3e-5, 1e-9, 1e-36, 1e-38, 1e-40, 1e-43, 1e4, 6e6, 1e30, 3e38]) out.push(randn(scale));
  // exact ties: amax 127 (q8_0: id = 1) or max −127 (q8_K: iscale = 1), halves everywhere
  out.push(fill((j) => (j === 3 ? 127 : j === 7 ? -127 : ((j % 11) - 5) + 0.5)));
  out.push(fill((j) => (j === 0 ? -127 : ((j % 13) - 6) * 0.5)));
  out.push(fill((j) => (j === size - 1 ? 127 : -((j % 9) + 0.5))));
  out.push(fill(() => 0), fill(() => -0), fill((j) => (j === 5 ? -2e-45 : 0)), fill((j) => (j === size - 1 ? 1 : 0)));
  // the largest |x| with both signs, in either order, and one sign only
  out.push(fill((j) => (j === 2 ? 3 : j === 9 ? -3 : rng.normal())), fill((j) => (j === 2 ? -3 : j === 9 ? 3 : rng.normal())));
  out.push(fill((j) => (j === size - 1 ? -3 : j === size - 2 ? 3 : rng.normal())));
  // f16 scale edges: d just around 65504 / 65520 and f16's smallest normal and subnormals
  for (const a of [65504 * 127, 65510 * 127, 65520 * 127, 65536 * 127, 2 ** -14 * 127, 2 ** -15 * 127, 2 ** -24 * 127, 2 ** -25 * 127, 1.5 * 2 ** -25 * 127]) {
    out.push(fill((j) => (j === 1 ? a : rng.normal() * a * 0.3)));
  }
  // non-finite values
  out.push(fill((j) => (j === 4 ? Infinity : rng.normal())), fill((j) => (j === 4 ? -Infinity : j === 8 ? Infinity : rng.normal())));
  out.push(fill((j) => (j === 6 ? NaN : rng.normal())), fill(() => NaN), fill((j) => (j % 2 ? NaN : 0)));
  // random bit patterns (subnormals, huge, Inf, NaN of any payload appear)
  for (let i = 0; i < 40; i++) out.push(new Float32Array(Uint32Array.from({ length: size }, () => Math.floor(rng.next() * 2 ** 32)).buffer));
  return out;
}

const concat = (blocks: Float32Array[]) => {
  const x = new Float32Array(blocks.reduce((n, b) => n + b.length, 0));
  let o = 0;
  for (const b of blocks) x.set(b, (o += b.length) - b.length);
  return x;
};

describe('WebAssembly x quantizers (qact.ts)', () => {
  for (const [kind, size] of [['q8_0', 32], ['q8_K', 256]] as const) {
    it(`${kind}: the same bytes as the scalar JS quantizer on edge cases and random bits`, () => {
      const rng = new Rng(kind === 'q8_0' ? 5 : 6);
      for (const b of edgeBlocks(size, rng)) expectSame(kind, b);
      expectSame(kind, concat(edgeBlocks(size, rng))); // many blocks in one call
    });

    it(`${kind}: plain values equal ggml's reference, and a call of 0 blocks writes nothing`, () => {
      const rng = new Rng(9);
      const x = Float32Array.from({ length: 24 * 256 }, () => rng.normal() * (1 + rng.next() * 10));
      const { wasm, blockBytes } = both(kind, x);
      const f32 = new Float32Array(wasm.buffer);
      const i8 = new Int8Array(wasm.buffer);
      if (kind === 'q8_0') {
        const r = refQ8_0(x);
        for (let b = 0; b < x.length / 32; b++) {
          expect(f32[(b * blockBytes) >> 2]).toBe(r.d[b]);
          expect([...i8.subarray(b * blockBytes + 4, b * blockBytes + 36)]).toEqual([...r.q.subarray(b * 32, b * 32 + 32)]);
        }
      } else {
        const r = refQ8_K(x);
        const i16 = new Int16Array(wasm.buffer);
        for (let b = 0; b < x.length / 256; b++) {
          const o = b * blockBytes;
          expect(f32[o >> 2]).toBe(r.d[b]);
          expect([...i8.subarray(o + 52, o + 308)]).toEqual([...r.q.subarray(b * 256, b * 256 + 256)]);
          expect([...i16.subarray((o + 4) >> 1, (o + 36) >> 1)]).toEqual(r.bsums.slice(b * 16, b * 16 + 16));
        }
      }
      const guard = new Uint8Array(memory.buffer, 4096, 16).fill(7);
      exp[QACT_KERNELS[kind].name](64, 4096, 0);
      expect([...guard]).toEqual(new Array(16).fill(7));
      void size;
    });
  }
});

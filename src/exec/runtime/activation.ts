/**
 * The MLP's silu(g)·u in WebAssembly SIMD, and the vector e^x it and the attention kernel share.
 * V8's Math.exp costs 17–40 ns an element on the test machine, which made the gate's activation ~9 %
 * of a 128-token prefill; four lanes of a polynomial exp cost about a nanosecond. The module has a
 * memory of its own that the operands are copied into (cheap beside the exps). Browser-safe.
 */
import { I32, V128, vec } from '../../core/util/wasm-asm.js';
import { kernelModuleBytes } from './kernel-module.js';
import { kernelModule } from './kernel-store.js';
import {
  block, br, brIf, f32c, fAbs, fAdd, fDiv, fGe, fMax, fMul, fNearest, fNeg, fSplat, fSub, get, i32Add, i32c, i32GeU, iAdd, iShl, iSplat, iTruncSat, loop, set,
  vBitselect, vload, vstore, vZero,
} from '../../core/util/wasm-ops.js';

/**
 * e^X for X ≤ 0, lane-wise, left on the stack (Cephes expf: 2^n · p(r), |error| ≤ 2 ulp; below
 * −87.3 it is ~1e-38, never 0). X and FX are v128 locals; X is overwritten.
 */
export function expLanes(X: number, FX: number): number[] {
  return [
    ...get(X), ...f32c(-87.33654), ...fSplat, ...fMax, ...set(X),
    ...get(X), ...f32c(Math.LOG2E), ...fSplat, ...fMul, ...fNearest, ...set(FX),
    ...get(X), ...get(FX), ...f32c(0.693359375), ...fSplat, ...fMul, ...fSub,
    ...get(FX), ...f32c(-2.12194440e-4), ...fSplat, ...fMul, ...fSub, ...set(X),
    ...f32c(1.9875691500e-4), ...fSplat,
    ...[1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1].flatMap((c) => [...get(X), ...fMul, ...f32c(c), ...fSplat, ...fAdd]),
    ...get(X), ...get(X), ...fMul, ...fMul, ...get(X), ...fAdd, ...f32c(1), ...fSplat, ...fAdd,
    ...get(FX), ...iTruncSat, ...i32c(127), ...iSplat, ...iAdd, ...i32c(23), ...iShl, ...fMul,
  ];
}

/**
 * silu_mul(g, u, end): for byte offsets i < end (a multiple of 16) from 0, out = silu(g)·u written
 * over g: with e = e^−|x|, x / (1 + e) · u for x ≥ 0 and (x·e) / (1 + e) · u below (the same value
 * as x / (1 + e^−x) · u without overflowing e^−x).
 */
function siluMulBody(): number[] {
  const [G, U, END] = [0, 1, 2];
  const I = 3;
  const [X, E, T, FX] = [4, 5, 6, 7];
  return [
    ...vec([[1, I32], [4, V128]]),
    ...i32c(0), ...set(I),
    ...block(loop([
      ...get(I), ...get(END), ...i32GeU, ...brIf(1),
      ...get(G), ...get(I), ...i32Add, ...vload(), ...set(X),
      ...get(X), ...fAbs, ...fNeg, ...set(T),
      ...expLanes(T, FX), ...set(E),
      // numerator: x where x ≥ 0, else x·e
      ...get(X), ...get(X), ...get(E), ...fMul, ...get(X), ...vZero, ...fGe, ...vBitselect,
      ...get(E), ...f32c(1), ...fSplat, ...fAdd, ...fDiv,
      ...get(U), ...get(I), ...i32Add, ...vload(), ...fMul, ...set(T),
      ...get(G), ...get(I), ...i32Add, ...get(T), ...vstore(),
      ...get(I), ...i32c(16), ...i32Add, ...set(I),
      ...br(0),
    ])),
    0x0b,
  ];
}

/** silu_mul for ./wasm.ts's matmul module (3 i32 parameters: g, u, bytes): the worker pool runs it on x before the down projection. */
export const SILU_MUL_KERNEL = { name: 'silu_mul', body: siluMulBody } as const;

const PAGE = 65536;

/** silu(g)·u over float32 arrays; null where WebAssembly SIMD is unavailable. */
export class SiluMul {
  private f32: Float32Array;
  private constructor(
    private readonly memory: WebAssembly.Memory,
    private readonly fn: (g: number, u: number, end: number) => void,
  ) {
    this.f32 = new Float32Array(memory.buffer);
  }

  static create(): SiluMul | null {
    const mod = kernelModule('silu-mul', () => kernelModuleBytes([{ name: 'silu_mul', params: [I32, I32, I32], body: siluMulBody() }]));
    if (!mod) return null;
    try {
      const memory = new WebAssembly.Memory({ initial: 1 });
      const inst = new WebAssembly.Instance(mod, { env: { memory } });
      return new SiluMul(memory, inst.exports.silu_mul as (g: number, u: number, end: number) => void);
    } catch {
      return null;
    }
  }

  /** out[i] = silu(g[i])·u[i] for i < n (out may be g or u). */
  run(g: Float32Array, u: Float32Array, out: Float32Array, n: number): void {
    const n4 = (n + 3) & ~3;
    const need = 2 * n4 * 4;
    if (need > this.memory.buffer.byteLength) {
      this.memory.grow(Math.ceil((need - this.memory.buffer.byteLength) / PAGE));
      this.f32 = new Float32Array(this.memory.buffer);
    }
    const f32 = this.f32;
    f32.set(g.subarray(0, n), 0);
    f32.set(u.subarray(0, n), n4);
    this.fn(0, n4 * 4, n4 * 4);
    out.set(f32.subarray(0, n));
  }
}

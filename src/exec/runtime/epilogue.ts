/**
 * Matmul jobs' epilogues (./pool.ts's Post), run by each thread on the rows it computed.
 *
 * The residual add: o_proj's and down_proj's rows,
 * once a thread has computed them, get the residual stream added in place, y[i] = y[i] + r[i], by
 * that thread, so the add no longer runs on the calling thread alone between two jobs. A float32
 * add rounds the same in SIMD as in the interpreter's JS loop (fround of the exact double sum: the
 * double sum of two floats rounds to float32 as their float32 sum does) and is commutative: the same
 * bits as the add step.
 *
 * RoPE: q's and k's rows (whole heads: the job's chunks are cut at heads) rotated for one position,
 * as the interpreter's rope: x_i·cos − x_{i+h}·sin and x_{i+h}·cos + x_i·sin in float64 (the products
 * of two floats are exact there), rounded to float32 as a Float32Array store rounds them. The
 * position's cos and sin sit beside each head's rows (r: per head h cos values, then h sin values),
 * and h at an i32 slot of the memory. Browser-safe.
 */
import { I32, vec } from '../../core/util/wasm-asm.js';
import { block, br, brIf, f32Add, f32Load, get, i32Add, i32c, i32GeU, i32Mul, loop, set, simd, vload, vstore } from '../../core/util/wasm-ops.js';

const f32Store = [0x38, 2, 0];
const i32GtU = [0x4b];
const fAdd = simd(0xe4);

/** add_f32(y, r, bytes): y[i] += r[i] over `bytes` of float32 (four at a time, then one by one). */
function addBody(): number[] {
  const [Y, R, END] = [0, 1, 2];
  const I = 3;
  return [
    ...vec([[1, I32]]),
    ...i32c(0), ...set(I),
    ...block(loop([
      ...get(I), ...i32c(16), ...i32Add, ...get(END), ...i32GtU, ...brIf(1),
      ...get(Y), ...get(I), ...i32Add,
      ...get(Y), ...get(I), ...i32Add, ...vload(),
      ...get(R), ...get(I), ...i32Add, ...vload(),
      ...fAdd, ...vstore(),
      ...get(I), ...i32c(16), ...i32Add, ...set(I),
      ...br(0),
    ])),
    ...block(loop([
      ...get(I), ...get(END), ...i32GeU, ...brIf(1),
      ...get(Y), ...get(I), ...i32Add,
      ...get(Y), ...get(I), ...i32Add, ...f32Load(),
      ...get(R), ...get(I), ...i32Add, ...f32Load(),
      ...f32Add, ...f32Store,
      ...get(I), ...i32c(4), ...i32Add, ...set(I),
      ...br(0),
    ])),
    0x0b,
  ];
}

/** The kernel for ./wasm.ts's module (3 i32 parameters: y, r, bytes). */
export const ADD_KERNEL = { name: 'add_f32', body: addBody } as const;

const F64 = 0x7c;
const f64FromF32 = [0xbb];
const f32FromF64 = [0xb6];
const f64Mul = [0xa2];
const f64Add = [0xa0];
const f64Sub = [0xa1];
const i32Load = (addr: number) => [...i32c(addr), 0x28, 2, 0];

/** rope_f32(y, r, bytes): each head of 2h values in [y, y + bytes) rotated by r's cos and sin, h the i32 at byte `slot`. */
function ropeBody(slot: number): number[] {
  const [Y, R, END] = [0, 1, 2];
  const [HB, H, I, P, Q] = [3, 4, 5, 6, 7]; // h in bytes, head start, i, the pair's addresses
  const [A, B, C, S] = [8, 9, 10, 11];
  const load = (base: number, off: number[]) => [...get(base), ...get(H), ...i32Add, ...get(I), ...i32Add, ...off, ...f32Load(), ...f64FromF32];
  const hi = [...get(HB), ...i32Add];
  return [
    ...vec([[5, I32], [4, F64]]),
    ...i32Load(slot), ...i32c(4), ...i32Mul, ...set(HB),
    ...i32c(0), ...set(H),
    ...block(loop([
      ...get(H), ...get(END), ...i32GeU, ...brIf(1),
      ...i32c(0), ...set(I),
      ...block(loop([
        ...get(I), ...get(HB), ...i32GeU, ...brIf(1),
        ...load(Y, []), ...set(A),
        ...load(Y, hi), ...set(B),
        ...load(R, []), ...set(C),
        ...load(R, hi), ...set(S),
        ...get(Y), ...get(H), ...i32Add, ...get(I), ...i32Add, ...set(P),
        ...get(P), ...get(HB), ...i32Add, ...set(Q),
        ...get(P), ...get(A), ...get(C), ...f64Mul, ...get(B), ...get(S), ...f64Mul, ...f64Sub, ...f32FromF64, ...f32Store,
        ...get(Q), ...get(B), ...get(C), ...f64Mul, ...get(A), ...get(S), ...f64Mul, ...f64Add, ...f32FromF64, ...f32Store,
        ...get(I), ...i32c(4), ...i32Add, ...set(I),
        ...br(0),
      ])),
      ...get(H), ...get(HB), ...get(HB), ...i32Add, ...i32Add, ...set(H),
      ...br(0),
    ])),
    0x0b,
  ];
}

/** The kernel for ./wasm.ts's module, reading h (half a head) at byte `slot` (3 i32 parameters: y, r, bytes). */
export const ropeKernel = (slot: number) => ({ name: 'rope_f32', body: () => ropeBody(slot) }) as const;

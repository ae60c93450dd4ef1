/**
 * The residual add as a matmul job's epilogue (./pool.ts's Post): o_proj's and down_proj's rows,
 * once a thread has computed them, get the residual stream added in place, y[i] = y[i] + r[i], by
 * that thread, so the add no longer runs on the calling thread alone between two jobs. A float32
 * add rounds the same in SIMD as in the interpreter's JS loop (fround of the exact double sum: the
 * double sum of two floats rounds to float32 as their float32 sum does) and is commutative: the same
 * bits as the add step. Browser-safe.
 */
import { I32, vec } from '../../core/util/wasm-asm.js';
import { block, br, brIf, f32Add, f32Load, get, i32Add, i32c, i32GeU, loop, set, simd, vload, vstore } from '../../core/util/wasm-ops.js';

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

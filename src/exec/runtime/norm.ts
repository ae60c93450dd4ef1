/**
 * RMSNorm's second half in WebAssembly, for a matmul job's prep phase (./pool.ts's Prep): the
 * worker pool normalizes x piece by piece before it quantizes it, so the norm before q/k/v and
 * gate/up no longer runs on the calling thread alone between two jobs. The calling thread still
 * sums the squares (one sequential float64 chain, as the interpreter's rmsNorm: its order fixes the
 * bits) and leaves r = 1/√(mean + eps) at NORM_R_SLOT; each piece then computes
 * x[i] = w[i] · fround(x[i] · r) in float64, rounded to float32 as the interpreter's Float32Array
 * store rounds it: the same bits. Browser-safe.
 */
import { I32, vec } from '../../core/util/wasm-asm.js';
import { block, br, brIf, f32Load, get, i32Add, i32c, i32GeU, loop, set } from '../../core/util/wasm-ops.js';

const F64 = 0x7c;
const f64Load = (addr: number) => [...i32c(addr), 0x2b, 3, 0];
const f32Store = [0x38, 2, 0];
const f64Mul = [0xa2];
const f64FromF32 = [0xbb];
const f32FromF64 = [0xb6];

/** rms_scale(x, w, bytes): x[i] = w[i] · fround(x[i] · r) over `bytes` of x (in place), r the float64 at `slot`. */
function rmsScaleBody(slot: number): number[] {
  const [X, W, END] = [0, 1, 2];
  const I = 3;
  const R = 4;
  return [
    ...vec([[1, I32], [1, F64]]),
    ...f64Load(slot), ...set(R),
    ...i32c(0), ...set(I),
    ...block(loop([
      ...get(I), ...get(END), ...i32GeU, ...brIf(1),
      ...get(X), ...get(I), ...i32Add,
      ...get(W), ...get(I), ...i32Add, ...f32Load(), ...f64FromF32,
      ...get(X), ...get(I), ...i32Add, ...f32Load(), ...f64FromF32, ...get(R), ...f64Mul, ...f32FromF64, ...f64FromF32,
      ...f64Mul, ...f32FromF64, ...f32Store,
      ...get(I), ...i32c(4), ...i32Add, ...set(I),
      ...br(0),
    ])),
    0x0b,
  ];
}

/** The kernel for ./wasm.ts's module, reading r at byte `slot` of its memory (3 i32 parameters: x, w, bytes). */
export const rmsScaleKernel = (slot: number) => ({ name: 'rms_scale', body: () => rmsScaleBody(slot) }) as const;

/** r of one row of D values: 1/√(fround(Σx²/D) + eps), the sum in float64 in order (the interpreter's rmsNorm). */
export function rmsFactor(x: Float32Array, o: number, D: number, eps: number): number {
  let ss = 0;
  for (let i = 0; i < D; i++) ss += x[o + i] * x[o + i];
  return 1 / Math.sqrt(Math.fround(ss / D) + eps);
}

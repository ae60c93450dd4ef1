/**
 * The integer-activation kernels of src/exec/runtime/qdot.ts in both variants, with and without
 * relaxed SIMD's integer dots, assembled into two modules over one memory: the same weights and the
 * same quantized x run through either, so a test compares their outputs bit for bit and a benchmark
 * interleaves them. The caller sets Node 20's --experimental-wasm-relaxed-simd first.
 */
import { f16Table } from '../src/core/util/half.js';
import { I32 } from '../src/core/util/wasm-asm.js';
import { kernelModuleBytes } from '../src/exec/runtime/kernel-module.js';
import { QACT_KERNELS } from '../src/exec/runtime/qact.js';
import { QDOT_ACT, QDOT_KERNELS, Q8_K_BYTES, type QdotFormat } from '../src/exec/runtime/qdot.js';

type Fn = (...args: number[]) => void;
const TABLE = 65536 * 4;

export class QdotVariants {
  private readonly heap: Float32Array;
  private readonly bytes: Uint8Array;
  private readonly fns: [Record<string, Fn>, Record<string, Fn>];
  private readonly xBase = TABLE;
  private readonly qBase: number;
  private readonly yBase: number;
  private readonly wBase: number;

  /** Room for T tokens of `maxCols` values, `maxRows` outputs a token and `weightBytes` of weights. */
  constructor(maxCols: number, maxRows: number, T: number, weightBytes: number) {
    this.qBase = this.xBase + maxCols * T * 4;
    this.yBase = this.qBase + Math.ceil((maxCols * T) / 256) * Q8_K_BYTES + 64; // q8_K takes more than q8_0
    this.wBase = Math.ceil((this.yBase + maxRows * T * 4) / 64) * 64;
    const memory = new WebAssembly.Memory({ initial: Math.ceil((this.wBase + weightBytes + 64) / 65536) });
    this.heap = new Float32Array(memory.buffer);
    this.bytes = new Uint8Array(memory.buffer);
    this.heap.set(f16Table(), 0);
    const build = (relaxed: boolean) => {
      const fns = [
        ...Object.values(QDOT_KERNELS).map(({ name, body }) => ({ name, params: new Array(10).fill(I32), body: body(relaxed) })),
        ...Object.values(QACT_KERNELS).map(({ name, body }) => ({ name, params: new Array(3).fill(I32), body: body() })),
      ];
      return new WebAssembly.Instance(new WebAssembly.Module(kernelModuleBytes(fns)), { env: { memory } }).exports as Record<string, Fn>;
    };
    this.fns = [build(false), build(true)];
  }

  setWeights(w: Uint8Array): void {
    this.bytes.set(w, this.wBase);
  }

  /** x's T tokens (`cols` values each) quantized as the format's kernels read them. */
  setX(format: QdotFormat, x: Float32Array, cols: number, T: number): void {
    this.heap.set(x.subarray(0, cols * T), this.xBase >> 2);
    const act = QDOT_ACT[format];
    this.fns[0][act.block === 32 ? QACT_KERNELS.q8_0.name : QACT_KERNELS.q8_K.name](this.xBase, this.qBase, (cols / act.block) * T);
  }

  /** y[t·nRows + r] for rows [r0, r0 + nRows) of a weight of `rowBytes` a row, T tokens of `cols` values; `relaxed` picks the variant. */
  run(relaxed: boolean, format: QdotFormat, rowBytes: number, r0: number, nRows: number, cols: number, T: number): Float32Array {
    this.call(relaxed, format, rowBytes, r0, nRows, cols, T);
    return this.heap.slice(this.yBase >> 2, (this.yBase >> 2) + nRows * T);
  }

  /** The kernel call alone (for timing). */
  call(relaxed: boolean, format: QdotFormat, rowBytes: number, r0: number, nRows: number, cols: number, T: number): void {
    const act = QDOT_ACT[format];
    const nb = cols / act.block;
    this.fns[relaxed ? 1 : 0][QDOT_KERNELS[format].name](this.wBase + r0 * rowBytes, rowBytes, this.qBase, nb * act.bytes, this.yBase, nRows * 4, nRows, nb, T, 0);
  }
}

/**
 * WebAssembly relaxed SIMD: whether the platform has it, and which of its instructions the kernels
 * may use. Browser-safe; ./node.ts reads LLMC_RELAXED_SIMD and sets Node 20's flag.
 *
 * - Integer dots (`i16x8.relaxed_dot_i8x16_i7x16_s`, ./qdot.ts) are on wherever relaxed SIMD
 *   validates: with the second operand in 0..127 every platform computes the same exact sums (x86's
 *   pmaddubsw cannot saturate: 2 · 128 · 127 < 2^15), so they change speed, never results.
 * - Fused multiply-adds (`f32x4.relaxed_madd`) only when asked (`preferRelaxedSimd`,
 *   LLMC_RELAXED_SIMD=on): fused or not as the CPU does it, so the last bits may differ between machines.
 * - `avoidRelaxedSimd` (LLMC_RELAXED_SIMD=off) turns both off.
 */

/** (module (func (param v128 v128 v128) (result v128) local.get 0 local.get 1 local.get 2 f32x4.relaxed_madd)) */
const RELAXED_PROBE = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
  0x01, 0x08, 0x01, 0x60, 0x03, 0x7b, 0x7b, 0x7b, 0x01, 0x7b,
  0x03, 0x02, 0x01, 0x00,
  0x0a, 0x0d, 0x01, 0x0b, 0x00, 0x20, 0x00, 0x20, 0x01, 0x20, 0x02, 0xfd, 0x85, 0x02, 0x0b,
]);

/**
 * Whether this platform runs WebAssembly relaxed SIMD: Chromium and Node ≥ 22 do; Node 20 only with
 * --experimental-wasm-relaxed-simd (./node.ts turns it on).
 */
export function relaxedSimd(): boolean {
  try {
    return typeof WebAssembly === 'object' && WebAssembly.validate(RELAXED_PROBE);
  } catch {
    return false;
  }
}

let fmaWanted = false;
let avoided = false;

/** Use relaxed multiply-adds in the tiled F32 kernels where they validate (results may differ in the last bits between machines). */
export function preferRelaxedSimd(): void {
  fmaWanted = true;
}

/** No relaxed SIMD at all, not even the exact integer dots. */
export function avoidRelaxedSimd(): void {
  avoided = true;
}

/** Whether kernels built from now on may use relaxed multiply-adds. */
export const relaxedFmaWanted = (): boolean => fmaWanted && !avoided && relaxedSimd();

/** Whether kernels built from now on may use the exact relaxed integer dots. */
export const relaxedIntegerDots = (): boolean => !avoided && relaxedSimd();

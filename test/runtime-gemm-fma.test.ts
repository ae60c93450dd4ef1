/**
 * The tiled F32 kernel with relaxed-SIMD multiply-adds (opt-in: LLMC_RELAXED_SIMD=on, which sets
 * Node 20's flag as done here before any kernel module is compiled): the same float64 and row-range
 * checks as the default kernel. Each test file runs in a fresh module graph, so the choice made here
 * does not reach the other files.
 */
import v8 from 'node:v8';
import { describe, expect, it } from 'vitest';
import { Rng } from '../src/core/util/rng.js';
import { gemmUsesFma } from '../src/exec/runtime/gemm.js';
import { preferRelaxedSimd, relaxedSimd } from '../src/exec/runtime/relaxed.js';
import { arenaWeight, tiledKernelChecks } from './gemm-checks.js';

v8.setFlagsFromString('--experimental-wasm-relaxed-simd');
preferRelaxedSimd();

describe('tiled F32 kernel with f32x4.relaxed_madd', () => {
  it('runs the relaxed kernels when asked', () => {
    arenaWeight(4, 8, new Rng(1));
    expect(relaxedSimd()).toBe(true);
    expect(gemmUsesFma()).toBe(true);
  });
  tiledKernelChecks();
});

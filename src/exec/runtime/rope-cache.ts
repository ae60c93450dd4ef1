/**
 * Rotary cos/sin rows by absolute position, computed once and reused across forward calls (the
 * interpreter used to rebuild them per call). The values are src/core/ir/rope.ts's, bit for bit:
 * row p = cos/sin(p · invFreq) · attentionScaling rounded to f32. 'dynamic' scaling changes the
 * frequencies once a sequence outgrows max_position_embeddings, 'longrope' past its original context
 * (ropeSharedUntil); past that the caller takes per-call
 * tables (ropeTables / ropeRows). Browser-safe.
 */
import type { ArchSpec } from '../../core/arch/spec.js';
import { ropeFrequencies, ropeSharedUntil } from '../../core/ir/rope.js';

export class RopeCache {
  cos = new Float32Array(0);
  sin = new Float32Array(0);
  private filled = 0;
  private readonly half: number;
  private readonly invFreq: Float64Array;
  private readonly scaling: number;
  /** Positions below this share one set of frequencies (all of them unless the scaling is 'dynamic' or 'longrope'). */
  private readonly limit: number;

  constructor(spec: ArchSpec) {
    const f = ropeFrequencies(spec, 0);
    this.invFreq = f.invFreq;
    this.scaling = f.attentionScaling;
    this.half = spec.headDim / 2;
    this.limit = ropeSharedUntil(spec);
  }

  /** Rows for positions [0, end) are in cos/sin (row p at p · headDim/2); false when `end` is past the shared frequencies. */
  cover(end: number): boolean {
    if (end > this.limit) return false;
    if (end <= this.filled) return true;
    const half = this.half;
    const cap = Math.max(end, 2 * this.filled, 64);
    const cos = new Float32Array(cap * half);
    const sin = new Float32Array(cap * half);
    cos.set(this.cos.subarray(0, this.filled * half));
    sin.set(this.sin.subarray(0, this.filled * half));
    for (let p = this.filled; p < cap; p++) {
      for (let i = 0; i < half; i++) {
        const a = p * this.invFreq[i];
        cos[p * half + i] = Math.cos(a) * this.scaling;
        sin[p * half + i] = Math.sin(a) * this.scaling;
      }
    }
    this.cos = cos;
    this.sin = sin;
    this.filled = Math.min(cap, this.limit);
    return true;
  }
}

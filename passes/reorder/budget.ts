/**
 * Blockwise recovery under a compute budget (the default recovery where LoRA cannot run: above
 * 200M parameters, or where the model streams): the steps per decoder block and level follow from
 * the model's shape and a budget of multiply-adds, never from wall-clock, so the artifacts stay
 * deterministic. Counted per token, in multiply-adds of the blocks' linears (attention's T×T terms
 * and the norms are left out: under 5% at T = 64):
 *   F      = Σ over blocks of the full block's linears          (the teacher's states move on)
 *   P      = Σ over narrowed levels and blocks of the level's block's linears
 *   fixed  = T · (N·(F + P) + (1 + 8)·V·P)   N training rows (V of them validation rows, checked at the
 *            start and at most 8 times); held-out evaluation (reorder.evaluate) is not recovery: not counted
 *   step   = 3 · b · T · (P + H)                              (forward and backward, b rows a step)
 * With the top-k lens (recoverLoss=topk): H = Σ over narrowed levels and blocks of 2·k·D (the target's and
 * the output's logits on k vocabulary rows), also in the validation term, and fixed gains
 * T · (N − V) · L · V·D (each block's teacher states through the whole head to pick the rows); else H = 0.
 *   steps  = clamp(⌊(budget − fixed) / step⌋, 1, 64),   budget = macsPerParam × the model's parameters
 * P and F are proportional to the parameters, so the steps hardly change with size: the time is
 * linear in parameters (× the levels' widths).
 */
import type { ArchSpec } from '../../src/core/arch/types.js';
import type { LevelWidth } from '../../src/core/records/elastic.js';

/** The budget's settings: multiply-adds per model parameter (auto), rows a step, training rows. */
export const BUDGET_DEFAULTS = { macsPerParam: 16_000, batch: 2, data: 9, maxSteps: 64 } as const;

export interface BudgetPlan {
  /** Steps per decoder block and level. */
  steps: number;
  /** The budget, what the rows' forward passes take, and one step over every block and level (multiply-adds). */
  budget: number;
  fixed: number;
  perStep: number;
}

/** Multiply-adds per token of one decoder block's linears at these widths (tfjs runs every expert). */
export function blockMacs(spec: ArchSpec, w: LevelWidth & { heads: number }): number {
  const D = spec.hiddenSize;
  const hd = spec.headDim;
  const attn = 2 * D * w.heads * hd + 2 * D * w.kvGroups * hd;
  const mlp = 3 * D * w.ffn * (spec.moe ? spec.moe.numExperts : 1);
  return attn + mlp;
}

/** The steps per block and level the budget buys (module comment). */
export function budgetPlan(spec: ArchSpec, o: { params: number; macsPerParam: number; levels: readonly (readonly (LevelWidth & { heads: number })[])[]; tokens: number; data: number; batch: number; lensRows?: number }): BudgetPlan {
  const full = { kvGroups: spec.numKvHeads, heads: spec.numHeads, ffn: spec.moe ? spec.moe.expertIntermediateSize : spec.intermediateSize, qHeadsPerGroup: spec.numHeads / spec.numKvHeads };
  const F = spec.numLayers * blockMacs(spec, full);
  const P = o.levels.reduce((n, lv) => n + lv.reduce((m, w) => m + blockMacs(spec, w), 0), 0);
  const V = o.data >= 8 ? Math.min(16, Math.floor(o.data / 8)) : 0;
  const T = o.tokens;
  const D = spec.hiddenSize;
  const H = o.lensRows ? o.levels.reduce((n, lv) => n + lv.length * 2 * o.lensRows! * D, 0) : 0;
  const pick = o.lensRows ? (o.data - V) * spec.numLayers * spec.vocabSize * D : 0;
  const fixed = T * (o.data * (F + P) + pick + 9 * V * (P + H));
  const perStep = 3 * o.batch * T * (P + H);
  const budget = o.macsPerParam * o.params;
  const steps = perStep > 0 ? Math.min(BUDGET_DEFAULTS.maxSteps, Math.max(1, Math.floor((budget - fixed) / perStep))) : 1;
  return { steps, budget, fixed, perStep };
}

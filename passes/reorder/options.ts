/** Options of the reorder pass (`--opt reorder.key=value`, or the --importance / --levels flags). */
import { UsageError } from '../../src/core/errors.js';
import type { OptionSchema, OptionSpec } from '../../src/core/pipeline/options.js';
import { BUDGET_DEFAULTS } from './budget.js';

/** A layer's linears by role (recovery adapters): attention q/k/v/o, the MLP's gate/up/down. */
export const PROJECTIONS = ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] as const;
export type Projection = (typeof PROJECTIONS)[number];

/** Unit importance sources (`auto` picks among the first three; fisher accumulates over many tokens, asked by name). */
export const PROVIDERS = ['taylor', 'activation', 'magnitude', 'fisher'] as const;
export type ProviderName = (typeof PROVIDERS)[number];
export const AUTO_PROVIDERS = ['taylor', 'activation', 'magnitude'] as const satisfies readonly ProviderName[];

export interface ReorderOptions {
  importance: ProviderName | 'auto';
  /** Calibration sequences × tokens (default the paper's 10 × 64) and seed (the paper's 42). */
  calibCount: number;
  calibLength: number;
  /** A text file to calibrate on (needs the model's tokenizer); absent = self-generated. */
  calibText: string | null;
  seed: number;
  /** Held-out sequences for `auto` and per-level perplexity. */
  heldOut: number;
  /** Number of anchor layers, or an explicit list. Default round(L·6/32) (ELMS: 6 of 32). */
  anchors: number | number[] | 'default';
  /** Explicit level fractions, or a count. Default 10. */
  levels: number[] | { count: number };
  /** Alignment override; default from the target's quantization block. */
  quantBlock: number | null;
  /** Measure held-out perplexity at each level (default: models up to 50M parameters). */
  evaluate: boolean | 'auto';
  /** Level fractions measure all parameters (`total`, default) or decoder-layer parameters (`blocks`, as ELMS's table). */
  sizeBy: 'total' | 'blocks';
  /** Recovery of each level (LoRA distilled from the full model, or joint distillation of the shared weights), or none. */
  recover: RecoverOptions | null;
  /** One keep fraction in every non-anchor layer (uniform), or per-layer widths searched under the budget (search.ts). */
  widths: 'uniform' | 'search';
  /** widths=search: what a level's fraction bounds (parameters as sizeBy says, weights + KV cache bytes at budgetContext, or the decode-step time priced by latency.ts at budgetContext). */
  budget: 'params' | 'memory' | 'latency';
  budgetContext: number;
  /** widths=search: FFN widths measured per layer (KV groups and heads: every choice). */
  searchPoints: number;
  /** widths=search: measure the table again at the widths each level reached before descending to the next. */
  searchRefine: boolean;
  /** Re-score the units of each level with the next larger level active (largest first), re-sorting inside its prefix. */
  iterative: boolean;
  /** importance=fisher: tokens the mask Fisher accumulates over, and sequences per gradient. */
  fisherTokens: number;
  fisherBatch: number;
}

/** reorder.importance=fisher's defaults: ≥ 0.25M tokens, gradients of 8 sequences at a time. */
export const FISHER_DEFAULTS = { tokens: 262_144, batch: 8 } as const;

/**
 * `reorder.recover=lora` (per-level adapters, passes/reorder/recover.ts) or `distill` (the shared
 * weights trained for all levels at once, passes/reorder/distill.ts) and their settings. The LoRA
 * keys (rank, alpha, threads, targets, init) are refused with distill.
 */
export interface RecoverOptions {
  /** blockwise: LoRA's per-level adapters trained one decoder block at a time (passes/reorder/blockwise.ts). */
  method: 'lora' | 'distill' | 'blockwise';
  /** blockwise: a level's block matched to the full block on the level's input (own) or the full model's state (teacher); end-to-end steps after. */
  target?: 'own' | 'teacher';
  endToEnd?: number;
  /** blockwise: the local loss (mse of the states, of the RMS-normalized states, or the head's KL on them). */
  loss?: 'mse' | 'norm' | 'lens' | 'topk';
  /** distill: weight of the full level's term (the others weigh 1). */
  fullWeight: number;
  /** distill: levels in each step's loss (the full one, the smallest, random others). */
  levelsPerStep: number;
  rank: number;
  alpha: number;
  /** Steps per level, or `auto`: a budget shared by the levels trained (autoSteps in recover.ts). */
  steps: number | 'auto';
  lr: number;
  /** Default: the calibration seed. */
  seed: number;
  /** Training sequences (self-generated, or text windows other than the held-out ones). */
  data: number;
  batch: number;
  /** Weight of the next-token cross-entropy beside the KL to the full model. */
  ce: number;
  /** Levels trained at once on worker threads; null: the cores, at most 4. Does not change the result. */
  threads: number | null;
  /** The projections that get adapters, or `auto` (autoTargets in recover.ts: by the steps). */
  targets: readonly Projection[] | 'auto';
  /** The adapters' start: the next larger level's (chain), B = 0 (zero), or a rank-r least-squares fit toward the full model (fit). */
  init: 'fit' | 'zero' | 'chain';
  /** lora: the teacher kept as each position's top k tokens and the tail mass (absent: the full distributions). */
  teacherTopK?: number;
  /** blockwise: multiply-adds per model parameter; the steps per block and level follow from it (budget.ts) instead of `steps`. */
  budget?: number;
  /** reorder.recover unset: what runs where LoRA cannot (above RECOVER_MAX_PARAMS, or a streamed model): blockwise under the budget. */
  large?: RecoverOptions;
}

export const RECOVER_DEFAULTS = { rank: 8, alpha: 16, steps: 'auto', lr: 1.5e-2, data: 1024, batch: 8, ce: 0, targets: 'auto', init: 'chain' } as const;

/** reorder.recover=distill's defaults: ≥ 1M training tokens (text: every calibration window there is), one pass over them. */
export const DISTILL_DEFAULTS = { tokens: 1_000_000, lr: 3e-4, batch: 16, fullWeight: 8, levelsPerStep: 3 } as const;

/** Keys only LoRA recovery reads (refused with recover=distill). */
const LORA_ONLY = ['recoverRank', 'recoverAlpha', 'recoverThreads', 'recoverTargets', 'recoverInit'] as const;
const DISTILL_ONLY = ['recoverFullWeight', 'recoverLevelsPerStep'] as const;
const BLOCKWISE_ONLY = ['recoverTarget', 'recoverEndToEnd', 'recoverLoss', 'recoverBudget'] as const;
/** reorder.recover=blockwise's defaults (steps per block and level; end-to-end steps per level). */
export const BLOCKWISE_DEFAULTS = { steps: 64, endToEnd: 120, target: 'teacher', loss: 'lens' } as const;
/** reorder.recover unset, above 200M parameters or streamed: blockwise under a compute budget (budget.ts), a cheap local loss, no end-to-end pass. */
export const LARGE_DEFAULTS = { endToEnd: 0, target: 'teacher', loss: 'norm', batch: BUDGET_DEFAULTS.batch, data: BUDGET_DEFAULTS.data, budget: BUDGET_DEFAULTS.macsPerParam } as const;

export const OPTION_SPECS: readonly OptionSpec[] = [
  { key: 'importance', help: `unit importance: ${[...PROVIDERS, 'auto'].join(' | ')} (auto: the best of ${AUTO_PROVIDERS.join(', ')} at 50% on held-out data; fisher: squared mask gradients accumulated over fisherTokens)`, default: 'activation' },
  { key: 'widths', help: 'uniform (one keep fraction in every non-anchor layer) | search (per-layer KV groups, query heads in a group and FFN widths picked by measured loss under each level\'s budget; targets with per-layer widths only)', default: 'uniform' },
  { key: 'budget', help: 'widths=search: a level\'s fraction bounds params (as sizeBy says) | memory (bf16 weights + f16 KV cache at budgetContext tokens) | latency (decode-step time at budgetContext tokens, priced by the TS runtime\'s matvec timed on this host)', default: 'params' },
  { key: 'budgetContext', help: 'budget=memory or latency: context length of the KV cache counted', default: '2048' },
  { key: 'searchPoints', help: 'widths=search: FFN widths measured per layer', default: '8' },
  { key: 'searchRefine', help: 'widths=search: true measures the sensitivity again at the widths each level reached (one more sweep per level)', default: 'false' },
  { key: 'iterative', help: 'true: re-score units with each next larger level active (largest first) and re-sort inside its prefix', default: 'false' },
  { key: 'fisherTokens', help: 'importance=fisher: tokens the Fisher information accumulates over (training windows or self-generated)', default: String(FISHER_DEFAULTS.tokens) },
  { key: 'fisherBatch', help: 'importance=fisher: sequences per gradient', default: String(FISHER_DEFAULTS.batch) },
  { key: 'calib', help: 'calibration sequences', default: '10' },
  { key: 'calibLength', help: 'tokens per calibration sequence', default: '64' },
  { key: 'calibText', help: 'a text file to calibrate on (needs the model\'s tokenizer), or token ids as JSON [[1, 5, ...], ...]; default: sequences sampled from the model' },
  { key: 'seed', help: 'calibration seed', default: '42' },
  { key: 'heldOut', help: 'held-out sequences (level perplexity, auto)', default: '10' },
  { key: 'anchors', help: 'layers kept at full width: a count (the layers whose skipping costs most; measuring that runs the calibration set through about layers²/2 layers: docs/scale.md), or a list like 0,5 (no measurement)', default: 'round(layers·6/32)' },
  { key: 'levels', help: 'elastic levels: a count, or fractions like 0.5,0.75,1', default: '10' },
  { key: 'quantBlock', help: "in-sliced widths are multiples of this", default: "the target's quantization block" },
  { key: 'evaluate', help: 'measure held-out perplexity per level: true | false | auto', default: 'auto (models up to 50M parameters)' },
  { key: 'sizeBy', help: 'a level\'s fraction counts all parameters (total) or decoder-layer ones (blocks)', default: 'total' },
  { key: 'recover', help: 'recovery of the levels: lora (per-level adapters distilled from the full model) | distill (the shared weights trained for all levels at once, no adapters) | blockwise (lora\'s adapters trained one decoder block at a time: memory one block) | none', default: `lora up to 200M parameters; above, or where the model streams (--stream-above), blockwise under recoverBudget (norm loss, ${LARGE_DEFAULTS.data} sequences, ${LARGE_DEFAULTS.batch} a step, no end-to-end steps)` },
  { key: 'recoverRank', help: 'LoRA rank of the recovery adapters', default: String(RECOVER_DEFAULTS.rank) },
  { key: 'recoverAlpha', help: 'LoRA alpha (the adapters are scaled by alpha/rank)', default: String(RECOVER_DEFAULTS.alpha) },
  { key: 'recoverSteps', help: 'training steps per level, or auto: about 360 steps per chain shared by its levels (80 to 240 each; 80 with the default 10 levels, 240 with 0.5,0.75,1); blockwise: per decoder block and level (auto: 64)', default: RECOVER_DEFAULTS.steps },
  { key: 'recoverLr', help: 'Adam learning rate (cosine decay to a tenth)', default: String(RECOVER_DEFAULTS.lr) },
  { key: 'recoverSeed', help: 'seed of the adapters\' init, the batch order and the training data', default: 'the calibration seed' },
  { key: 'recoverData', help: 'training sequences of calibLength tokens (self-generated, or text windows; never held-out ones)', default: String(RECOVER_DEFAULTS.data) },
  { key: 'recoverBatch', help: 'sequences per training step', default: String(RECOVER_DEFAULTS.batch) },
  { key: 'recoverThreads', help: 'levels trained at once, one worker thread each (with recoverInit=chain: chains, two); results do not depend on it', default: 'the cores, at most 4' },
  { key: 'recoverTargets', help: `projections that get adapters, a list of ${PROJECTIONS.join(', ')}, or auto: o,down when levels train fewer than 160 steps, o,up,down from 160`, default: RECOVER_DEFAULTS.targets },
  { key: 'recoverInit', help: "the adapters' start: chain (levels train largest first in two chains, each from the next larger level's adapters) | zero (LoRA's B = 0) | fit (rank-r least-squares correction toward the full model)", default: RECOVER_DEFAULTS.init },
  { key: 'recoverFullWeight', help: 'distill: weight of the full level in each step\'s loss (the others weigh 1)', default: String(DISTILL_DEFAULTS.fullWeight) },
  { key: 'recoverLevelsPerStep', help: 'distill: levels in each step\'s loss (the full one, the smallest, then random others)', default: String(DISTILL_DEFAULTS.levelsPerStep) },
  { key: 'recoverTarget', help: 'blockwise: a level\'s block matches the full model\'s state at its depth (teacher) or the full block on the level\'s own input (own)', default: BLOCKWISE_DEFAULTS.target },
  { key: 'recoverLoss', help: 'blockwise: the block-local loss: mse (hidden states), norm (RMS-normalized states), lens (the head\'s KL on the states) or topk (that KL on the 256 vocabulary rows with the most teacher probability at the block: the head costs 256 × hidden, not vocab × hidden)', default: BLOCKWISE_DEFAULTS.loss },
  { key: 'recoverBudget', help: 'blockwise: multiply-adds per model parameter; the steps per block and level are (budget − the rows\' forward passes) ÷ (3 × rows a step × tokens × the levels\' block multiply-adds), 1 to 64 (with the default 10 levels: 5 at 1.1B; the recovery ≈ 24 CPU-min at 1.1B, ≈ 2.5 CPU-hours at 7B on a 2-core machine); auto: the default where recover is unset and LoRA cannot run', default: `auto (${LARGE_DEFAULTS.budget}); explicit blockwise: recoverSteps` },
  { key: 'recoverEndToEnd', help: 'blockwise: end-to-end LoRA steps per level after the block-by-block pass (the gradient carried back block by block; 0: none)', default: String(BLOCKWISE_DEFAULTS.endToEnd) },
  { key: 'recoverCe', help: 'weight of the next-token cross-entropy beside the KL to the full model', default: String(RECOVER_DEFAULTS.ce) },
  { key: 'recoverTeacherTopK', help: "lora: keep the full model's distributions as each position's top k tokens and the mass of the rest (k · 8 bytes a token; steps past the first pass over the data skip the full model); 0: the whole distributions, kept up to 256 MB else recomputed each step", default: '0' },
];

export const OPTION_KEYS = OPTION_SPECS.map((s) => s.key);

const int = (key: string, v: string, min: number) => {
  if (!/^\d+$/.test(v.trim()) || Number(v) < min) throw new UsageError(`reorder.${key} must be an integer ≥ ${min}, got "${v}"`);
  return Number(v);
};

export function parseReorderOptions(raw: Record<string, string>): ReorderOptions {
  for (const k of Object.keys(raw)) {
    if (!(OPTION_KEYS as readonly string[]).includes(k)) throw new UsageError(`unknown reorder option "${k}"; known: ${OPTION_KEYS.join(', ')}`);
  }
  const importance = (raw.importance ?? 'activation').trim();
  if (importance !== 'auto' && !(PROVIDERS as readonly string[]).includes(importance)) {
    throw new UsageError(`reorder.importance must be one of ${[...PROVIDERS, 'auto'].join(', ')}, got "${importance}"`);
  }
  let levels: ReorderOptions['levels'] = { count: 10 };
  if (raw.levels !== undefined) {
    const v = raw.levels.trim();
    if (/^\d+$/.test(v) && !v.includes('.')) levels = { count: int('levels', v, 1) };
    else {
      const list = v.split(',').map((s) => Number(s.trim()));
      if (list.some((x) => !Number.isFinite(x) || x <= 0 || x > 1)) {
        throw new UsageError(`reorder.levels must be a count or comma-separated fractions in (0, 1], got "${raw.levels}"`);
      }
      levels = [...new Set(list)].sort((a, b) => a - b);
    }
  }
  let anchors: ReorderOptions['anchors'] = 'default';
  if (raw.anchors !== undefined) {
    const v = raw.anchors.trim();
    if (v.startsWith('[') || v.includes(',') || v.startsWith('l')) {
      const list = v.replace(/^l|^\[|\]$/g, '').split(',').filter(Boolean).map((s) => int('anchors', s, 0));
      anchors = [...new Set(list)].sort((a, b) => a - b);
    } else anchors = int('anchors', v, 0);
  }
  let evaluate: ReorderOptions['evaluate'] = 'auto';
  if (raw.evaluate !== undefined) {
    if (!['true', 'false', 'auto'].includes(raw.evaluate)) throw new UsageError(`reorder.evaluate must be true, false or auto, got "${raw.evaluate}"`);
    evaluate = raw.evaluate === 'auto' ? 'auto' : raw.evaluate === 'true';
  }
  const recoverMode = (raw.recover ?? 'lora').trim();
  if (recoverMode !== 'lora' && recoverMode !== 'distill' && recoverMode !== 'blockwise' && recoverMode !== 'none') throw new UsageError(`reorder.recover must be lora, distill, blockwise or none, got "${raw.recover}"`);
  const num = (key: string, v: string | undefined, dflt: number, min: number) => {
    if (v === undefined) return dflt;
    const x = Number(v);
    if (!v.trim() || !Number.isFinite(x) || x < min) throw new UsageError(`reorder.${key} must be a number ≥ ${min}, got "${v}"`);
    return x;
  };
  const d = RECOVER_DEFAULTS;
  const seed = raw.seed !== undefined ? int('seed', raw.seed, 0) : 42;
  const recoverKeys = Object.keys(raw).filter((k) => k.startsWith('recover') && k !== 'recover');
  if (recoverMode === 'none' && recoverKeys.length) throw new UsageError(`reorder.${recoverKeys[0]} needs reorder.recover=lora, distill or blockwise`);
  const distill = recoverMode === 'distill';
  const blockwise = recoverMode === 'blockwise';
  // Which mode reads each key: LoRA's adapter keys serve blockwise too, but not its threads or start.
  const owner = (k: string) => ((DISTILL_ONLY as readonly string[]).includes(k) ? 'distill' : (BLOCKWISE_ONLY as readonly string[]).includes(k) ? 'blockwise' : (LORA_ONLY as readonly string[]).includes(k) ? (k === 'recoverThreads' || k === 'recoverInit' ? 'lora' : 'lora or blockwise') : null);
  const wrong = recoverKeys.find((k) => owner(k) !== null && !owner(k)!.split(' or ').includes(recoverMode) && !(k === 'recoverBudget' && raw.recover === undefined));
  if (wrong) throw new UsageError(`reorder.${wrong} applies to reorder.recover=${owner(wrong)} only`);
  if (raw.recoverTeacherTopK !== undefined && recoverMode !== 'lora') throw new UsageError('reorder.recoverTeacherTopK applies to reorder.recover=lora only');
  const teacherTopK = raw.recoverTeacherTopK !== undefined ? int('recoverTeacherTopK', raw.recoverTeacherTopK, 0) : 0;
  const calibLength = raw.calibLength !== undefined ? int('calibLength', raw.calibLength, 2) : 64;
  const dd = DISTILL_DEFAULTS;
  const macsPerParam = raw.recoverBudget !== undefined && raw.recoverBudget.trim() !== 'auto' ? num('recoverBudget', raw.recoverBudget, 0, 1) : undefined;
  const recoverOf = (recoverMode: 'lora' | 'distill' | 'blockwise', large: boolean): RecoverOptions => {
    const distill = recoverMode === 'distill';
    const blockwise = recoverMode === 'blockwise';
    const L = LARGE_DEFAULTS;
    return {
          method: recoverMode,
          rank: raw.recoverRank !== undefined ? int('recoverRank', raw.recoverRank, 1) : d.rank,
          alpha: num('recoverAlpha', raw.recoverAlpha, d.alpha, 0),
          steps: raw.recoverSteps !== undefined ? stepsOption(raw.recoverSteps) : blockwise ? BLOCKWISE_DEFAULTS.steps : d.steps,
          lr: num('recoverLr', raw.recoverLr, distill ? dd.lr : d.lr, 0),
          seed: raw.recoverSeed !== undefined ? int('recoverSeed', raw.recoverSeed, 0) : seed,
          data: raw.recoverData !== undefined ? int('recoverData', raw.recoverData, 1) : distill ? Math.ceil(dd.tokens / calibLength) : large ? L.data : d.data,
          batch: raw.recoverBatch !== undefined ? int('recoverBatch', raw.recoverBatch, 1) : distill ? dd.batch : large ? L.batch : d.batch,
          ce: num('recoverCe', raw.recoverCe, d.ce, 0),
          threads: raw.recoverThreads !== undefined ? int('recoverThreads', raw.recoverThreads, 1) : null,
          targets: raw.recoverTargets !== undefined && raw.recoverTargets.trim() !== 'auto' ? projections(raw.recoverTargets) : d.targets,
          init: raw.recoverInit !== undefined ? initMode(raw.recoverInit) : d.init,
          fullWeight: num('recoverFullWeight', raw.recoverFullWeight, dd.fullWeight, 0),
          levelsPerStep: raw.recoverLevelsPerStep !== undefined ? int('recoverLevelsPerStep', raw.recoverLevelsPerStep, 1) : dd.levelsPerStep,
          // Only when asked: the settings are part of the recovery's cache keys.
          ...(teacherTopK && recoverMode === 'lora' ? { teacherTopK } : {}),
          ...(blockwise
            ? {
                target: raw.recoverTarget !== undefined ? targetMode(raw.recoverTarget) : BLOCKWISE_DEFAULTS.target,
                endToEnd: raw.recoverEndToEnd !== undefined ? int('recoverEndToEnd', raw.recoverEndToEnd, 0) : large ? L.endToEnd : BLOCKWISE_DEFAULTS.endToEnd,
                loss: raw.recoverLoss !== undefined ? lossMode(raw.recoverLoss) : large ? L.loss : BLOCKWISE_DEFAULTS.loss,
              }
            : {}),
          ...(large && raw.recoverSteps === undefined ? { budget: macsPerParam ?? L.budget } : blockwise && macsPerParam !== undefined ? { budget: macsPerParam } : {}),
        };
  };
  const recover: RecoverOptions | null = recoverMode === 'none' ? null : { ...recoverOf(recoverMode, false), ...(raw.recover === undefined ? { large: recoverOf('blockwise', true) } : {}) };
  const sizeBy = raw.sizeBy ?? 'total';
  if (sizeBy !== 'total' && sizeBy !== 'blocks') throw new UsageError(`reorder.sizeBy must be total or blocks, got "${sizeBy}"`);
  const widths = (raw.widths ?? 'uniform').trim();
  if (widths !== 'uniform' && widths !== 'search') throw new UsageError(`reorder.widths must be uniform or search, got "${raw.widths}"`);
  const searchOnly = ['budget', 'budgetContext', 'searchPoints', 'searchRefine'].find((k) => raw[k] !== undefined);
  if (raw.searchRefine !== undefined && !['true', 'false'].includes(raw.searchRefine.trim())) throw new UsageError(`reorder.searchRefine must be true or false, got "${raw.searchRefine}"`);
  if (widths === 'uniform' && searchOnly) throw new UsageError(`reorder.${searchOnly} applies to reorder.widths=search only`);
  const budget = (raw.budget ?? 'params').trim();
  if (budget !== 'params' && budget !== 'memory' && budget !== 'latency') throw new UsageError(`reorder.budget must be params, memory or latency, got "${raw.budget}"`);
  if (raw.budgetContext !== undefined && budget === 'params') throw new UsageError('reorder.budgetContext applies to reorder.budget=memory or latency only');
  if (raw.iterative !== undefined && !['true', 'false'].includes(raw.iterative.trim())) throw new UsageError(`reorder.iterative must be true or false, got "${raw.iterative}"`);
  const fisherKey = ['fisherTokens', 'fisherBatch'].find((k) => raw[k] !== undefined);
  if (fisherKey && importance !== 'fisher') throw new UsageError(`reorder.${fisherKey} applies to reorder.importance=fisher only`);
  return {
    widths,
    budget,
    budgetContext: raw.budgetContext !== undefined ? int('budgetContext', raw.budgetContext, 1) : 2048,
    searchPoints: raw.searchPoints !== undefined ? int('searchPoints', raw.searchPoints, 1) : 8,
    searchRefine: raw.searchRefine?.trim() === 'true',
    iterative: raw.iterative?.trim() === 'true',
    fisherTokens: raw.fisherTokens !== undefined ? int('fisherTokens', raw.fisherTokens, 1) : FISHER_DEFAULTS.tokens,
    fisherBatch: raw.fisherBatch !== undefined ? int('fisherBatch', raw.fisherBatch, 1) : FISHER_DEFAULTS.batch,
    importance: importance as ReorderOptions['importance'],
    calibCount: raw.calib !== undefined ? int('calib', raw.calib, 1) : 10,
    calibLength,
    calibText: raw.calibText?.trim() || null,
    seed,
    heldOut: raw.heldOut !== undefined ? int('heldOut', raw.heldOut, 1) : 10,
    anchors,
    levels,
    quantBlock: raw.quantBlock !== undefined ? int('quantBlock', raw.quantBlock, 1) : null,
    evaluate,
    sizeBy,
    recover,
  };
}

export const REORDER_OPTIONS: OptionSchema<ReorderOptions> = { specs: OPTION_SPECS, parse: parseReorderOptions };

/** Uniform widths (a target with one width for all layers) leave no room for full-width anchor layers or searched widths. */
export function checkUniformAnchors(o: ReorderOptions, target: string, why?: string): void {
  if (o.widths === 'search') throw new UsageError(`--target ${target} takes one width for all layers${why ? ` (${why})` : ''}: reorder.widths=search needs a target with per-layer widths (ts, cuda, gguf-levels)`);
  if (Array.isArray(o.anchors) ? o.anchors.length > 0 : o.anchors !== 'default' && o.anchors > 0) {
    throw new UsageError(`--target ${target} needs one width for all layers: reorder.anchors must be 0`);
  }
}

/** `reorder.recoverSteps`: auto (a budget shared by the levels, recover.ts autoSteps) or an integer ≥ 1. */
function stepsOption(v: string): number | 'auto' {
  if (v.trim() === 'auto') return 'auto';
  if (!/^\d+$/.test(v.trim()) || Number(v) < 1) throw new UsageError(`reorder.recoverSteps must be auto or an integer ≥ 1, got "${v}"`);
  return Number(v);
}

/** `reorder.recoverTargets`: a comma list of projections, each once, kept in the model's order. */
function projections(v: string): Projection[] {
  const want = v.split(',').map((x) => x.trim()).filter(Boolean);
  const bad = want.find((x) => !(PROJECTIONS as readonly string[]).includes(x));
  if (bad !== undefined || !want.length) throw new UsageError(`reorder.recoverTargets must be auto or list projections of ${PROJECTIONS.join(', ')}, got "${v}"`);
  return PROJECTIONS.filter((p) => want.includes(p));
}

function targetMode(v: string): 'own' | 'teacher' {
  const x = v.trim();
  if (x !== 'own' && x !== 'teacher') throw new UsageError(`reorder.recoverTarget must be own or teacher, got "${v}"`);
  return x;
}

/** `reorder.recoverLoss`: mse, norm or lens. */
function lossMode(v: string): 'mse' | 'norm' | 'lens' | 'topk' {
  const x = v.trim();
  if (x !== 'mse' && x !== 'norm' && x !== 'lens' && x !== 'topk') throw new UsageError(`reorder.recoverLoss must be mse, norm, lens or topk, got "${v}"`);
  return x;
}

function initMode(v: string): 'fit' | 'zero' | 'chain' {
  const x = v.trim();
  if (x !== 'fit' && x !== 'zero' && x !== 'chain') throw new UsageError(`reorder.recoverInit must be fit, zero or chain, got "${v}"`);
  return x;
}

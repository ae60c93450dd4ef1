/**
 * Record `elastic-prefix/2`: the elastic levels of a reordered model (written by the `reorder` pass,
 * read by targets, the TS runtime and `llmc run --level`). Units are reordered so that every level
 * is a prefix: per layer, the first `kvGroups` KV groups, the first `qHeadsPerGroup` query heads of
 * each kept group, and the first `ffn` neurons of every elastic MLP.
 *
 * Version 2 adds recovery: each level may carry low-rank adapters (LoRA, trained against the full
 * model; the tensors travel in the compile unit's annotations, `adapters[level id]`, and each target
 * writes them its own way) and its quality before and after them. Version 1 records are still read
 * (as levels without recovery).
 */
import { LlmcError, UsageError, summarize } from '../errors.js';
import { Checker } from '../util/check.js';
import { defineRecord } from './types.js';
import type { LevelWidth } from '../ir/width.js';

/** Per layer: the first `kvGroups` KV groups, `qHeadsPerGroup` query heads of each, `ffn` neurons of every elastic MLP (MoE: of each routed expert; the shared expert stays full). */
export type { LevelWidth } from '../ir/width.js';

export interface LevelLayer extends LevelWidth {
  layer: number;
  anchor: boolean;
  heads: number;
  params: number;
}

export interface Level {
  id: string;
  /** The requested size as a fraction of the full model's parameters. */
  nominal: number;
  /** Real parameters of the sub-model, embeddings and lm_head included. */
  params: number;
  paramFrac: number;
  /** Parameters inside the decoder layers only. */
  blockParams: number;
  blockFrac: number;
  /** Multiply-add FLOPs (×2) per generated token at context lengths 128 / 512 / 2048. */
  flopsPerToken: Record<string, number>;
  /** KV-cache bytes per token, f16 cache. */
  kvBytesPerToken: number;
  layers: LevelLayer[];
  /** Held-out perplexity of the level as shipped: with its adapters when it has them (when evaluated). */
  heldOutPpl?: number;
  /** Fraction of held-out positions whose greedy (argmax) token equals the full model's, as shipped. */
  agreement?: number;
  /** Recovered levels: the quality without the adapters (what the reordering alone gives). */
  unrecovered?: LevelQuality;
  /** Recovered levels: the adapters' shape (the tensors are in the artifact, see each target). */
  adapters?: { rank: number; alpha: number; tensors: number; params: number };
}

export interface LevelQuality {
  heldOutPpl: number;
  agreement: number;
}

/** How levels were recovered (record version 2; null: not recovered). */
export type Recovery = LoraRecovery | DistillRecovery;

/**
 * Joint elastic distillation: the shared weights were trained for all levels at once (each level is
 * still a prefix slice of the one weight set; no adapters). The artifact's weights are the trained ones.
 */
export interface DistillRecovery {
  method: 'distill';
  steps: number;
  lr: number;
  batch: number;
  ce: number;
  seed: number;
  /** Weight of the full level's term; levels in each step's loss. */
  fullWeight: number;
  levelsPerStep: number;
  /** Training tokens seen (steps × batch × length). */
  tokens: number;
  /** The step whose weights were kept (lowest validation loss over the levels; 0: the reordered weights). */
  bestStep: number;
  /** The full model before training (held-out), when evaluated: the trained full level is measured against it. */
  originalHeldOutPpl?: number;
  data: { source: 'self-generated' | { text: string; sha256: string }; count: number; length: number; profile: string };
}

/** Per-level LoRA adapters distilled from the full model. */
export interface LoraRecovery {
  method: 'lora';
  /** LoRA rank and alpha: a level's linear computes x·(W + (alpha/rank)·B·A)ᵀ over its kept units. */
  rank: number;
  alpha: number;
  /** The linears that carry adapters (module names, e.g. q_proj). */
  targets: string[];
  steps: number;
  lr: number;
  batch: number;
  /** Weight of the next-token cross-entropy beside the KL to the full model. */
  ce: number;
  seed: number;
  /** Training sequences (never the held-out ones). */
  data: { source: 'self-generated' | { text: string; sha256: string }; count: number; length: number; profile: string };
  /** reorder.recover=blockwise: trained one decoder block at a time (`steps` per block), matched to `target`, then `endToEnd` steps. */
  blockwise?: { target: 'own' | 'teacher'; endToEnd: number; /** The block-local loss (absent in records written before it was a setting: mse). */ loss?: 'mse' | 'norm' | 'lens' | 'topk'; /** `steps` from a compute budget (reorder.recoverBudget): multiply-adds per parameter, and in all. */ budget?: { macsPerParam: number; macs: number } };
}

/** Per non-anchor layer, gathers new → old: new unit i is old unit order[i]. */
export interface LayerOrder {
  layer: number;
  /** Over KV groups (G); under MHA a group is one head. */
  groups: number[];
  /** Per NEW group position, the order of its R query heads (indices inside the group). */
  qInGroup: number[][];
  /** Per MLP prefix (`model.layers.<l>.mlp`, `...experts.<e>`, `...shared_expert`): order over its neurons. */
  mlp: Record<string, number[]>;
}

export interface ElasticLevels {
  format: 'elastic-prefix/2' | 'elastic-prefix/1';
  /** The importance source used; `auto`: held-out perplexity of each source's order at the 50% level. */
  importance: { provider: string; requested: string; auto?: Record<string, number> };
  /** The calibration set (self-generated or text) and its profile key. */
  calibration: { source: 'self-generated' | { text: string; sha256: string }; count: number; length: number; seed: number; heldOut: number; profile: string };
  attnUnit: 'kv-group' | 'q-head';
  anchors: number[];
  /** Loss of the calibration batch with each layer replaced by identity, and without. */
  layerLoss: number[] | null;
  baseLoss: number | null;
  /** In-sliced widths (o_proj / down_proj columns) are multiples of this. */
  quantBlock: number;
  layout: { inSliced: 'row-major-strided' };
  orders: LayerOrder[];
  full: Level;
  levels: Level[];
  /** reorder.widths=search: the budget the per-layer widths were searched under, and each level's fraction of it. */
  widthSearch?: { budget: { kind: 'params'; sizeBy: 'total' | 'blocks' } | { kind: 'memory'; context: number; bytesPerParam: number } | { kind: 'latency'; context: number; perCallUs: number; perMacNs: number; host: string }; points: number; refined?: true; picked?: ('searched' | 'uniform')[]; probes: number; baseLoss: number; fractions: number[] };
  /** reorder.iterative=true: each level's units re-scored with the next larger level active. */
  iterative?: true;
  /** importance=fisher: tokens the Fisher information accumulated over. */
  fisherTokens?: number;
  /** Held-out perplexity of the unmodified model (when evaluated). */
  heldOutPpl?: number;
  /** Recovery training of the levels (null: none, and always for version 1 records). */
  recovery: Recovery | null;
  notes: string[];
}

function readLevel(c: Checker, v: unknown, path: string): Level {
  const o = c.obj(v, path);
  c.str(o.id, `${path}.id`);
  for (const k of ['nominal', 'paramFrac', 'blockFrac'] as const) c.num(o[k], `${path}.${k}`);
  for (const k of ['params', 'blockParams', 'kvBytesPerToken'] as const) c.int(o[k], `${path}.${k}`);
  if (o.heldOutPpl !== undefined) c.num(o.heldOutPpl, `${path}.heldOutPpl`);
  if (o.agreement !== undefined) c.num(o.agreement, `${path}.agreement`);
  if (o.unrecovered !== undefined) {
    const q = c.obj(o.unrecovered, `${path}.unrecovered`);
    c.num(q.heldOutPpl, `${path}.unrecovered.heldOutPpl`);
    c.num(q.agreement, `${path}.unrecovered.agreement`);
  }
  if (o.adapters !== undefined) {
    const a = c.obj(o.adapters, `${path}.adapters`);
    for (const k of ['rank', 'tensors', 'params'] as const) c.int(a[k], `${path}.adapters.${k}`, 1);
    c.num(a.alpha, `${path}.adapters.alpha`);
  }
  c.arr(o.layers, `${path}.layers`).forEach((x, i) => {
    const p = `${path}.layers[${i}]`;
    const L = c.obj(x, p);
    c.int(L.layer, `${p}.layer`);
    for (const k of ['kvGroups', 'qHeadsPerGroup', 'ffn'] as const) c.int(L[k], `${p}.${k}`, 1);
  });
  return o as unknown as Level;
}

export const ELASTIC_LEVELS = defineRecord<ElasticLevels>('elastic-prefix/2', 'elastic levels (reorder)', (v, c) => {
  const o = c.obj(v, 'elastic-prefix');
  const v1 = o.format === 'elastic-prefix/1';
  if (!v1 && o.recovery !== null) {
    const r = c.obj(o.recovery, 'recovery');
    if (r.method !== 'lora' && r.method !== 'distill') c.fail('recovery.method', `must be "lora" or "distill", got ${summarize(r.method)}`);
    const ints = r.method === 'lora' ? (['rank', 'steps', 'batch'] as const) : (['steps', 'batch', 'levelsPerStep', 'tokens'] as const);
    for (const k of ints) c.int(r[k], `recovery.${k}`, 1);
    for (const k of r.method === 'lora' ? (['alpha', 'lr', 'ce'] as const) : (['fullWeight', 'lr', 'ce'] as const)) c.num(r[k], `recovery.${k}`);
  }
  c.arr(o.levels, 'levels').forEach((l, i) => readLevel(c, l, `levels[${i}]`));
  readLevel(c, o.full, 'full');
  c.ints(o.anchors, 'anchors');
  c.int(o.quantBlock, 'quantBlock', 1);
  c.arr(o.orders, 'orders').forEach((x, i) => {
    const p = `orders[${i}]`;
    const L = c.obj(x, p);
    c.int(L.layer, `${p}.layer`);
    c.ints(L.groups, `${p}.groups`);
    c.arr(L.qInGroup, `${p}.qInGroup`).forEach((q, g) => c.ints(q, `${p}.qInGroup[${g}]`));
    for (const [k, perm] of Object.entries(c.obj(L.mlp, `${p}.mlp`))) c.ints(perm, `${p}.mlp.${k}`);
  });
  return (v1 ? { ...o, recovery: null } : o) as unknown as ElasticLevels;
}, ['elastic-prefix/1']);

/** Uniform guessing over the vocabulary: a level whose perplexity is above this is worse than no model. */
export const worseThanUniform = (ppl: number | undefined, vocabSize: number): boolean => ppl !== undefined && ppl >= vocabSize;

const fmtPpl = (v: number | undefined) => (v === undefined ? '—' : v >= 1000 ? v.toFixed(0) : v >= 100 ? v.toFixed(1) : v.toFixed(2));
const fmtPct = (v: number | undefined) => (v === undefined ? '—' : `${(v * 100).toFixed(1)}%`);
export { fmtPct as formatLevelFraction, fmtPpl as formatPerplexity };

/**
 * What a runner says about the level it runs (its notes): the level, its share of the parameters and
 * its held-out quality against the full model (before and after recovery), and a warning when it is
 * worse than uniform guessing over the vocabulary.
 */
export function levelNotes(level: Level, record: ElasticLevels, vocabSize: number): string[] {
  const parts = [`level ${level.id} (${fmtPct(level.paramFrac)} of the parameters)`];
  if (level.heldOutPpl === undefined) parts.push('held-out perplexity not measured (compile with --opt reorder.evaluate=true)');
  else {
    const extra = [`full model ${fmtPpl(record.heldOutPpl)}`];
    if (level.unrecovered) extra.push(`${fmtPpl(level.unrecovered.heldOutPpl)} before recovery`);
    let q = `held-out perplexity ${fmtPpl(level.heldOutPpl)} (${extra.join('; ')})`;
    if (level.agreement !== undefined) q += `, greedy agreement with the full model ${fmtPct(level.agreement)}`;
    parts.push(q);
  }
  const notes = [parts.join(': ')];
  if (worseThanUniform(level.heldOutPpl, vocabSize)) {
    notes.push(`warning: level ${level.id} is worse than uniform guessing over the ${vocabSize}-token vocabulary (perplexity ${vocabSize}); its output is noise`);
  }
  return notes;
}

/** A level and its quality as JSON (`llmc run --json`'s `level`). */
export function levelJson(level: Level, record: ElasticLevels, vocabSize: number) {
  return {
    id: level.id,
    paramFrac: level.paramFrac,
    heldOutPpl: level.heldOutPpl ?? null,
    agreement: level.agreement ?? null,
    fullHeldOutPpl: record.heldOutPpl ?? null,
    recovered: level.unrecovered !== undefined,
    unrecovered: level.unrecovered ?? null,
    uniformPpl: vocabSize,
    worseThanUniform: worseThanUniform(level.heldOutPpl, vocabSize),
  };
}

/**
 * Pick a level: by id (`L3`), by nominal fraction, or the largest level whose real size is at most
 * the requested fraction.
 */
export function selectLevel(levels: readonly Level[] | null, request: string, where = ''): Level {
  if (!levels?.length) throw new LlmcError('--level needs an artifact compiled with --passes reorder (no elastic levels in its manifest)', where || undefined);
  const byId = levels.find((l) => l.id === request);
  if (byId) return byId;
  const r = Number(request);
  if (!Number.isFinite(r) || r <= 0 || r > 1) throw new UsageError(`--level takes a level id (${levels.map((l) => l.id).join(', ')}) or a fraction in (0, 1], got "${request}"`);
  const exact = levels.find((l) => Math.abs(l.nominal - r) < 1e-9);
  if (exact) return exact;
  const fit = levels.filter((l) => l.paramFrac <= r + 1e-9);
  if (!fit.length) {
    throw new UsageError(`no level is as small as ${r}; the smallest is ${levels[0].id} (${levels[0].paramFrac} of the parameters)`);
  }
  return fit[fit.length - 1];
}

/** The runtime's per-layer widths for a level. */
export function levelWidths(level: Level): LevelWidth[] {
  return level.layers.map((l) => ({ kvGroups: l.kvGroups, qHeadsPerGroup: l.qHeadsPerGroup, ffn: l.ffn }));
}

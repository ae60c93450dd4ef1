/**
 * Elastic level planner (SPEC §4.3): per level, per layer widths so the model's REAL parameter
 * count hits the target fraction. Anchor layers stay full; non-anchor layers share one keep
 * fraction; widths round down to whole units and to the quantization block along the in-sliced
 * dimension (o_proj / down_proj columns), are nested (monotone in the level) and levels that
 * round to the same widths are dropped.
 */
import { isMoeLayer, type ArchSpec } from '../../src/core/arch/spec.js';
import type { LevelWidth as LayerWidth, Level, LevelLayer } from '../../src/core/records/elastic.js';

export type { LayerWidth, LevelLayer, Level };

export const FLOP_CONTEXTS = [128, 512, 2048] as const;

export function fullWidth(spec: ArchSpec): LayerWidth {
  return {
    kvGroups: spec.numKvHeads,
    qHeadsPerGroup: spec.numHeads / spec.numKvHeads,
    ffn: spec.moe ? spec.moe.expertIntermediateSize : spec.intermediateSize,
  };
}

/** Parameters of layer l at width w, and the ones a token actually multiplies (MoE: top-k experts). */
export function layerParams(spec: ArchSpec, l: number, w: LayerWidth): { params: number; active: number; heads: number } {
  const D = spec.hiddenSize;
  const hd = spec.headDim;
  const heads = w.kvGroups * w.qHeadsPerGroup;
  const qkvRows = (heads + 2 * w.kvGroups) * hd;
  let attn = qkvRows * D + heads * hd * D;
  if (spec.qkvBias) attn += qkvRows;
  if (spec.oBias) attn += D;
  const mlp = (I: number) => 3 * D * I + (spec.mlpBias ? 2 * I + D : 0);
  const norms = 2 * D;
  if (!isMoeLayer(spec, l)) {
    // Dense layers of an MoE model (qwen2_moe mlp_only_layers) stay full: `ffn` means expert width there.
    const I = spec.moe ? spec.intermediateSize : w.ffn;
    const p = attn + norms + mlp(I);
    return { params: p, active: attn + mlp(I), heads };
  }
  const m = spec.moe!;
  const router = m.numExperts * D;
  const shared = m.sharedExpertIntermediateSize ? mlp(m.sharedExpertIntermediateSize) + D : 0;
  return {
    params: attn + norms + router + m.numExperts * mlp(w.ffn) + shared,
    active: attn + router + m.topK * mlp(w.ffn) + shared,
    heads,
  };
}

export function nonBlockParams(spec: ArchSpec): number {
  return spec.vocabSize * spec.hiddenSize * (spec.tieEmbeddings ? 1 : 2) + spec.hiddenSize;
}

export function describeLevel(spec: ArchSpec, id: string, nominal: number, widths: LayerWidth[], anchors: ReadonlySet<number>): Level {
  const full = fullWidth(spec);
  let total = 0;
  let fullBlocks = 0;
  for (let l = 0; l < spec.numLayers; l++) fullBlocks += layerParams(spec, l, full).params;
  const layers: LevelLayer[] = [];
  let blockParams = 0;
  let activeLinear = spec.vocabSize * spec.hiddenSize; // lm_head
  const attnFlops: number[] = [];
  let kvElems = 0;
  widths.forEach((w, l) => {
    const p = layerParams(spec, l, w);
    blockParams += p.params;
    activeLinear += p.active;
    attnFlops.push(4 * p.heads * spec.headDim);
    kvElems += 2 * w.kvGroups * spec.headDim;
    layers.push({ layer: l, anchor: anchors.has(l), ...w, heads: p.heads, params: p.params });
  });
  total = blockParams + nonBlockParams(spec);
  const fullTotal = fullBlocks + nonBlockParams(spec);
  const flopsPerToken: Record<string, number> = {};
  for (const c of FLOP_CONTEXTS) flopsPerToken[c] = 2 * activeLinear + attnFlops.reduce((a, b) => a + b, 0) * c;
  return {
    id,
    nominal,
    params: total,
    paramFrac: round6(total / fullTotal),
    blockParams,
    blockFrac: round6(blockParams / fullBlocks),
    flopsPerToken,
    kvBytesPerToken: kvElems * 2,
    layers,
  };
}

const round6 = (x: number) => Math.round(x * 1e6) / 1e6;

/** Allowed widths < full, aligned so the in-sliced dimension is a multiple of `block`, plus full. */
export function widthChoices(spec: ArchSpec, block: number): { attn: LayerWidth['kvGroups' | 'qHeadsPerGroup'][]; attnAxis: 'kvGroups' | 'qHeadsPerGroup'; ffn: number[] } {
  const G = spec.numKvHeads;
  const R = spec.numHeads / G;
  const hd = spec.headDim;
  // Under GQA/MHA the unit is a whole KV group; with a single KV head (MQA) only query heads can go.
  const attnAxis = G > 1 ? 'kvGroups' : 'qHeadsPerGroup';
  const n = G > 1 ? G : R;
  const colsPerUnit = G > 1 ? R * hd : hd;
  const attn: number[] = [];
  for (let k = 1; k <= n; k++) if (k === n || (k * colsPerUnit) % block === 0) attn.push(k);
  const I = spec.moe ? spec.moe.expertIntermediateSize : spec.intermediateSize;
  const ffn: number[] = [];
  for (let k = block; k < I; k += block) ffn.push(k);
  ffn.push(I);
  return { attn, attnAxis, ffn };
}

/**
 * Widths of every layer at non-anchor keep fraction f. `ch` is widthChoices(spec, block), for callers
 * that ask at many fractions (each choice list is as long as the FFN width at block 1).
 */
export function widthsAt(spec: ArchSpec, f: number, anchors: ReadonlySet<number>, block: number, ch = widthChoices(spec, block)): LayerWidth[] {
  const full = fullWidth(spec);
  /** The largest choice within f of total (the first when none is), by bisection: choices ascend. */
  const pick = (choices: number[], total: number) => {
    let lo = 0;
    for (let hi = choices.length - 1; lo < hi; ) {
      const mid = (lo + hi + 1) >> 1;
      if (choices[mid] <= f * total + 1e-9) lo = mid;
      else hi = mid - 1;
    }
    return choices[lo];
  };
  const attnFull = ch.attnAxis === 'kvGroups' ? full.kvGroups : full.qHeadsPerGroup;
  const w: LayerWidth = { ...full, ffn: pick(ch.ffn, full.ffn) };
  w[ch.attnAxis] = pick(ch.attn, attnFull);
  return Array.from({ length: spec.numLayers }, (_, l) => (anchors.has(l) ? { ...full } : { ...w }));
}

export interface PlanOptions {
  /** Explicit target fractions, or a count of levels spread evenly from the smallest reachable size to 1. */
  levels: number[] | { count: number };
  anchors: ReadonlySet<number>;
  /** Alignment of in-sliced widths (quantization block along K). */
  block: number;
  /** What a level's fraction measures: all parameters (default) or decoder-layer parameters only (ELMS's table). */
  sizeBy?: 'total' | 'blocks';
}

export function planLevels(spec: ArchSpec, opts: PlanOptions): { levels: Level[]; notes: string[] } {
  const notes: string[] = [];
  const ch = widthChoices(spec, opts.block);
  const full = fullWidth(spec);
  const attnFull = ch.attnAxis === 'kvGroups' ? full.kvGroups : full.qHeadsPerGroup;
  // Every keep fraction at which some width changes.
  const fs = [...new Set([...ch.attn.map((a) => a / attnFull), ...ch.ffn.map((x) => x / full.ffn), 0])].sort((a, b) => a - b);
  const at = (f: number) => {
    const w = widthsAt(spec, f, opts.anchors, opts.block, ch);
    return { f, w, level: describeLevel(spec, '', 0, w, opts.anchors) };
  };
  const candidates = fs.map(at);
  const frac = (l: Level) => (opts.sizeBy === 'blocks' ? l.blockFrac : l.paramFrac);
  const minFrac = frac(candidates[0].level);
  let targets: number[];
  if (Array.isArray(opts.levels)) targets = [...opts.levels].sort((a, b) => a - b);
  else {
    const n = opts.levels.count;
    targets = n === 1 ? [1] : Array.from({ length: n }, (_, i) => Math.round((minFrac + ((1 - minFrac) * i) / (n - 1)) * 1e4) / 1e4);
  }
  const levels: Level[] = [];
  let prevKey = '';
  for (const t of targets) {
    let chosen = candidates[0];
    for (const c of candidates) if (frac(c.level) <= t + 1e-9) chosen = c;
    if (chosen === candidates[0] && frac(candidates[0].level) > t + 1e-9) {
      notes.push(`level ${t}: the smallest sub-model is ${(minFrac * 100).toFixed(1)}% of the ${opts.sizeBy === 'blocks' ? 'layer ' : ''}parameters (anchors${opts.sizeBy === 'blocks' ? '' : ' and embeddings'} stay full); using it`);
    }
    const key = JSON.stringify(chosen.w);
    if (key === prevKey) {
      notes.push(`level ${t}: rounds to the same widths as the level below (alignment ${opts.block}); dropped`);
      continue;
    }
    prevKey = key;
    levels.push({ ...chosen.level, id: `L${levels.length}`, nominal: t });
  }
  return { levels, notes };
}

/**
 * Record `expert-table/2`: the per-expert bit-width plan of an MoE model (written by the
 * `expert-bits` pass) with everything needed to re-check it and to run it offloaded:
 *  - per item (an expert, an expert's projection, or a layer's projection) and candidate format:
 *    the exact byte size and the measured sensitivities, and the choice made, so anyone can re-solve
 *    the knapsack on the recorded table and compare;
 *  - the activation profile: per-expert routing counts and mean gate weights;
 *  - the 2nd-order routing predictor with backoff (EdgeMoE §3.3.2, SPEC §1.5/§4.5) and the cache
 *    inputs (offline activation frequencies f for EdgeMoE's eviction score, SPEC §1.6), which the
 *    TS runtime reads for `llmc run --expert-cache N`.
 * Browser-safe: imports nothing but src/core.
 */
import { Checker } from '../util/check.js';
import { defineRecord } from './types.js';

export type Granularity = 'expert' | 'expert-proj' | 'layer-proj';
export const GRANULARITIES: readonly Granularity[] = ['expert', 'expert-proj', 'layer-proj'];

/** One candidate of an item: a requested format, what each of the item's tensors is written as, bytes and losses. */
export interface ItemChoice {
  /** The candidate as requested (e.g. Q4_K). */
  format: string;
  /** Per tensor of the item (item.tensors order): the format written (a row-length fallback may differ, e.g. Q4_K → Q5_0). */
  written: string[];
  /** Exact bytes of the item's tensors in this format. */
  bytes: number;
  /** Teacher-forced KL (nats/token, calibration split) with only this item in this format. */
  kl: number;
  /** Activation-aware reconstruction error (expected squared error added to the residual per token). */
  recon: number;
  /** What the solver minimized: kl, or recon in KL units (× reconToKl). */
  loss: number;
}

export interface PlanItem {
  /** `<layer>.<expert>` / `<layer>.shared`, with `.<proj>` for projections, or `<layer>.*.<proj>` for a layer's projection. */
  key: string;
  layer: number;
  tensors: string[];
  choices: ItemChoice[];
  /** Index into choices. */
  chosen: number;
}

export interface ExpertStat {
  layer: number;
  /** Routed expert index, or -1 for qwen2_moe's shared expert. */
  expert: number;
  /** Calibration tokens routed to it (every token for the shared expert). */
  tokens: number;
  /** Mean routing weight over those tokens (shared expert: mean sigmoid gate). */
  meanGate: number;
  /** Fewer than minTokens calibration tokens reached it: sensitivities were measured force-routed. */
  forced: boolean;
  params: number;
}

/** A predictor row: a context's total count and its top experts with counts. */
export interface PredictorRow {
  ctx: string;
  total: number;
  top: [expert: number, count: number][];
}

export interface PredictorLayer {
  /** MoE-layer index n (0..S-1) and the decoder layer it is. */
  n: number;
  layer: number;
  /** Activation counts per expert (the order-0 backoff). */
  marginal: number[];
  /** Context = the previous MoE layer's expert set ("a,b"). */
  order1: PredictorRow[];
  /** Context = the two previous MoE layers' sets ("a,b|c,d"). */
  order2: PredictorRow[];
}

export interface RoutingPredictor {
  order: 2;
  /** Use an order-2 row when its total reaches tau, else the order-1 row if seen, else the marginal. */
  tau: number;
  /** Experts kept per row. */
  topM: number;
  /** Contexts of MoE layers 0 and 1 come from the previous token's last layers. */
  wrap: 'previous-token';
  topK: number;
  numExperts: number;
  layers: PredictorLayer[];
}

export interface CacheInputs {
  /** Decoder layers that are MoE layers, in order (the runtime's S = their count). */
  moeLayers: number[];
  /** Offline activation frequency per MoE layer and expert (EdgeMoE's f). */
  f: number[][];
  /** Experts preloaded per layer (EdgeMoE's m). */
  preload: number;
  /** Bytes of each routed expert as written, per MoE layer. */
  expertBytes: number[][];
  /**
   * Hit rates of the policies on held-out routing traces (the predictor learned on calibration
   * traces), with the bytes each reads (demand loads + preloads, the experts as written).
   */
  simulated: { capacity: number; policy: string; preload: boolean; hitRate: number; bytesRead?: number; loads?: number }[];
  /** Per capacity, Belady with prefetching: no policy reads fewer experts (loads), nor fewer bytes when a layer's experts share a format. */
  beladyPrefetch?: { capacity: number; loads: number; bytes: number }[];
}

export interface PlanSummary {
  bytes: number;
  /** Bits per weight over the planned tensors. */
  bpw: number;
  /** Σ of the chosen losses (the proxy). */
  proxyLoss: number;
  /** Lower bound on the optimal proxy loss for this budget (equal to proxyLoss when solved exactly). */
  lowerBound: number;
  method: 'dp' | 'lagrangian' | 'edgemoe';
  /** Held-out perplexity of the plan, and its relative increase over the unquantized experts. */
  heldOutPpl: number;
  heldOutLoss: number;
}

/**
 * A maxLoss plan accepted on the artifact as written, run on its target's own runtime (SPEC §4.2 made
 * to hold on what ships): on acceptance sequences disjoint from calibration, held-out and the
 * compile's evaluation set, against the same artifact with the planned tensors unquantized.
 */
export interface ArtifactAcceptance {
  target: string;
  /** What ran it ('ts-runtime', 'llama.cpp'). */
  engine: string;
  /** Acceptance sequences and tokens scored; where they come from and their profile key. */
  sequences: number;
  tokens: number;
  source: 'self-generated' | 'text';
  profile: string;
  /** The format of the planned tensors in the reference artifact. */
  reference: string;
  /** One-sided confidence of upperBound (Student's t over the per-sequence mean NLL differences). */
  confidence: number;
  /** The accepted plan: relative perplexity increase exp(mean Δnll) − 1, and its upper confidence bound (≤ maxLoss). */
  loss: number;
  upperBound: number;
  /** Each plan tried: the bound the search ran under, its bytes and held-out (proxy) loss, and the artifact's. */
  rounds: { searchLoss: number; bytes: number; heldOutLoss: number; loss: number; upperBound: number; accepted: boolean }[];
}

export interface ExpertTable {
  format: 'expert-table/2';
  strategy: 'mckp' | 'edgemoe';
  granularity: Granularity;
  /** Candidate formats, fewest bits first. */
  candidates: string[];
  sensitivity: { used: 'kl' | 'recon'; reconToKl: number; rankCorrelation: number };
  budget: { kind: 'bytes' | 'bpw' | 'maxLoss'; value: number; bytes?: number };
  calibration: { source: 'self-generated' | { text: string; sha256: string }; count: number; length: number; seed: number; heldOut: number; profile: string; minTokens: number };
  refPpl: number;
  experts: ExpertStat[];
  items: PlanItem[];
  plan: PlanSummary;
  /** Every candidate as one format for all items: bytes, proxy loss, held-out loss. */
  uniform: { format: string; bytes: number; proxyLoss: number; heldOutLoss: number }[];
  /** maxLoss: each solve of the calibrated loop (SPEC §4.2) and whether held-out data accepted it. */
  acceptance: { budget: number; proxyLoss: number; bytes: number; heldOutLoss: number; accepted: boolean }[];
  /**
   * The target stacks a layer's experts in one tensor (no per-expert formats): the plan written is
   * layer-proj, and this is the per-expert plan under the same budget it would have written.
   */
  perExpert: { plan: PlanSummary; items: number; savesLoss: number; savesHeldOutLoss: number } | null;
  /** maxLoss only: the plan as measured on the written artifact (null without maxLoss, or an expert-table/1 record). */
  artifact: ArtifactAcceptance | null;
  edgemoe: { bLo: string; bHi: string; uniformLoss: Record<string, number>; importance: { key: string; loss: number }[]; K: number; oracleCalls: number } | null;
  predictor: RoutingPredictor;
  cache: CacheInputs;
  notes: string[];
}

function checkRows(c: Checker, v: unknown, path: string, E: number): void {
  c.arr(v, path).forEach((r, i) => {
    const p = `${path}[${i}]`;
    const o = c.obj(r, p);
    c.str(o.ctx, `${p}.ctx`);
    c.int(o.total, `${p}.total`);
    c.arr(o.top, `${p}.top`).forEach((t, k) => {
      const [e, n] = c.arr(t, `${p}.top[${k}]`);
      if (c.int(e, `${p}.top[${k}][0]`) >= E) c.fail(`${p}.top[${k}][0]`, `expert ${e} does not exist (${E} experts)`);
      c.int(n, `${p}.top[${k}][1]`);
    });
  });
}

export const EXPERT_TABLE = defineRecord<ExpertTable>('expert-table/2', 'per-expert formats and routing profile (expert-bits)', (v, c) => {
  const o = c.obj(v, 'expert-table');
  if (o.format === 'expert-table/1') o.artifact = null; // written before plans were accepted on the artifact
  if (o.artifact !== null && o.artifact !== undefined) {
    const a = c.obj(o.artifact, 'artifact');
    c.str(a.engine, 'artifact.engine');
    c.int(a.sequences, 'artifact.sequences', 2);
    c.int(a.tokens, 'artifact.tokens');
    for (const k of ['confidence', 'loss', 'upperBound'] as const) c.num(a[k], `artifact.${k}`);
    c.arr(a.rounds, 'artifact.rounds').forEach((r, i) => {
      const q = c.obj(r, `artifact.rounds[${i}]`);
      for (const k of ['searchLoss', 'bytes', 'heldOutLoss', 'loss', 'upperBound'] as const) c.num(q[k], `artifact.rounds[${i}].${k}`);
    });
  } else o.artifact = null;
  c.str(o.granularity, 'granularity');
  c.arr(o.items, 'items').forEach((x, i) => {
    const p = `items[${i}]`;
    const it = c.obj(x, p);
    c.str(it.key, `${p}.key`);
    const choices = c.arr(it.choices, `${p}.choices`);
    choices.forEach((ch, j) => {
      const q = c.obj(ch, `${p}.choices[${j}]`);
      c.int(q.bytes, `${p}.choices[${j}].bytes`);
      c.num(q.loss, `${p}.choices[${j}].loss`);
    });
    if (c.int(it.chosen, `${p}.chosen`) >= choices.length) c.fail(`${p}.chosen`, `no choice ${it.chosen}`);
  });
  const pr = c.obj(o.predictor, 'predictor');
  const E = c.int(pr.numExperts, 'predictor.numExperts', 1);
  c.int(pr.topK, 'predictor.topK', 1);
  c.int(pr.tau, 'predictor.tau', 1);
  c.arr(pr.layers, 'predictor.layers').forEach((x, i) => {
    const p = `predictor.layers[${i}]`;
    const L = c.obj(x, p);
    c.int(L.n, `${p}.n`);
    c.int(L.layer, `${p}.layer`);
    if (c.ints(L.marginal, `${p}.marginal`).length !== E) c.fail(`${p}.marginal`, `needs ${E} counts`);
    checkRows(c, L.order1, `${p}.order1`, E);
    checkRows(c, L.order2, `${p}.order2`, E);
  });
  const ca = c.obj(o.cache, 'cache');
  const S = c.ints(ca.moeLayers, 'cache.moeLayers').length;
  const f = c.arr(ca.f, 'cache.f');
  if (f.length !== S) c.fail('cache.f', `needs one row per MoE layer (${S})`);
  f.forEach((row, i) => c.arr(row, `cache.f[${i}]`).forEach((x, j) => c.num(x, `cache.f[${i}][${j}]`)));
  c.int(ca.preload, 'cache.preload');
  return o as unknown as ExpertTable;
}, ['expert-table/1']);

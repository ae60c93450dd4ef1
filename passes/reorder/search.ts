/**
 * Per-layer widths searched under a budget (`reorder.widths=search`): instead of one keep fraction in
 * every non-anchor layer, each level gets the per-layer KV groups, query heads inside a group and FFN
 * neurons that a greedy descent on MEASURED per-layer loss sensitivity picks under its budget.
 *
 * Sensitivity: for every non-anchor layer and axis, the calibration loss with only that layer's axis
 * cut to a few widths (the importance order's prefixes, everything else full). The loss of a candidate
 * is the base loss plus the sum of its per-layer, per-axis increases (linear between measured widths).
 * The descent starts at the full model and repeatedly takes the one-step cut (one layer, one axis, to
 * its next allowed width) with the least estimated loss increase per unit of budget saved; each level
 * is the first state of the one descent under its budget, largest level first, so level i's widths
 * are ≤ level i+1's in every layer (nesting) by construction.
 */
import { stepSeconds, type KernelCost } from './latency.js';
import { createHash } from 'node:crypto';
import type { ArchSpec } from '../../src/core/arch/spec.js';
import type { Level } from '../../src/core/records/elastic.js';
import { describeLevel, fullWidth, widthChoices, type LayerWidth } from './planner.js';

/** What a level's budget measures: parameters (`sizeBy` total or blocks), or bytes held at run time. */
export type Budget = { kind: 'params'; sizeBy: 'total' | 'blocks' } | { kind: 'memory'; context: number; bytesPerParam: number } | { kind: 'latency'; cost: KernelCost };

export type Axis = 'kvGroups' | 'qHeadsPerGroup' | 'ffn';
export const AXES: readonly Axis[] = ['kvGroups', 'qHeadsPerGroup', 'ffn'];

/** Loss with one layer's axis cut to each of `widths` (ascending, the full width last), others full. */
export interface AxisLoss {
  widths: number[];
  loss: number[];
}

export interface Sensitivity {
  /** Loss of the full model on the same sequences. */
  base: number;
  /** Per layer (non-anchor), per axis that can be cut. */
  layers: Map<number, Partial<Record<Axis, AxisLoss>>>;
}

/** Allowed widths per axis (ascending, full last): whole units whose in-sliced columns align to `block`. */
export function axisChoices(spec: ArchSpec, block: number): Record<Axis, number[]> {
  const G = spec.numKvHeads;
  const R = spec.numHeads / G;
  const hd = spec.headDim;
  const ch = widthChoices(spec, block);
  // KV groups keep whole groups (R·hd o-columns each); query heads inside a group are kept in every kept
  // group, so each group's kept run of columns (r·hd) must align too (it starts at g·R·hd, aligned).
  const kv = G > 1 ? ch.attn : [1];
  const q: number[] = [];
  for (let r = 1; r <= R; r++) if (r === R || (r * hd) % block === 0) q.push(r);
  return { kvGroups: kv, qHeadsPerGroup: q, ffn: ch.ffn };
}

/** The widths at which sensitivity is measured: every KV-group and query-head choice, `points` FFN widths. */
export function probeWidths(spec: ArchSpec, block: number, points: number): Record<Axis, number[]> {
  const c = axisChoices(spec, block);
  const ffn = c.ffn.length <= points ? c.ffn : [...new Set(Array.from({ length: points }, (_, i) => c.ffn[Math.round(((c.ffn.length - 1) * (i + 1)) / points)]))];
  if (ffn[0] !== c.ffn[0] && c.ffn.length > points) ffn.unshift(c.ffn[0]);
  return { kvGroups: c.kvGroups, qHeadsPerGroup: c.qHeadsPerGroup, ffn };
}

/** Piecewise-linear loss at width v (clamped to the measured range). */
function lossAt(a: AxisLoss, v: number): number {
  const w = a.widths;
  if (v <= w[0]) return a.loss[0];
  for (let i = 1; i < w.length; i++) {
    if (v <= w[i]) return a.loss[i - 1] + ((a.loss[i] - a.loss[i - 1]) * (v - w[i - 1])) / (w[i] - w[i - 1]);
  }
  return a.loss[w.length - 1];
}

/** Size of a level under `budget` (the quantity compared with its target fraction). */
export function budgetOf(spec: ArchSpec, budget: Budget, lv: Level, full: Level): number {
  if (budget.kind === 'params') return budget.sizeBy === 'blocks' ? lv.blockParams / full.blockParams : lv.params / full.params;
  if (budget.kind === 'latency') return stepSeconds(spec, lv, budget.cost) / stepSeconds(spec, full, budget.cost);
  const bytes = (x: Level) => x.params * budget.bytesPerParam + (x.kvBytesPerToken * budget.context);
  return bytes(lv) / bytes(full);
}

export interface SearchOptions {
  /** Target fractions of the budget (ascending); 1 is the full model. */
  targets: number[];
  anchors: ReadonlySet<number>;
  block: number;
  budget: Budget;
  sensitivity: Sensitivity;
}

/**
 * Levels by greedy descent on the sensitivity table (see the file's comment). Returns the levels
 * (nested, ascending, duplicates dropped) and notes for targets below the smallest reachable size.
 */
export function searchLevels(spec: ArchSpec, o: SearchOptions): { levels: Level[]; notes: string[] } {
  const d = new Descent(spec, o);
  for (const t of d.targets) d.descendTo(t, o.sensitivity);
  return d.result();
}

/**
 * searchLevels with the table measured again (`remeasure`, at the widths reached) before each level
 * below the largest: the increases a layer's cut causes with the other layers already cut.
 */
export async function searchLevelsRefined(spec: ArchSpec, o: SearchOptions, remeasure: (state: LayerWidth[]) => Promise<Sensitivity>): Promise<{ levels: Level[]; notes: string[] }> {
  const d = new Descent(spec, o);
  let table = o.sensitivity;
  let measuredAt = JSON.stringify(d.state);
  for (let i = 0; i < d.targets.length; i++) {
    const at = JSON.stringify(d.state);
    if (at !== measuredAt && d.size > d.targets[i] + 1e-9) {
      table = await remeasure(d.state.map((w) => ({ ...w })));
      measuredAt = at;
    }
    d.descendTo(d.targets[i], table);
  }
  return d.result();
}

/** The one descent: its widths, its size under the budget and the level picked at each target. */
class Descent {
  readonly state: LayerWidth[];
  readonly targets: number[];
  size: number;
  private readonly choices: Record<Axis, number[]>;
  private readonly full: Level;
  private readonly picked: { t: number; w: LayerWidth[] }[] = [];
  private readonly notes: string[] = [];

  constructor(
    private readonly spec: ArchSpec,
    private readonly o: SearchOptions,
  ) {
    const L = spec.numLayers;
    this.choices = axisChoices(spec, o.block);
    this.full = describeLevel(spec, 'full', 1, Array.from({ length: L }, () => fullWidth(spec)), o.anchors);
    this.state = Array.from({ length: L }, () => fullWidth(spec));
    this.size = this.sizeOf(this.state);
    this.targets = [...o.targets].sort((a, b) => b - a);
  }

  private sizeOf(w: LayerWidth[]): number {
    return budgetOf(this.spec, this.o.budget, describeLevel(this.spec, '', 0, w, this.o.anchors), this.full);
  }

  /** Cuts until the size is within `t` (or nothing is left to cut); records the level. */
  descendTo(t: number, table: Sensitivity): void {
    const { spec, o, state, choices } = this;
    const increase = (l: number, axis: Axis, from: number, to: number) => {
      const a = table.layers.get(l)?.[axis];
      return a ? lossAt(a, to) - lossAt(a, from) : 0;
    };
    while (this.size > t + 1e-9) {
      let best: { l: number; axis: Axis; to: number; score: number; size: number } | null = null;
      for (let l = 0; l < spec.numLayers; l++) {
        if (o.anchors.has(l)) continue;
        for (const axis of AXES) {
          const ch = choices[axis];
          const at = ch.indexOf(state[l][axis]);
          if (at <= 0) continue;
          const to = ch[at - 1];
          const s = this.sizeOf(state.map((w, i) => (i === l ? { ...w, [axis]: to } : w)));
          const saved = this.size - s;
          if (saved <= 0) continue;
          // Loss per budget saved; ties go to the lower layer, then the axis order (deterministic).
          const score = increase(l, axis, state[l][axis], to) / saved;
          if (!best || score < best.score - 1e-15) best = { l, axis, to, score, size: s };
        }
      }
      if (!best) break;
      state[best.l] = { ...state[best.l], [best.axis]: best.to };
      this.size = best.size;
    }
    if (this.size > t + 1e-9) this.notes.push(`level ${t}: the smallest searched sub-model is ${(this.size * 100).toFixed(1)}% of the ${o.budget.kind === 'memory' ? 'memory' : o.budget.kind === 'latency' ? 'decode-step time' : 'parameters'} (anchors stay full); using it`);
    this.picked.push({ t, w: state.map((w) => ({ ...w })) });
  }

  result(): { levels: Level[]; notes: string[] } {
    const levels: Level[] = [];
    let prevKey = '';
    for (const p of [...this.picked].reverse()) {
      const key = JSON.stringify(p.w);
      if (key === prevKey) {
        this.notes.push(`level ${p.t}: the search gives the same widths as the level below; dropped`);
        continue;
      }
      prevKey = key;
      levels.push({ ...describeLevel(this.spec, `L${levels.length}`, p.t, p.w, this.o.anchors), id: `L${levels.length}`, nominal: p.t });
    }
    return { levels, notes: this.notes };
  }
}

/** The widths of a probe: `state` (default full) but layer l's axis at v. */
export function probe(spec: ArchSpec, l: number, axis: Axis, v: number, state?: readonly LayerWidth[]): LayerWidth[] {
  return Array.from({ length: spec.numLayers }, (_, i) => ({ ...(state?.[i] ?? fullWidth(spec)), ...(i === l ? { [axis]: v } : {}) }));
}

/**
 * Measures the sensitivity table with `loss(widths)` (the calibration loss of the orders' level at
 * those widths): one call per non-anchor layer, axis and probed width below the layer's width in
 * `state` (default: full; `base` is the loss at `state`).
 */
export async function measureSensitivity(
  spec: ArchSpec,
  anchors: ReadonlySet<number>,
  block: number,
  points: number,
  loss: (widths: LayerWidth[]) => Promise<number>,
  base: number,
  tick: () => void = () => {},
  state?: readonly LayerWidth[],
): Promise<Sensitivity> {
  const probes = probeWidths(spec, block, points);
  const layers = new Map<number, Partial<Record<Axis, AxisLoss>>>();
  for (let l = 0; l < spec.numLayers; l++) {
    if (anchors.has(l)) continue;
    const per: Partial<Record<Axis, AxisLoss>> = {};
    const at = state?.[l] ?? fullWidth(spec);
    for (const axis of AXES) {
      const ws = [...probes[axis].filter((v) => v < at[axis]), at[axis]];
      if (ws.length < 2) continue;
      const loss_: number[] = [];
      for (const v of ws) {
        loss_.push(v === at[axis] ? base : await loss(probe(spec, l, axis, v, state)));
        tick();
      }
      per[axis] = { widths: ws, loss: loss_ };
    }
    layers.set(l, per);
  }
  return { base, layers };
}

/** Number of loss evaluations measureSensitivity makes from the full model (for progress). */
export function probeCount(spec: ArchSpec, anchors: ReadonlySet<number>, block: number, points: number): number {
  const p = probeWidths(spec, block, points);
  const per = AXES.reduce((n, a) => n + (p[a].length < 2 ? 0 : p[a].length), 0);
  return per * (spec.numLayers - anchors.size);
}

/** A stable key of a sensitivity's inputs (for the profile cache). */
export function ordersKey(orders: unknown): string {
  return createHash('sha256').update(JSON.stringify(orders)).digest('hex').slice(0, 16);
}

/** The sensitivity table as profile arrays and back. */
export function sensitivityArrays(s: Sensitivity): { meta: Record<string, unknown>; arrays: Record<string, Float64Array> } {
  const arrays: Record<string, Float64Array> = {};
  const widths: Record<string, number[]> = {};
  for (const [l, per] of s.layers) {
    for (const axis of AXES) {
      const a = per[axis];
      if (!a) continue;
      arrays[`${l}.${axis}`] = Float64Array.from(a.loss);
      widths[`${l}.${axis}`] = a.widths;
    }
  }
  return { meta: { base: s.base, widths, layers: [...s.layers.keys()] }, arrays };
}

export function sensitivityFrom(meta: Record<string, unknown>, arrays: Record<string, Float64Array>): Sensitivity {
  const widths = meta.widths as Record<string, number[]>;
  const layers = new Map<number, Partial<Record<Axis, AxisLoss>>>();
  for (const l of meta.layers as number[]) {
    const per: Partial<Record<Axis, AxisLoss>> = {};
    for (const axis of AXES) {
      const k = `${l}.${axis}`;
      if (arrays[k]) per[axis] = { widths: widths[k], loss: Array.from(arrays[k]) };
    }
    layers.set(l, per);
  }
  return { base: meta.base as number, layers };
}

/** Level a's per-layer widths are ≤ level b's on every axis. */
export function nestedIn(a: Level, b: Level): boolean {
  return a.layers.every((L, l) => L.kvGroups <= b.layers[l].kvGroups && L.qHeadsPerGroup <= b.layers[l].qHeadsPerGroup && L.ffn <= b.layers[l].ffn);
}

/**
 * Per level (ascending), the searched or the uniform candidate: the nested choice (each level within
 * the next larger one) of least summed measured loss. The search estimates losses additively and can
 * lose to the uniform cut where many layers are cut at once; this keeps it from shipping a level
 * that measured worse. Candidates are few (≤ 2 per level), so every choice is tried (2^n, n ≤ 16;
 * beyond, the searched levels as they are).
 */
export function chooseNested(cands: readonly { searched: Level; uniform: Level | null; loss: { searched: number; uniform: number | null } }[]): ('searched' | 'uniform')[] {
  const n = cands.length;
  const all: ('searched' | 'uniform')[] = cands.map(() => 'searched');
  if (n > 16) return all;
  let best: { pick: ('searched' | 'uniform')[]; loss: number } | null = null;
  for (let mask = 0; mask < 1 << n; mask++) {
    const pick = cands.map((_, i) => ((mask >> i) & 1 ? 'uniform' : 'searched') as 'searched' | 'uniform');
    if (pick.some((p, i) => p === 'uniform' && !cands[i].uniform)) continue;
    const lv = pick.map((p, i) => (p === 'uniform' ? cands[i].uniform! : cands[i].searched));
    if (lv.some((x, i) => i > 0 && !nestedIn(lv[i - 1], x))) continue;
    const loss = pick.reduce((s, p, i) => s + (p === 'uniform' ? cands[i].loss.uniform! : cands[i].loss.searched), 0);
    if (!best || loss < best.loss - 1e-12) best = { pick, loss };
  }
  return best?.pick ?? all;
}

/**
 * The multiple-choice knapsack behind `strategy=mckp` (SPEC §4.2/§4.3): every item (an expert, an
 * expert's projection, a layer's projection) takes exactly one candidate (bytes, loss).
 *   budget form  min Σ loss   s.t. Σ weight ≤ capacity
 *   loss form    min Σ weight s.t. Σ loss   ≤ maxLoss
 * Exact by dynamic programming over integer weights (divided by their gcd, each item's lightest
 * candidate taken out first) when the table fits `maxCells`; otherwise the Lagrangian relaxation
 * (each item's lower convex hull, segments taken greedily by loss per byte, which is the LP optimum
 * up to one fractional segment) and a greedy fill, with the LP value as a certified lower bound and a
 * DP on a coarse grid (weights rounded up: feasible; rounded down: a bound) checking the gap.
 * Ties go to the lower candidate index, then the earlier item: same table, same plan.
 */

export interface Candidate {
  /** A non-negative integer (bytes). */
  weight: number;
  loss: number;
}

export interface McItem {
  choices: readonly Candidate[];
}

export interface McSolution {
  /** Per item, the index of its chosen candidate. */
  choice: number[];
  weight: number;
  loss: number;
  /** Budget form: a lower bound on the optimal loss; loss form: on the optimal weight. Equal to the value when exact. */
  lowerBound: number;
  method: 'dp' | 'lagrangian';
}

export interface SolveOptions {
  /** 'auto': exact DP when it fits maxCells, else Lagrangian (+ coarse DP check). */
  method?: 'auto' | 'dp' | 'lagrangian';
  /** DP table cells (items × capacity units) allowed; default 2e7. */
  maxCells?: number;
}

const DEFAULT_CELLS = 2e7;
/** Relative gap between the Lagrangian plan and the LP bound above which the coarse DP checks it. */
const GAP_CHECK = 1e-3;

function gcd(a: number, b: number): number {
  while (b) [a, b] = [b, a % b];
  return a;
}

const total = (items: readonly McItem[], choice: readonly number[], k: 'weight' | 'loss') => choice.reduce((s, c, i) => s + items[i].choices[c][k], 0);

function solution(items: readonly McItem[], choice: number[], lowerBound: number | null, method: McSolution['method'], form: 'budget' | 'loss'): McSolution {
  const weight = total(items, choice, 'weight');
  const loss = total(items, choice, 'loss');
  return { choice, weight, loss, lowerBound: lowerBound ?? (form === 'budget' ? loss : weight), method };
}

/**
 * The DP core over integer unit weights `u[i][j]` (lightest per item already 0): for every capacity
 * c ≤ C, the least loss with Σ u ≤ c, and back-pointers to recover the choices.
 */
function dpTable(items: readonly McItem[], u: Int32Array[], C: number): { best: Float64Array; back: Uint8Array } {
  const N = items.length;
  let prev = new Float64Array(C + 1);
  let cur = new Float64Array(C + 1);
  const back = new Uint8Array(N * (C + 1));
  for (let i = 0; i < N; i++) {
    const ch = items[i].choices;
    const ui = u[i];
    const row = i * (C + 1);
    cur.fill(Infinity);
    for (let j = 0; j < ch.length; j++) {
      const w = ui[j];
      const l = ch[j].loss;
      for (let c = w; c <= C; c++) {
        const v = prev[c - w] + l;
        if (v < cur[c]) {
          cur[c] = v;
          back[row + c] = j;
        }
      }
    }
    [prev, cur] = [cur, prev];
  }
  return { best: prev, back };
}

function trace(items: readonly McItem[], u: Int32Array[], back: Uint8Array, C: number, c: number): number[] {
  const choice = new Array<number>(items.length);
  for (let i = items.length - 1; i >= 0; i--) {
    const j = back[i * (C + 1) + c];
    choice[i] = j;
    c -= u[i][j];
  }
  return choice;
}

/** Unit weights: (w − lightest) / unit, rounded by `round` (exact when unit divides them). */
function units(items: readonly McItem[], unit: number, round: (x: number) => number): { u: Int32Array[]; base: number } {
  let base = 0;
  const u = items.map((it) => {
    const min = Math.min(...it.choices.map((c) => c.weight));
    base += min;
    return Int32Array.from(it.choices, (c) => round((c.weight - min) / unit));
  });
  return { u, base };
}

function exactUnit(items: readonly McItem[]): number {
  let g = 0;
  for (const it of items) {
    const min = Math.min(...it.choices.map((c) => c.weight));
    for (const c of it.choices) g = gcd(g, c.weight - min);
  }
  return g || 1;
}

function checkItems(items: readonly McItem[]): void {
  for (const it of items) {
    if (!it.choices.length) throw new Error('internal: an item without candidates');
    if (it.choices.length > 255) throw new Error('internal: more than 255 candidates for one item');
    for (const c of it.choices) {
      if (!Number.isSafeInteger(c.weight) || c.weight < 0) throw new Error(`internal: weight ${c.weight} is not a non-negative integer`);
      if (!Number.isFinite(c.loss)) throw new Error(`internal: loss ${c.loss} is not finite`);
    }
  }
}

const lightest = (it: McItem) => it.choices.reduce((b, c, j) => (c.weight < it.choices[b].weight || (c.weight === it.choices[b].weight && c.loss < it.choices[b].loss) ? j : b), 0);
const leastLoss = (it: McItem) => it.choices.reduce((b, c, j) => (c.loss < it.choices[b].loss || (c.loss === it.choices[b].loss && c.weight < it.choices[b].weight) ? j : b), 0);

/** The smallest total weight any plan has (every item at its lightest candidate). */
export function minWeight(items: readonly McItem[]): number {
  return items.reduce((s, it) => s + it.choices[lightest(it)].weight, 0);
}

/** The smallest total loss any plan has. */
export function minLoss(items: readonly McItem[]): number {
  return items.reduce((s, it) => s + it.choices[leastLoss(it)].loss, 0);
}

// ---- Lagrangian relaxation ---------------------------------------------------------------------

/** Lower convex hull of an item's candidates, lightest first, each next point strictly less loss. */
function hull(it: McItem): number[] {
  const idx = it.choices.map((_, j) => j).sort((a, b) => it.choices[a].weight - it.choices[b].weight || it.choices[a].loss - it.choices[b].loss || a - b);
  const pts: number[] = [];
  for (const j of idx) {
    const c = it.choices[j];
    if (pts.length && c.loss >= it.choices[pts[pts.length - 1]].loss) continue; // dominated
    if (pts.length && c.weight === it.choices[pts[pts.length - 1]].weight) pts.pop();
    while (pts.length >= 2) {
      const a = it.choices[pts[pts.length - 2]];
      const b = it.choices[pts[pts.length - 1]];
      // b is above the chord a→c: not on the lower hull.
      if ((b.loss - a.loss) * (c.weight - a.weight) >= (c.loss - a.loss) * (b.weight - a.weight)) pts.pop();
      else break;
    }
    pts.push(j);
  }
  return pts;
}

/**
 * Every item's hull segments (typed arrays, no per-segment objects: 8,192 items × 6 candidates stay
 * cheap), in the order the LP takes them: most loss removed per byte first; convexity keeps each
 * item's segments in hull order.
 */
function segments(items: readonly McItem[]) {
  const start = new Int32Array(items.length);
  const item: number[] = [];
  const step: number[] = [];
  const to: number[] = [];
  const dw: number[] = [];
  const dl: number[] = [];
  items.forEach((it, i) => {
    const h = hull(it);
    start[i] = h[0];
    for (let s = 0; s + 1 < h.length; s++) {
      const a = it.choices[h[s]];
      const b = it.choices[h[s + 1]];
      item.push(i);
      step.push(s);
      to.push(h[s + 1]);
      dw.push(b.weight - a.weight);
      dl.push(a.loss - b.loss);
    }
  });
  const eff = Float64Array.from(dl, (l, k) => l / dw[k]);
  const order = Uint32Array.from(eff, (_, k) => k).sort((x, y) => eff[y] - eff[x] || item[x] - item[y] || step[x] - step[y]);
  return { start, order, item, step, to, dw, dl, eff };
}

function lagrangianBudget(items: readonly McItem[], capacity: number): { choice: number[]; lowerBound: number } {
  const g = segments(items);
  const choice = Array.from(g.start);
  const next = new Int32Array(items.length); // hull step each item is at
  let w = total(items, choice, 'weight');
  let l = total(items, choice, 'loss');
  let bound: number | null = null;
  const blocked = new Uint8Array(items.length);
  for (const k of g.order) {
    const i = g.item[k];
    if (blocked[i] || next[i] !== g.step[k]) continue;
    if (w + g.dw[k] <= capacity) {
      choice[i] = g.to[k];
      next[i]++;
      w += g.dw[k];
      l -= g.dl[k];
    } else {
      // The LP optimum takes this segment fractionally: its value bounds every integer plan.
      bound ??= l - (capacity - w) * g.eff[k];
      blocked[i] = 1;
    }
  }
  // Greedy fill with every candidate (hull or not) that lowers the loss within the room left.
  for (let i = 0; i < items.length; i++) {
    const ch = items[i].choices;
    const cur = ch[choice[i]];
    let best = choice[i];
    for (let j = 0; j < ch.length; j++) if (w - cur.weight + ch[j].weight <= capacity && ch[j].loss < ch[best].loss) best = j;
    w += ch[best].weight - cur.weight;
    choice[i] = best;
  }
  return { choice, lowerBound: bound ?? total(items, choice, 'loss') };
}

function lagrangianLoss(items: readonly McItem[], maxLoss: number): { choice: number[]; lowerBound: number } {
  const g = segments(items);
  const choice = Array.from(g.start);
  let w = total(items, choice, 'weight');
  let l = total(items, choice, 'loss');
  let bound = w;
  for (const k of g.order) {
    if (l <= maxLoss) break;
    if (l - g.dl[k] <= maxLoss) bound = w + (l - maxLoss) / g.eff[k];
    choice[g.item[k]] = g.to[k];
    w += g.dw[k];
    l -= g.dl[k];
  }
  // Greedy trim: any candidate that saves weight while the loss stays within maxLoss.
  for (let i = 0; i < items.length; i++) {
    const ch = items[i].choices;
    const cur = ch[choice[i]];
    let best = choice[i];
    for (let j = 0; j < ch.length; j++) if (l - cur.loss + ch[j].loss <= maxLoss && ch[j].weight < ch[best].weight) best = j;
    l += ch[best].loss - cur.loss;
    choice[i] = best;
  }
  return { choice, lowerBound: Math.min(bound, total(items, choice, 'weight')) };
}

// ---- the two forms -----------------------------------------------------------------------------

/** min Σ loss s.t. Σ weight ≤ capacity; null when even the lightest plan exceeds it. */
export function solveBudget(items: readonly McItem[], capacity: number, opts: SolveOptions = {}): McSolution | null {
  checkItems(items);
  const base = minWeight(items);
  if (base > capacity) return null;
  const method = opts.method ?? 'auto';
  const maxCells = opts.maxCells ?? DEFAULT_CELLS;
  const unit = exactUnit(items);
  const C = Math.floor((capacity - base) / unit);
  if (method === 'dp' || (method === 'auto' && items.length * (C + 1) <= maxCells)) {
    const exact = units(items, unit, (x) => x);
    const { back } = dpTable(items, exact.u, C);
    return solution(items, trace(items, exact.u, back, C, C), null, 'dp', 'budget');
  }
  const lag = lagrangianBudget(items, capacity);
  let best = solution(items, lag.choice, lag.lowerBound, 'lagrangian', 'budget');
  if (method === 'auto' && best.loss - best.lowerBound > GAP_CHECK * best.loss) {
    // The DP checks a gap the LP bound leaves open on a coarse grid: weights rounded up give feasible plans, rounded down a bound.
    const Cc = Math.max(1, Math.floor(maxCells / 4 / items.length) - 1);
    const room = capacity - base;
    const coarse = room / Cc;
    const up = units(items, coarse, Math.ceil);
    const { back } = dpTable(items, up.u, Cc);
    const feasible = solution(items, trace(items, up.u, back, Cc, Cc), null, 'lagrangian', 'budget');
    if (feasible.weight <= capacity && feasible.loss < best.loss) best = { ...feasible, lowerBound: best.lowerBound };
    const down = units(items, coarse, Math.floor);
    const bound = dpTable(items, down.u, Cc).best[Cc];
    best.lowerBound = Math.max(best.lowerBound, Math.min(bound, best.loss));
  }
  return best;
}

/** min Σ weight s.t. Σ loss ≤ maxLoss; null when even the least-loss plan exceeds it. */
export function solveLoss(items: readonly McItem[], maxLoss: number, opts: SolveOptions = {}): McSolution | null {
  checkItems(items);
  if (minLoss(items) > maxLoss) return null;
  const method = opts.method ?? 'auto';
  const maxCells = opts.maxCells ?? DEFAULT_CELLS;
  const unit = exactUnit(items);
  const C = items.reduce((s, it) => s + (Math.max(...it.choices.map((c) => c.weight)) - Math.min(...it.choices.map((c) => c.weight))) / unit, 0);
  if (method === 'dp' || (method === 'auto' && items.length * (C + 1) <= maxCells)) {
    const exact = units(items, unit, (x) => x);
    const { best, back } = dpTable(items, exact.u, C);
    // best[c] (least loss within c units) never grows with c: the first c that meets maxLoss.
    let lo = 0;
    let hi = C;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (best[mid] <= maxLoss) hi = mid;
      else lo = mid + 1;
    }
    return solution(items, trace(items, exact.u, back, C, lo), null, 'dp', 'loss');
  }
  const lag = lagrangianLoss(items, maxLoss);
  return solution(items, lag.choice, lag.lowerBound, 'lagrangian', 'loss');
}

/** Every plan by enumeration (tests: small instances only). */
export function bruteForce(items: readonly McItem[], accept: (weight: number, loss: number) => boolean, better: (a: { weight: number; loss: number }, b: { weight: number; loss: number }) => boolean): { choice: number[]; weight: number; loss: number } | null {
  let best: { choice: number[]; weight: number; loss: number } | null = null;
  const choice = new Array<number>(items.length).fill(0);
  const visit = (i: number, w: number, l: number) => {
    if (i === items.length) {
      if (accept(w, l) && (!best || better({ weight: w, loss: l }, best))) best = { choice: [...choice], weight: w, loss: l };
      return;
    }
    items[i].choices.forEach((c, j) => {
      choice[i] = j;
      visit(i + 1, w + c.weight, l + c.loss);
    });
  };
  visit(0, 0, 0);
  return best;
}

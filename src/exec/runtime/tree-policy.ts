/**
 * LLMCad's dynamic token tree (SPEC verification-tree-search §1.2–1.4): the draft extends one branch
 * per step, chosen by the confidence-based pacer; candidates above a confidence threshold open new
 * branches; drafting stops (falls back to verification) once the most confident branch's cumulative
 * confidence drops below α, and α adapts after each verification (Eq. 3). Pure logic over a
 * callback that returns the draft's candidates after a node; the runtime and the pass's simulation
 * both build trees with it. Browser-safe.
 */

export interface FallbackPolicyLike {
  /** A candidate other than the top one opens a branch above this confidence (0.30). */
  branchThresh: number;
  alpha0: number;
  /** α ← α·decay when the whole matching branch was correct (0.5). */
  decay: number;
  update: 'eq3' | 'prose';
  /** Draft tokens per tree at most. */
  maxTokens: number;
}

/** The draft's candidates after a node: tokens by descending probability, with their probabilities. */
export interface Candidates {
  tokens: number[];
  probs: number[];
}

export interface DynamicTree {
  /** tokens[0] is the root (the last committed token); parent[i] < i. */
  tokens: number[];
  parent: number[];
  /** Cumulative confidence C of the branch ending at each node (the root 1). */
  conf: number[];
  depth: number[];
  /** Nodes whose candidates were computed, in order (one draft step each; the root's comes with the prefix). */
  expanded: number[];
}

interface Branch {
  tip: number;
  conf: number;
  len: number;
}

/**
 * The pacer (Eq. 1–2, max-min fairness): the branch x maximizing f(x) = M·C_x/ΣC − T_x, the one
 * most under-served against its confidence-proportional share of the M tokens; ties: the first.
 */
export function pacerPick(branches: readonly { conf: number; len: number }[], M: number): number {
  const total = branches.reduce((a, b) => a + b.conf, 0);
  let best = 0;
  let bv = -Infinity;
  branches.forEach((b, i) => {
    const f = (M * b.conf) / (total || 1) - b.len;
    if (f > bv) {
      bv = f;
      best = i;
    }
  });
  return best;
}

/** The tree's cumulative confidence T_c = max_i C_i over its branches (§1.4). */
export const treeConfidence = (branches: readonly { conf: number }[]) => branches.reduce((a, b) => Math.max(a, b.conf), 0);

/**
 * Eq. 3: α·decay when all tokens of the most matching branch were correct, else the fraction that
 * was wrong, (N_all − N_correct)/N_all.
 */
export function eq3(alpha: number, nAll: number, nCorrect: number, decay = 0.5): number {
  return nCorrect >= nAll ? alpha * decay : (nAll - nCorrect) / nAll;
}

/**
 * The prose variant (§1.4): on an error, α is divided by the average cumulative confidence of the
 * branch's tokens after the first wrong one; all correct: α·decay.
 */
export function proseUpdate(alpha: number, nAll: number, nCorrect: number, confAfterError: readonly number[], decay = 0.5): number {
  if (nCorrect >= nAll || !confAfterError.length) return alpha * decay;
  const avg = confAfterError.reduce((a, b) => a + b, 0) / confAfterError.length;
  return Math.min(1, avg > 0 ? alpha / avg : 1);
}

/** Build one LLMCad tree from the root; `expand(node, tree)` runs one draft step after `node`. */
export function buildDynamicTree(root: number, rootCandidates: Candidates, expand: (node: number, tree: DynamicTree) => Candidates, policy: FallbackPolicyLike, alpha: number, maxDepth = 64): DynamicTree {
  const tree: DynamicTree = { tokens: [root], parent: [-1], conf: [1], depth: [0], expanded: [] };
  const branches: Branch[] = [{ tip: 0, conf: 1, len: 0 }];
  const cap = policy.maxTokens + 1;
  const add = (parent: number, token: number, conf: number) => {
    tree.tokens.push(token);
    tree.parent.push(parent);
    tree.conf.push(conf);
    tree.depth.push(tree.depth[parent] + 1);
    return tree.tokens.length - 1;
  };
  while (tree.tokens.length < cap) {
    const open = branches.filter((b) => tree.depth[b.tip] < maxDepth);
    if (!open.length) break;
    const x = open[pacerPick(open, tree.tokens.length - 1)];
    const c = x.tip === 0 ? rootCandidates : expand(x.tip, tree);
    tree.expanded.push(x.tip);
    const tip = x.tip;
    for (let j = 1; j < c.tokens.length && tree.tokens.length < cap - 1; j++) {
      if (c.probs[j] <= policy.branchThresh) break;
      const v = add(tip, c.tokens[j], x.conf * c.probs[j]);
      branches.push({ tip: v, conf: tree.conf[v], len: tree.depth[v] });
    }
    x.tip = add(tip, c.tokens[0], x.conf * c.probs[0]);
    x.conf = tree.conf[x.tip];
    x.len = tree.depth[x.tip];
    if (treeConfidence(branches) < alpha) break;
  }
  return tree;
}

/**
 * After verification accepted the path ending at `accepted`: the most matching branch (the
 * root-to-leaf path through it with the highest cumulative confidence) gives N_all (its drafted
 * tokens) and N_correct (the accepted depth); returns the next α.
 */
export function nextAlpha(tree: DynamicTree, accepted: number, alpha: number, policy: FallbackPolicyLike): number {
  const n = tree.tokens.length;
  const isLeaf = new Array<boolean>(n).fill(true);
  for (let i = 1; i < n; i++) isLeaf[tree.parent[i]] = false;
  const under = (v: number, a: number) => {
    for (let u = v; u >= 0; u = tree.parent[u]) if (u === a) return true;
    return false;
  };
  let leaf = accepted;
  for (let i = 0; i < n; i++) if (isLeaf[i] && under(i, accepted) && (leaf === accepted || tree.conf[i] > tree.conf[leaf])) leaf = i;
  const nAll = tree.depth[leaf];
  const nCorrect = tree.depth[accepted];
  if (nAll === 0) return alpha * policy.decay;
  if (policy.update === 'eq3') return eq3(alpha, nAll, nCorrect, policy.decay);
  const after: number[] = [];
  for (let u = leaf; u >= 0 && tree.depth[u] > nCorrect; u = tree.parent[u]) after.push(tree.conf[u]);
  return proseUpdate(alpha, nAll, nCorrect, after, policy.decay);
}

/** Softmax candidates: the top `k` tokens of `logits` by probability (ties: lower id). */
export function topCandidates(logits: ArrayLike<number>, k: number): Candidates {
  const V = logits.length;
  let max = -Infinity;
  for (let i = 0; i < V; i++) if (logits[i] > max) max = logits[i];
  let sum = 0;
  for (let i = 0; i < V; i++) sum += Math.exp(logits[i] - max);
  const tokens = topTokens(logits, k);
  return { tokens, probs: tokens.map((t) => Math.exp(logits[t] - max) / sum) };
}

/** The `k` tokens of largest logit, best first; ties go to the lower id (as argmax). */
export function topTokens(logits: ArrayLike<number>, k: number): number[] {
  const out: number[] = [];
  const V = logits.length;
  k = Math.min(k, V);
  for (let i = 0; i < V; i++) {
    const x = logits[i];
    if (out.length === k && x <= logits[out[k - 1]]) continue;
    let j = out.length < k ? out.length : k - 1;
    if (out.length < k) out.push(i);
    while (j > 0 && x > logits[out[j - 1]]) {
      out[j] = out[j - 1];
      j--;
    }
    out[j] = i;
  }
  return out;
}

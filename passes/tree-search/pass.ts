/**
 * Pass `tree-search` (docs/tree-search.md): profile a draft against the target on calibration data
 * (rank traces), take step costs (measured here or from a latency file), search the verification
 * tree per context bucket, choose by what the runtime achieves (its trajectory replayed over the
 * calibration sequences), check the choice on held-out prompts, and record the chosen trees with
 * their runtime artifacts (record `spec-tree/2`). The model itself is unchanged.
 */
import { silentProgress } from '../../src/core/util/progress.js';
import { UsageError } from '../../src/core/errors.js';
import { Engine } from '../../src/exec/engine/index.js';
import type { Pass } from '../../src/core/pipeline/pass.js';
import { planArtifacts, SPEC_TREE, type AcceptanceEstimate, type FallbackPolicy, type ParetoRow, type PartitionPlan, type SpecTree, type TreePlan } from '../../src/core/records/spec-tree.js';
import { maskNnz, type TreeShape } from '../../src/core/records/tree.js';
import { modelFromTensors } from '../../src/exec/runtime/memory.js';
import type { Model } from '../../src/exec/runtime/model.js';
import { OracleVerifier, SpeculativeDecoder, type Drafter } from '../../src/exec/runtime/speculative.js';
import { hillClimb, partitionTime, splitColumns, splitStep, stepAt, stepMs, verifyMs, type LatencyModel } from './cost.js';
import { readLatencyFile } from './latency-file.js';
import { measuredLatency, type TargetRef } from './latency.js';
import { firstLayers, uniformLayers } from '../../src/core/checkpoint/layers.js';
import type { TreeSearchOptions } from './options.js';
import { rankProfile, resolveDraft, tracesOf, type RankProfile } from './profile.js';
import { choose, paretoFront, referenceTrees, replayAcceptedPerStep, searchBucket, TreeSource, type BucketResult, type SearchMode } from './search.js';
import { RankTrie, replayLengths, type RankTrace } from './trie.js';

const r6 = (x: number) => Number(x.toPrecision(6));

/** Context buckets that fit the model with a full tree after them. */
function contextBuckets(o: TreeSearchOptions, maxPositions: number): number[] {
  const fit = (c: number) => c + o.nMax + 1 <= maxPositions;
  const asked = o.ctx.length ? o.ctx : [64, 256, 1024];
  const ok = asked.filter(fit);
  return ok.length ? ok : [Math.max(1, maxPositions - o.nMax - 1)];
}

function plan(trie: RankTrie, starts: number[], m: LatencyModel, b: number, tree: TreeShape): TreePlan {
  const ms = stepMs(m, tree, b);
  const replay = replayAcceptedPerStep(trie, tree, starts);
  return {
    ...planArtifacts(tree),
    predicted: { acceptedPerStep: r6(replay), perPositionAcceptedPerStep: r6(trie.acceptedPerStep(tree)), stepMs: r6(ms), tokensPerSecond: r6((1000 * replay) / ms) },
  };
}

/**
 * Tokens per target step of `tree` over a set of prompts (the runtime's trajectory on each): the
 * ratio Σ tokens / Σ steps with a 95% interval by the delta method, prompts as independent clusters.
 */
export function acceptanceEstimate(tree: TreeShape, trace: RankTrace, starts: readonly number[]): AcceptanceEstimate {
  const lengths = replayLengths(tree, trace);
  const per: { tokens: number; steps: number }[] = [];
  for (let s = 0; s < starts.length; s++) {
    const end = s + 1 < starts.length ? starts[s + 1] : lengths.length;
    let tokens = 0;
    let steps = 0;
    for (let t = starts[s]; t < end; t += lengths[t]) {
      tokens += lengths[t];
      steps++;
    }
    per.push({ tokens, steps });
  }
  const k = per.length;
  const T = per.reduce((a, p) => a + p.tokens, 0);
  const S = per.reduce((a, p) => a + p.steps, 0);
  const R = T / S;
  const sBar = S / k;
  const v = k > 1 ? per.reduce((a, p) => a + (p.tokens - R * p.steps) ** 2, 0) / (k - 1) / k / (sBar * sBar) : 0;
  const h = 1.959964 * Math.sqrt(v);
  return { prompts: k, steps: S, acceptedPerStep: r6(R), ci95: [r6(R - h), r6(R + h)] };
}

/** Speculative decoding simulated over the calibration sequences (the target's tokens are known). */
export function simulate(p: RankProfile, drafter: Drafter, tree: TreeShape | { policy: FallbackPolicy }, m: LatencyModel, b: number): { acceptedPerStep: number; stepMs: number; tokensPerSecond: number; nodes: number } {
  let tokens = 0;
  let steps = 0;
  let ms = 0;
  let nodes = 0;
  const draftCall = stepAt(m.draftBatch, m.draftMs[b], 1);
  for (const seq of p.sequences) {
    const verifier = new OracleVerifier(seq, drafter.model.spec.vocabSize);
    const dec = new SpeculativeDecoder(verifier, drafter);
    const r = dec.generate(seq.slice(0, p.promptLength), { maxTokens: seq.length - p.promptLength, stopTokens: [], tree });
    tokens += r.acceptedPerStep.reduce((a, x) => a + x, 0);
    steps += r.acceptedPerStep.length;
    nodes += r.treeNodes.reduce((a, x) => a + x, 0);
    // every draft call costs at least a one-token call; verification by the tree size
    ms += r.draftCalls * draftCall + r.treeNodes.reduce((a, n) => a + verifyMs(m, n, b) + m.perNodeMs * (n - 1), 0);
  }
  return { acceptedPerStep: r6(tokens / steps), stepMs: r6(ms / steps), tokensPerSecond: r6((1000 * tokens) / ms), nodes: r6(nodes / steps) };
}

function partitionPlan(m: LatencyModel, linears: { weight: string; outFeatures: number }[], buckets: BucketResult[], tile: number, notes: string[]): PartitionPlan | null {
  if (!m.units) return null;
  const [u1, u2] = m.units;
  const c = buckets[0].chosen;
  const T1 = stepAt(m.verifyN, u1.verifyMs[0], c.tree.parent.length);
  const T2 = stepAt(m.verifyN, u2.verifyMs[0], c.tree.parent.length);
  // EdgeNN-style start from the solo times, then the contention-aware climb (§5.4), priced after tile alignment.
  const solo = partitionTime(T1, T2);
  const climbed = hillClimb((r) => Math.max(u1.contention * r * T1, u2.contention * (1 - r) * T2), solo.share);
  const aligned = splitStep(m, T1, T2, climbed.share);
  if (!aligned.split) {
    notes.push(`partition dropped: after aligning columns to ${tile}, splitting between ${u1.name} and ${u2.name} is not faster than ${aligned.share === 1 ? u1.name : u2.name} alone (${r6(aligned.ms)} ms)`);
    return null;
  }
  return {
    units: [u1.name, u2.name],
    share: r6(climbed.share),
    tile,
    linear: linears.map((l) => ({ weight: l.weight, outFeatures: l.outFeatures, ...splitColumns(l.outFeatures, climbed.share, tile) })),
    attention: buckets.map((bk) => {
      const n = bk.chosen.tree.parent.length;
      return { ctx: bk.ctx, dense: u1.name, sparse: u2.name, denseShare: r6((bk.ctx * n) / (bk.ctx * n + maskNnz(bk.chosen.tree.parent))) };
    }),
    barriersPerLayer: linears.filter((l) => l.weight.startsWith('model.layers.0.')).length,
    stepMs: r6(aligned.ms),
    singleUnitMs: r6(T1),
  };
}

export const treeSearchPass: Pass<TreeSearchOptions> = {
  async run(unit, o, ctx) {
    const source = unit.source;
    const spec = source.spec;
    const progress = ctx.progress ?? silentProgress;
    const notes: string[] = [];
    let target: Promise<Model> | undefined;
    const targetModel = () => (target ??= modelFromTensors(source));
    let engine: Promise<Engine> | undefined;
    const openEngine = () => (engine ??= Engine.open(source));
    const draft = await resolveDraft(o.draft, source, unit.records, targetModel, unit.annotations, { lazy: true });
    try {
      // Profile: rank traces along the target's greedy continuations of the calibration prompts.
      const prof = await rankProfile(source, draft, o, { cacheDir: ctx.cacheDir, progress, engine: openEngine });
      const { trace, starts } = tracesOf(prof, o.dMax, o.topK);
      const trie = new RankTrie(trace);
      const held = prof.heldOut.ranks.length ? tracesOf(prof.heldOut, o.dMax, o.topK) : null;

      // Step costs.
      const ctxs = contextBuckets(o, spec.maxPositions);
      const linears = unit.graph.ops.flatMap((op) => (op.op === 'linear' ? [{ weight: op.weight, outFeatures: op.outFeatures }] : []));
      let latency: LatencyModel;
      if (typeof o.latency === 'object') {
        latency = readLatencyFile(o.latency.file);
        if (latency.units) {
          latency.barriers = linears.length;
          latency.columns = linears.map((l) => l.outFeatures);
          latency.tile = o.tile ?? 64;
        }
      } else {
        // a streamed target is never loaded whole: its step is priced from its first one and two layers and scaled
        const { streams } = await import('../../src/exec/stream/index.js');
        // the default skip draft keeps the first two layers: the same model the two-layer price runs on
        const keepsFirstTwo = draft.spec.kind === 'skip' && spec.numLayers > 2 && draft.spec.layers.length === spec.numLayers - 2 && !draft.spec.layers.some((l) => l < 2);
        const target: TargetRef = streams(spec)
          ? { blocks: (k) => firstLayers(source, k), layers: spec.numLayers, ...(keepsFirstTwo ? { twoLayers: async () => (await draft.ready()).model } : {}) }
          : { whole: targetModel, engine: openEngine };
        if ('blocks' in target && !uniformLayers(spec)) notes.push('latency: the layers differ in kind (sliding, rope-less or dense among MoE); each is priced as layer 1 of the first two');
        latency = await measuredLatency(o.latency, { checkpoint: await source.identity(), draft: draft.identity }, { target, draft: await draft.ready(), nMax: o.nMax, ctx: ctxs, cacheDir: ctx.cacheDir, progress });
      }

      // Search, per context bucket.
      if (o.tile !== null && !latency.units) throw new UsageError('tree-search.tile aligns a split between two units; this latency model has one (give a latency file with "units")');
      const src = new TreeSource(trie, o.nMax, o.dMax, starts);
      const search = (mode: SearchMode) => latency.ctx.map((_, b) => searchBucket(src, latency, b, { mode, nMax: o.nMax, dMax: o.dMax, widths: o.widths }));
      const results = search(o.mode);
      const plans: TreePlan[] = [];
      const keyOf = (t: TreeShape) => JSON.stringify([t.parent, t.rank]);
      const planIndex = new Map<string, number>();
      const buckets = results.map((r, b) => {
        const k = keyOf(r.chosen.tree);
        if (!planIndex.has(k)) {
          planIndex.set(k, plans.length);
          plans.push(plan(trie, starts, latency, b, r.chosen.tree));
        }
        return { ctx: latency.ctx[b], plan: planIndex.get(k)! };
      });
      const pareto: ParetoRow[] = results.flatMap((r) =>
        paretoFront(r.candidates).map((c) => ({ ctx: r.ctx, n: c.n, D: c.D, nodes: c.tree.parent.length, acceptedPerStep: r6(c.replay), stepMs: r6(c.stepMs), tokensPerSecond: r6(c.tokensPerSecond) })),
      );

      // The same traces under other trees: plain decoding, a chain of the chosen budget, Medusa's 63 nodes, the other modes.
      const b0 = 0;
      const chosen = results[b0].chosen;
      const comparison: SpecTree['comparison'] = {};
      const describe = (t: TreeShape) => {
        const replay = replayAcceptedPerStep(trie, t, starts);
        const ms = stepMs(latency, t, b0);
        return { nodes: t.parent.length, acceptedPerStep: r6(replay), stepMs: r6(ms), tokensPerSecond: r6((1000 * replay) / ms) };
      };
      comparison.plain = describe({ parent: [-1], rank: [-1] });
      for (const [name, t] of Object.entries(referenceTrees(chosen.tree.parent.length))) comparison[name] = describe(t);
      for (const mode of ['optimal', 'sequoia', 'ghidorah'] as const) comparison[mode] = describe(mode === o.mode ? chosen.tree : choose(search(mode)[b0].candidates).tree);
      // The chosen plan on the calibration prompts (with its interval) and on held-out prompts it never saw.
      const validation: SpecTree['validation'] = {
        calibration: acceptanceEstimate(chosen.tree, trace, starts),
        heldOut: held ? acceptanceEstimate(chosen.tree, held.trace, held.starts) : null,
      };
      const hv = validation.heldOut;
      const cv = validation.calibration;
      // Two-sample check: the difference against both intervals' half-widths combined.
      const half = (e: AcceptanceEstimate) => (e.ci95[1] - e.ci95[0]) / 2;
      if (hv && Math.abs(hv.acceptedPerStep - cv.acceptedPerStep) > Math.hypot(half(hv), half(cv))) {
        notes.push(`held-out prompts accept ${hv.acceptedPerStep} tokens per step [${hv.ci95.join(', ')}], the calibration prompts ${cv.acceptedPerStep} [${cv.ci95.join(', ')}] (95%): a significant difference; calibrate on prompts like the ones you will run (tree-search.calibText, more tree-search.calib)`);
      }

      // LLMCad: the dynamic policy, simulated against the static optimum on the calibration sequences.
      let fallback: FallbackPolicy | null = null;
      if (o.mode === 'llmcad') {
        const draftToken = stepAt(latency.draftBatch, latency.draftMs[b0], 1);
        const alpha0 = o.alpha0 === 'auto' ? Math.min(0.5, Math.max(1e-4, (comparison.optimal.tokensPerSecond / 1000) * draftToken)) : o.alpha0;
        fallback = { branchThresh: o.branchThresh, alpha0: r6(alpha0), decay: 0.5, update: o.update, maxTokens: o.nMax - 1 };
        progress.start('tree-search: LLMCad policy simulation', 2);
        comparison['llmcad-simulated'] = simulate(prof, await draft.ready(), { policy: fallback }, latency, b0);
        progress.tick();
        comparison['optimal-simulated'] = simulate(prof, await draft.ready(), chosen.tree, latency, b0);
        progress.done();
        notes.push(`llmcad: α0 = ${fallback.alpha0}${o.alpha0 === 'auto' ? ' (λ*·c_d: the static optimum\'s tokens/ms × one draft step)' : ''}; the runtime drafts with this policy`);
      }
      if (trace.N < 500) notes.push(`only ${trace.N} traced positions: raise tree-search.calib or generate for steadier estimates`);
      const record: SpecTree = {
        format: SPEC_TREE.id as 'spec-tree/2',
        draft: draft.spec,
        verify: 'greedy',
        mode: o.mode,
        profile: { key: prof.key, prompts: prof.sequences.length, heldOut: prof.heldOut.sequences.length, generated: o.generate, positions: trace.N, depth: o.dMax, topK: o.topK },
        acceptance: { marginal: src.marginal.map((row) => row.map(r6)), positional: src.positional.map(r6) },
        latency: {
          source: latency.source,
          device: latency.device,
          ctx: latency.ctx,
          verifyN: latency.verifyN,
          verifyMs: latency.verifyMs,
          draftBatch: latency.draftBatch,
          draftMs: latency.draftMs,
          perNodeMs: latency.perNodeMs,
        },
        plans,
        buckets,
        pareto,
        partition: partitionPlan(latency, linears, results, o.tile ?? 64, notes),
        fallback,
        comparison,
        validation,
        notes,
      };
      return { unit, record };
    } finally {
      await draft.close();
      await (await engine?.catch(() => undefined))?.close();
    }
  },
};


/**
 * Pass `expert-bits`: a weight format per MoE expert (docs/expert-bits.md).
 *  1. items (experts, their projections, or each layer's projections) and their candidates' exact
 *     bytes, from shapes alone: budgets below the smallest plan fail here, before any work;
 *  2. profile (cached): routing on calibration and held-out data, per-expert counts and gate
 *     weights, routing traces, and two sensitivities per item and candidate (teacher-forced KL,
 *     activation-aware reconstruction), rare experts force-routed;
 *  3. search: the exact multiple-choice knapsack (budget or loss form) or EdgeMoE's procedure;
 *     a maxLoss is verified on held-out data (SPEC §4.2: the proxy bound is recalibrated when the
 *     true loss misses it, at most 4 rounds, then the last verified plan);
 *  4. the routing predictor and the cache inputs for offloading, with simulated hit rates;
 *  5. one format annotation per expert tensor. A target that stacks a layer's experts in one tensor
 *     (capabilities.perExpertFormats false) gets the best layer-proj plan, and the record says what
 *     a per-expert plan under the same budget would have saved.
 */
import { acceptanceSet, calibrationSet, textFileSpec, type AcceptanceSet, type CalibrationSet } from '../../src/measure/calibration.js';
import { runTrialArtifact, type TrialRun } from '../../src/measure/artifact-trial.js';
import { upperMeanBound } from '../../src/core/util/student-t.js';
import { cachedProfile } from '../../src/measure/store.js';
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import { LlmcError, UsageError } from '../../src/core/errors.js';
import type { Pass, PassContext } from '../../src/core/pipeline/pass.js';
import { evolve, unitOf, type CompileUnit, type TensorAnnotation } from '../../src/core/pipeline/unit.js';
import type { QuantType } from '../../src/core/quant/types.js';
import { EXPERT_TABLE, type ArtifactAcceptance, type ExpertStat, type ExpertTable, type Granularity, type PlanItem, type PlanSummary } from '../../src/core/records/expert-table.js';
import { silentProgress, type Progress } from '../../src/core/util/progress.js';
import { beladyPrefetchBound, buildPredictor, Predictor, simulate, type PolicyName } from '../../src/exec/runtime/experts.js';
import { edgemoeSearch } from './edgemoe.js';
import { choiceFor, expertsOf, itemsOf, moeLayers, PROJS, tensorBytes, type Item, type Proj } from './items.js';
import { fallbackType } from '../../src/core/quant/types.js';
import { minWeight, solveBudget, solveLoss, type McItem, type McSolution } from './mckp.js';
import { expertTokens, itemRecon, klSensitivities, Lab, layerKl, reconErrors, routeTokens, type ExpertRecon, type ForceInfo } from './measure.js';
import type { ParsedExpertBitsOptions } from './options.js';

/** How many times the proxy bound is recalibrated against held-out data (SPEC §4.2). */
const ACCEPT_ROUNDS = 4;

/** The routing profile (cached per checkpoint, calibration set and candidates; every granularity reuses it). */
interface RoutingProfile {
  experts: (ForceInfo & { key: string; tokens: number; meanGate: number })[];
  traces: { calib: number[][][][]; heldOut: number[][][][] };
  recon: Record<string, ExpertRecon>;
  refPpl: number;
}

interface Sensitivities {
  kl: number[][];
  recon: number[][];
}

/** What the pass is told; `unit` (default: the bare source), `formats` and `targetOptions` make the trial artifact a maxLoss is accepted on. */
type Ctx = Pick<PassContext, 'note' | 'cacheDir' | 'target'> & Partial<Pick<PassContext, 'formats' | 'targetOptions'>> & {
  progress?: Progress;
  unit?: CompileUnit;
  /** Measure layer-streamed (default: when the model streams, src/exec/stream). */
  stream?: boolean;
};

const DENSE = (spec: ModelSource['spec'], dir: string) =>
  new LlmcError(`expert-bits takes mixture-of-experts models; this is a dense ${spec.modelType} model`, dir, 2);

/** Everything the pass decides (tests and benches call it directly). */
export async function analyzeExpertBits(source: ModelSource, o: ParsedExpertBitsOptions, ctx: Ctx): Promise<{ record: ExpertTable; annotate: Map<string, TensorAnnotation>; items: Item[] }> {
  const spec = source.spec;
  if (!spec.moe) throw DENSE(spec, source.dir);
  const progress = ctx.progress ?? silentProgress;
  const notes: string[] = [];
  const perExpertTarget = ctx.target.capabilities.perExpertFormats;
  const granularity: Granularity = perExpertTarget ? o.granularity : 'layer-proj';
  if (!perExpertTarget) {
    notes.push(`target ${ctx.target.name} stacks each layer's experts in one tensor of one type: the plan written is per layer and projection (layer-proj)`);
  }
  const items = itemsOf(source, granularity, o.formats);
  const compare = !perExpertTarget && o.granularity !== 'layer-proj' ? itemsOf(source, 'expert', o.formats) : null;
  const params = items.reduce((s, it) => s + it.params, 0);
  const capacity = o.budgetBytes ?? (o.budgetBpw !== null ? Math.floor((o.budgetBpw * params) / 8) : null);
  const mc = (its: readonly Item[], losses: number[][]): McItem[] => its.map((it, i) => ({ choices: it.choices.map((c, j) => ({ weight: c.bytes, loss: losses[i][j] })) }));
  if (capacity !== null) {
    const least = minWeight(mc(items, items.map((it) => it.choices.map(() => 0))));
    if (capacity < least) {
      const what = o.budgetBytes !== null ? `budgetBytes=${o.budgetBytes}` : `budgetBpw=${o.budgetBpw} (${capacity} bytes)`;
      throw new UsageError(`expert-bits.${what} is below the smallest plan: ${least} bytes (${((least * 8) / params).toFixed(3)} bits per weight, every expert at ${o.formats[0]})`);
    }
  }

  const checkpoint = await source.identity();
  const tensors = [...new Set([...items, ...(compare ?? [])].flatMap((it) => it.tensors))];
  let lab: Lab | undefined;
  const openLab = async () => (lab ??= await Lab.open(source, tensors, undefined, ctx.stream));
  try {
    const calib = await calibrationSet(
      source,
      { source: o.calibText ? await textFileSpec(o.calibText) : 'self-generated', count: o.calibCount, length: o.calibLength, seed: o.seed, heldOut: o.heldOut },
      // a streamed Lab has no whole graph: self-generated calibration opens one and closes it after
      { cacheDir: ctx.cacheDir, engine: (await openLab()).streamed ? undefined : async () => (await openLab()).engine },
    );
    const routingProf = await cachedProfile(
      ctx.cacheDir,
      'expert-routing',
      { checkpoint, calibration: calib.key, formats: o.formats, minTokens: o.minTokens, reconTokens: o.reconTokens },
      async () => ({ meta: (await routingProfile(source, await openLab(), calib, o, progress)) as unknown as Record<string, unknown>, arrays: {} }),
    );
    const measured = routingProf.meta as unknown as RoutingProfile;
    const force = new Map(measured.experts.map((e) => [e.key, e]));
    // block mode: each MoE layer's KL per unit of reconstruction error, from one forward with the layer's experts at the lightest candidate
    const block = o.measure === 'block' || (o.measure === 'auto' && (await openLab()).streamed);
    let perLayer: Map<number, number> | undefined;
    const layerFactors = async (): Promise<Map<number, number>> => {
      if (perLayer) return perLayer;
      const fc = o.formats[0];
      const written = (e: ReturnType<typeof expertsOf>[number]) => PROJS.map((p) => fallbackType(fc, source.meta(e.tensors[p])!.shape.at(-1)!));
      const byLayer = moeLayers(spec).map((layer) => ({ layer, experts: expertsOf(source).filter((e) => e.layer === layer) }));
      const layers = byLayer.map(({ layer, experts }) => ({ layer, assign: experts.flatMap((e) => PROJS.map((p, k) => [e.tensors[p], written(e)[k]] as [string, QuantType])) }));
      const prof = await cachedProfile(ctx.cacheDir, 'expert-layer-kl', { checkpoint, calibration: calib.key, format: fc }, async () => ({
        meta: { kl: await layerKl(await openLab(), layers, calib.calib, progress) },
        arrays: {},
      }));
      const kl = prof.meta.kl as number[];
      perLayer = new Map(
        byLayer.map(({ layer, experts }, i) => {
          const r = experts.reduce((a, e) => a + measured.recon[e.key].tuple[written(e).join(',')], 0);
          return [layer, r > 0 ? kl[i] / r : 0];
        }),
      );
      notes.push(`block-local sensitivities: each item's reconstruction error × its layer's KL per unit of error (${byLayer.length} layer KLs with every expert at ${fc})`);
      return perLayer;
    };
    const sensitivitiesOf = async (its: Item[], g: Granularity): Promise<Sensitivities> => {
      const recon = its.map((it) => it.choices.map((c) => itemRecon(it, c.written, measured.recon)));
      if (block) {
        const a = await layerFactors();
        return { kl: recon.map((row, i) => row.map((r) => a.get(its[i].layer)! * r)), recon };
      }
      const kl = await cachedProfile(
        ctx.cacheDir,
        'expert-kl',
        { checkpoint, calibration: calib.key, formats: o.formats, minTokens: o.minTokens, granularity: g },
        async () => ({ meta: { kl: await klSensitivities(await openLab(), its, calib.calib, force, spec.moe!.numExperts, progress) }, arrays: {} }),
      );
      return { kl: kl.meta.kl as number[][], recon };
    };
    const main = await sensitivitiesOf(items, granularity);
    const L = await openLab();

    // Losses the search minimizes (recon in KL units: least squares through the origin over every measured pair).
    const reconToKl = fitScale(main.recon, main.kl);
    const lossOf = (s: Sensitivities) => (o.sensitivity === 'kl' ? s.kl : s.recon.map((r) => r.map((v) => v * reconToKl)));
    const losses = lossOf(main);
    const table = mc(items, losses);

    // Plan evaluation on a split: every item at its chosen written formats.
    const assign = (its: readonly Item[], choice: readonly number[]) => its.flatMap((it, i) => it.tensors.map((t, k) => [t, it.choices[choice[i]].written[k]] as [string, QuantType]));
    const heldOutLoss = async (its: readonly Item[], choice: readonly number[]) => (await L.ppl(calib.heldOut, await L.swap(assign(its, choice)))) / measured.refPpl - 1;
    const summary = async (its: readonly Item[], tbl: McItem[], choice: number[], lowerBound: number | null, method: PlanSummary['method']): Promise<PlanSummary> => {
      const bytes = choice.reduce((s, c, i) => s + its[i].choices[c].bytes, 0);
      const proxyLoss = choice.reduce((s, c, i) => s + tbl[i].choices[c].loss, 0);
      const hl = await heldOutLoss(its, choice);
      return { bytes, bpw: (bytes * 8) / params, proxyLoss, lowerBound: lowerBound ?? proxyLoss, method, heldOutPpl: measured.refPpl * (1 + hl), heldOutLoss: hl };
    };

    const solveOpts = { method: o.solver };
    const acceptance: ExpertTable['acceptance'] = [];
    let edgemoe: ExpertTable['edgemoe'] = null;
    /** The plan the search picks when held-out data must show at most `maxLoss` (the budget form ignores it). */
    const search = async (maxLoss: number | null): Promise<{ plan: PlanSummary; choice: number[] }> => {
      if (o.strategy === 'edgemoe') {
        const ppl = new Map<string, number>();
        const refRank = await L.ppl(calib.calib);
        const r = await edgemoeSearch(
          items.length,
          o.formats.length,
          maxLoss!,
          async (a, split) => {
            const ch = a.map((f, i) => choiceFor(items[i], o.formats[f]));
            const seqs = split === 'rank' ? calib.calib : calib.heldOut;
            const v = await L.ppl(seqs, await L.swap(assign(items, ch)));
            ppl.set(`${split}:${a.join(',')}`, v);
            return v / (split === 'rank' ? refRank : measured.refPpl) - 1;
          },
          items.map((it) => it.key),
        );
        const choice = r.assignment.map((f, i) => choiceFor(items[i], o.formats[f]));
        edgemoe = {
          bLo: r.bLo === null ? o.formats[0] : o.formats[r.bLo],
          bHi: o.formats[r.bHi],
          uniformLoss: Object.fromEntries(o.formats.map((f, b) => [f, r.uniformLoss[b]])),
          importance: r.importance.map((x) => ({ key: items[x.item].key, loss: x.loss })),
          K: r.K,
          oracleCalls: r.oracleCalls,
        };
        return { plan: await summary(items, table, choice, null, 'edgemoe'), choice };
      }
      if (capacity !== null) {
        const sol = solveBudget(table, capacity, solveOpts)!;
        const plan = await summary(items, table, sol.choice, sol.lowerBound, sol.method);
        if (maxLoss !== null && plan.heldOutLoss > maxLoss) {
          throw new LlmcError(`expert-bits: no plan within ${capacity} bytes meets maxLoss=${maxLoss}: the closest achievable there loses ${plan.heldOutLoss.toPrecision(4)} on held-out data; raise the budget or maxLoss`, source.dir);
        }
        return { plan, choice: sol.choice };
      }
      return acceptLoss(items, table, maxLoss!, solveOpts, summary, acceptance, source.dir);
    };

    let plan: PlanSummary;
    let choice: number[];
    let artifact: ArtifactAcceptance | null = null;
    if (o.maxLoss === null) ({ plan, choice } = await search(null));
    else ({ plan, choice, artifact } = await acceptOnArtifact(o.maxLoss, search, artifactTrial(source, items, calib, L, o, ctx), capacity !== null));

    // Uniform baselines and, for a stacked-experts target, what a per-expert plan would save.
    const uniform: ExpertTable['uniform'] = [];
    for (const f of o.formats) {
      const ch = items.map((it) => choiceFor(it, f));
      uniform.push({
        format: f,
        bytes: ch.reduce((s, c, i) => s + items[i].choices[c].bytes, 0),
        proxyLoss: ch.reduce((s, c, i) => s + table[i].choices[c].loss, 0),
        heldOutLoss: await heldOutLoss(items, ch),
      });
    }
    let perExpert: ExpertTable['perExpert'] = null;
    if (compare) {
      const ctable = mc(compare, lossOf(await sensitivitiesOf(compare, 'expert')));
      const sol = solveBudget(ctable, plan.bytes, solveOpts)!;
      const s = await summary(compare, ctable, sol.choice, sol.lowerBound, sol.method);
      // Each proxy is measured on its own items (both in KL units); held-out data compares them directly.
      perExpert = { plan: s, items: compare.length, savesLoss: plan.proxyLoss - s.proxyLoss, savesHeldOutLoss: plan.heldOutLoss - s.heldOutLoss };
      notes.push(
        `a per-expert plan of the same ${plan.bytes} bytes would lose ${s.heldOutLoss.toPrecision(4)} on held-out data instead of ${plan.heldOutLoss.toPrecision(4)} (llama.cpp cannot load it)`,
      );
    }

    // Predictor (calibration traces) and cache inputs (held-out traces simulated).
    const layers = moeLayers(spec);
    const E = spec.moe.numExperts;
    const predictor = buildPredictor(measured.traces.calib, { numExperts: E, topK: spec.moe.topK, moeLayers: layers, tau: o.tau, topM: o.topM });
    const f = predictor.layers.map((l) => l.marginal);
    const written = new Map<string, QuantType>();
    items.forEach((it, i) => it.tensors.forEach((t, k) => written.set(t, it.choices[choice[i]].written[k])));
    const experts = expertsOf(source);
    const expertBytes = layers.map((_, n) =>
      experts
        .filter((e) => e.n === n && e.expert >= 0)
        .map((e) => PROJS.reduce((s, p) => s + tensorBytes(source, e.tensors[p], written.get(e.tensors[p])!), 0)),
    );
    const simulated: ExpertTable['cache']['simulated'] = [];
    const beladyPrefetch: NonNullable<ExpertTable['cache']['beladyPrefetch']> = [];
    const P = new Predictor(predictor);
    for (const capacity of [...new Set([Math.max(spec.moe.topK, Math.round((layers.length * E) / 4)), Math.round((layers.length * E) / 2)])]) {
      for (const [policy, preload] of [['edgemoe', true], ['edgemoe', false], ['lru', false], ['lfu', false], ['belady', false]] as [PolicyName, boolean][]) {
        const r = simulate(measured.traces.heldOut, { capacity, policy, numExperts: E, f, predictor: preload ? P : undefined, fanout: o.preload, cost: { bytes: expertBytes } });
        simulated.push({ capacity, policy, preload, hitRate: r.hitRate, bytesRead: r.bytesRead, loads: r.loads });
      }
      const b = beladyPrefetchBound(measured.traces.heldOut, { capacity, numExperts: E, cost: { bytes: expertBytes } });
      beladyPrefetch.push({ capacity, loads: b.loads, bytes: b.bytes });
    }

    const annotate = new Map<string, TensorAnnotation>();
    for (const [t, fmt] of written) annotate.set(t, { format: fmt });
    const stats: ExpertStat[] = measured.experts.map((x) => {
      const ref = experts.find((e) => e.key === x.key)!;
      return { layer: ref.layer, expert: ref.expert, tokens: x.tokens, meanGate: x.meanGate, forced: x.forced, params: ref.params };
    });
    const forcedKeys = stats.filter((s) => s.forced).map((s) => `${s.layer}.${s.expert}`);
    if (forcedKeys.length) notes.push(`${forcedKeys.length} expert(s) reached by fewer than ${o.minTokens} calibration tokens were measured force-routed: ${forcedKeys.slice(0, 8).join(', ')}${forcedKeys.length > 8 ? ', …' : ''}`);
    const planItems: PlanItem[] = items.map((it, i) => ({
      key: it.key,
      layer: it.layer,
      tensors: it.tensors,
      choices: it.choices.map((c, j) => ({ format: c.format, written: c.written, bytes: c.bytes, kl: main.kl[i][j], recon: main.recon[i][j], loss: losses[i][j] })),
      chosen: choice[i],
    }));
    const record: ExpertTable = {
      format: EXPERT_TABLE.id as ExpertTable['format'],
      strategy: o.strategy,
      granularity,
      candidates: o.formats,
      sensitivity: { used: o.sensitivity, reconToKl, rankCorrelation: spearman(main.kl.flat(), main.recon.flat()) },
      budget:
        capacity !== null
          ? { kind: o.budgetBytes !== null ? 'bytes' : 'bpw', value: o.budgetBytes ?? o.budgetBpw!, bytes: capacity }
          : { kind: 'maxLoss', value: o.maxLoss! },
      calibration: { ...calib.spec, profile: calib.key, minTokens: o.minTokens },
      refPpl: measured.refPpl,
      experts: stats,
      items: planItems,
      plan,
      uniform,
      acceptance,
      perExpert,
      artifact,
      edgemoe,
      predictor,
      cache: { moeLayers: layers, f, preload: o.preload, expertBytes, simulated, beladyPrefetch },
      notes,
    };
    return { record, annotate, items };
  } finally {
    await lab?.close();
  }
}

/**
 * The maxLoss form with acceptance on held-out data (SPEC §4.2): up to 4 calibrated rounds
 * (P′ ← P′·P/L, and always below the rejected plan's proxy so the next solve differs), then a
 * bisection of P′ between the least-loss plan and the last rejected one (at most 6 more held-out
 * evaluations); the verified plan with the fewest bytes wins.
 */
async function acceptLoss(
  items: Item[],
  table: McItem[],
  maxLoss: number,
  opts: { method: 'auto' | 'dp' | 'lagrangian' },
  summary: (its: readonly Item[], tbl: McItem[], choice: number[], lb: number | null, m: PlanSummary['method']) => Promise<PlanSummary>,
  log: ExpertTable['acceptance'],
  dir: string,
): Promise<{ plan: PlanSummary; choice: number[] }> {
  let best: { plan: PlanSummary; choice: number[] } | null = null;
  const tryBound = async (bound: number): Promise<{ sol: McSolution; accepted: boolean; loss: number } | null> => {
    const sol = solveLoss(table, bound, opts);
    if (!sol) return null;
    const plan = await summary(items, table, sol.choice, sol.lowerBound, sol.method);
    const accepted = plan.heldOutLoss <= maxLoss;
    log.push({ budget: bound, proxyLoss: sol.loss, bytes: sol.weight, heldOutLoss: plan.heldOutLoss, accepted });
    if (accepted && (!best || plan.bytes < best.plan.bytes)) best = { plan, choice: sol.choice };
    return { sol, accepted, loss: plan.heldOutLoss };
  };
  // Self-generated text makes mean KL ≈ log(ppl ratio): the proxy bound starts at log(1 + P).
  let bound = Math.log1p(maxLoss);
  let rejected: number | null = null;
  for (let round = 0; round < ACCEPT_ROUNDS; round++) {
    const r = await tryBound(bound);
    if (!r) break;
    if (r.accepted) return best!;
    rejected = r.sol.loss;
    bound = Math.min((bound * maxLoss) / Math.max(r.loss, 1e-12), r.sol.loss * (1 - 1e-9));
  }
  // Bisection between the least-loss plan (the closest achievable) and the last rejected proxy.
  const least = table.map((it) => it.choices.reduce((b, c, j) => (c.loss < it.choices[b].loss ? j : b), 0));
  const floor = least.reduce((s, c, i) => s + table[i].choices[c].loss, 0);
  const closest = await tryBound(floor);
  if (!closest?.accepted) {
    throw new LlmcError(
      `expert-bits: no plan meets maxLoss=${maxLoss}: the closest achievable loses ${closest!.loss.toPrecision(4)} on held-out data (every expert at its least-loss format, ${closest!.sol.weight} bytes); raise maxLoss`,
      dir,
    );
  }
  let lo = floor;
  let hi = rejected ?? bound;
  for (let k = 0; k < 6 && hi > lo * (1 + 1e-6); k++) {
    const mid = Math.sqrt(Math.max(lo, 1e-12) * hi);
    const r = await tryBound(mid);
    if (r?.accepted) lo = mid;
    else hi = r ? Math.min(mid, r.sol.loss) : mid;
  }
  return best!;
}

/** How many plans are measured on the artifact before a maxLoss is refused. */
const ARTIFACT_ROUNDS = 4;
/** One-sided confidence of the artifact's loss bound. */
const ARTIFACT_CONFIDENCE = 0.95;

interface ArtifactMeasure {
  engine: string;
  loss: number;
  upperBound: number;
  sequences: number;
  tokens: number;
}

interface ArtifactTrial {
  measure(choice: readonly number[]): Promise<ArtifactMeasure>;
  describe(): Omit<ArtifactAcceptance, 'engine' | 'loss' | 'upperBound' | 'rounds' | 'sequences' | 'tokens'>;
}

/**
 * The plan's artifact as the target writes it (the compile's unit with the plan's formats, the
 * compile's --quant / --tensor-type and target options), run on the target's own runtime on the
 * acceptance sequences, against the same artifact with every planned tensor unquantized: the
 * relative perplexity increase exp(mean Δnll) − 1 and its one-sided upper bound, Student's t over
 * the per-sequence differences (paired: each sequence is its own control).
 */
function artifactTrial(source: ModelSource, items: readonly Item[], calib: CalibrationSet, lab: Lab, o: ParsedExpertBitsOptions, ctx: Ctx): ArtifactTrial {
  const target = ctx.target;
  if (!target.open) throw new LlmcError(`internal: target ${target.name} has no runtime to accept expert-bits.maxLoss on`);
  const unit = ctx.unit ?? unitOf(source);
  const formats = ctx.formats ?? { tensorTypes: [] };
  const reference: QuantType = target.formats.tensorTypes?.map((t) => t.toUpperCase()).includes('F32') ? 'F32' : 'F16';
  const tensors = items.flatMap((it) => it.tensors);
  const run = async (assignment: [string, QuantType][], seqs: number[][]) =>
    runTrialArtifact(evolve(unit, { annotate: new Map(assignment.map(([t, f]) => [t, { format: f }])) }), target, { formats, targetOptions: ctx.targetOptions }, seqs);
  let accept: AcceptanceSet | undefined;
  let ref: TrialRun | undefined;
  return {
    async measure(choice) {
      accept ??= await acceptanceSet(source, calib, o.acceptance, { cacheDir: ctx.cacheDir, engine: async () => lab.engine });
      if (accept.seqs.length < 2) throw new LlmcError(`expert-bits: only ${accept.seqs.length} acceptance sequence(s) differ from the calibration and held-out ones; raise expert-bits.acceptance`, source.dir);
      const seqs = accept.seqs;
      const base = (ref ??= await run(tensors.map((t) => [t, reference]), seqs));
      const plan = await run(items.flatMap((it, i) => it.tensors.map((t, k) => [t, it.choices[choice[i]].written[k]] as [string, QuantType])), seqs);
      const b = upperMeanBound(plan.nll.map((x, i) => x - base.nll[i]), ARTIFACT_CONFIDENCE);
      return { engine: plan.engine, loss: Math.expm1(b.mean), upperBound: Math.expm1(b.upper), sequences: seqs.length, tokens: seqs.length * (seqs[0].length - 1) };
    },
    describe: () => ({ target: target.name, source: accept!.source, profile: accept!.key, reference, confidence: ARTIFACT_CONFIDENCE }),
  };
}

/**
 * maxLoss accepted on the artifact: the search's plan (held-out data shows at most the search's bound)
 * is written and run; while its upper bound exceeds maxLoss, the search's bound shrinks by
 * maxLoss / upperBound (and below the rejected plan's held-out loss, so the plan changes), at most
 * ARTIFACT_ROUNDS plans. A fixed byte budget cannot trade bytes for loss: it is refused at once.
 */
async function acceptOnArtifact(
  maxLoss: number,
  search: (maxLoss: number) => Promise<{ plan: PlanSummary; choice: number[] }>,
  trial: ArtifactTrial,
  fixedBudget: boolean,
): Promise<{ plan: PlanSummary; choice: number[]; artifact: ArtifactAcceptance }> {
  const rounds: ArtifactAcceptance['rounds'] = [];
  let searchLoss = maxLoss;
  let last: ArtifactMeasure | undefined;
  let lastChoice: string | undefined;
  const refuse = (m: ArtifactMeasure, why: string) =>
    new LlmcError(
      `expert-bits: no plan meets maxLoss=${maxLoss} on the written ${trial.describe().target} artifact (${m.engine}, ${m.sequences} acceptance sequences): the last tried loses ${m.loss.toPrecision(4)}, ${Math.round(100 * ARTIFACT_CONFIDENCE)}% upper bound ${m.upperBound.toPrecision(4)}${why}; raise maxLoss${fixedBudget ? ' or the budget' : ' or expert-bits.acceptance'}`,
    );
  for (let round = 0; ; round++) {
    let found: { plan: PlanSummary; choice: number[] };
    try {
      found = await search(searchLoss);
    } catch (err) {
      if (last && err instanceof LlmcError) throw refuse(last, ` (no plan shows ${searchLoss.toPrecision(4)} on held-out data)`);
      throw err;
    }
    const m = await trial.measure(found.choice);
    const accepted = m.upperBound <= maxLoss;
    rounds.push({ searchLoss, bytes: found.plan.bytes, heldOutLoss: found.plan.heldOutLoss, loss: m.loss, upperBound: m.upperBound, accepted });
    if (accepted) return { ...found, artifact: { ...trial.describe(), engine: m.engine, sequences: m.sequences, tokens: m.tokens, loss: m.loss, upperBound: m.upperBound, rounds } };
    const key = found.choice.join(',');
    if (fixedBudget || round + 1 >= ARTIFACT_ROUNDS || key === lastChoice) throw refuse(m, '');
    last = m;
    lastChoice = key;
    searchLoss = Math.min((searchLoss * maxLoss) / m.upperBound, found.plan.heldOutLoss * (1 - 1e-6));
    if (!(searchLoss > 0)) throw refuse(m, '');
  }
}

/** Routing on calibration and held-out data, per-expert statistics and reconstruction errors for every candidate. */
async function routingProfile(source: ModelSource, lab: Lab, calib: CalibrationSet, o: ParsedExpertBitsOptions, progress: Progress): Promise<RoutingProfile> {
  const layers = moeLayers(source.spec);
  progress.start('expert-bits: routing', 1);
  const routing = await routeTokens(lab, calib.calib, layers);
  const held = await routeTokens(lab, calib.heldOut, layers);
  progress.done();
  const experts = expertsOf(source);
  const out: RoutingProfile = { experts: [], traces: { calib: routing.traces, heldOut: held.traces }, recon: {}, refPpl: await lab.ppl(calib.heldOut) };
  progress.start('expert-bits: reconstruction errors', experts.length);
  for (const e of experts) {
    const tok = await expertTokens(source, routing, e, o.minTokens);
    const p = tok.profile;
    out.experts.push({ key: e.key, layer: e.layer, expert: e.expert, tokens: p.tokens, meanGate: p.meanGate, forced: p.forced, pi: p.pi, force: p.force });
    // Every candidate as written for each projection (row-length fallbacks), alone and as a whole expert.
    const written = (f: QuantType) => PROJS.map((p) => fallbackType(f, source.meta(e.tensors[p])!.shape.at(-1)!));
    const tuples = [...new Map(o.formats.map((f) => [written(f).join(','), written(f)])).values()];
    const perProj = Object.fromEntries(PROJS.map((p, k) => [p, [...new Set(tuples.map((t) => t[k]))]])) as Record<Proj, QuantType[]>;
    out.recon[e.key] = await reconErrors(lab, routing, tok, perProj, tuples, o.reconTokens);
    progress.tick();
  }
  progress.done();
  return out;
}

/** Least-squares scale a with kl ≈ a · recon over every (item, choice). */
function fitScale(recon: number[][], kl: number[][]): number {
  let num = 0;
  let den = 0;
  recon.forEach((row, i) => row.forEach((r, j) => ((num += r * kl[i][j]), (den += r * r))));
  return den > 0 ? num / den : 0;
}

/** Spearman rank correlation (ties averaged). */
function spearman(a: number[], b: number[]): number {
  const rank = (v: number[]) => {
    const idx = v.map((_, i) => i).sort((x, y) => v[x] - v[y]);
    const r = new Array<number>(v.length);
    for (let i = 0; i < idx.length; ) {
      let j = i;
      while (j + 1 < idx.length && v[idx[j + 1]] === v[idx[i]]) j++;
      for (let k = i; k <= j; k++) r[idx[k]] = (i + j) / 2;
      i = j + 1;
    }
    return r;
  };
  const ra = rank(a);
  const rb = rank(b);
  const n = a.length;
  const ma = ra.reduce((s, x) => s + x, 0) / n;
  const mb = rb.reduce((s, x) => s + x, 0) / n;
  let num = 0;
  let da = 0;
  let db = 0;
  for (let i = 0; i < n; i++) {
    num += (ra[i] - ma) * (rb[i] - mb);
    da += (ra[i] - ma) ** 2;
    db += (rb[i] - mb) ** 2;
  }
  return da && db ? num / Math.sqrt(da * db) : 0;
}

export const expertBitsPass: Pass<ParsedExpertBitsOptions> = {
  async run(unit, options, ctx) {
    const { record, annotate } = await analyzeExpertBits(unit.source, options, { ...ctx, unit });
    const p = record.plan;
    ctx.note(
      `expert-bits: ${record.strategy} over ${record.items.length} ${record.granularity} items: ${p.bytes} bytes (${p.bpw.toFixed(3)} bpw), held-out perplexity ${p.heldOutPpl.toFixed(4)} (+${(100 * p.heldOutLoss).toFixed(2)}%)`,
    );
    const a = record.artifact;
    if (a) {
      ctx.note(
        `expert-bits: the written ${a.target} artifact on ${a.engine}: +${(100 * a.loss).toFixed(2)}% perplexity (${Math.round(100 * a.confidence)}% upper bound +${(100 * a.upperBound).toFixed(2)}%, ${a.sequences} acceptance sequences, ${a.tokens} tokens) against maxLoss ${(100 * options.maxLoss!).toFixed(2)}%`,
      );
    }
    for (const n of record.notes) ctx.note(`expert-bits: ${n}`);
    return { unit: evolve(unit, { annotate }), record };
  },
};

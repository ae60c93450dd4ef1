/**
 * Pass `reorder`: permutation-consistent unit reordering and elastic prefix sub-models (ELMS).
 *
 * 1. calibration set (cached profile; self-generated for models without text),
 * 2. anchor layers: top-K by loss increase when the layer is replaced by identity,
 * 3. unit importance (taylor | activation | magnitude | auto), cached per provider,
 * 4. per-layer orders (KV groups, query heads inside groups, neurons; anchors untouched),
 * 5. elastic levels sized by real parameter counts, aligned to the target's quant block.
 * The model transform is a lazy permutation of q/k/v rows, o columns, gate/up rows, down columns.
 */
import { silentProgress, type Progress } from '../../src/core/util/progress.js';
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import { TfModel } from '../../src/exec/autodiff/lower.js';
import { Engine } from '../../src/exec/engine/index.js';
import { StreamEngine, streams } from '../../src/exec/stream/index.js';
import { pieceCache, sweepResume } from '../../src/measure/stream-cache.js';
import { UsageError } from '../../src/core/errors.js';
import { calibrationSet, textFileSpec, trainingSet, type CalibrationSet } from '../../src/measure/calibration.js';
import { cachedProfile } from '../../src/measure/store.js';
import type { Pass, PassContext } from '../../src/core/pipeline/pass.js';
import { evolve } from '../../src/core/pipeline/unit.js';
import { ELASTIC_LEVELS, type ElasticLevels, type Recovery } from '../../src/core/records/elastic.js';
import type { LowRankAdapter, TensorAnnotation } from '../../src/core/pipeline/unit.js';
import { adapterTargets, recoverLevels, recoverSettings, type LevelRecovery, type RecoverRequest } from './recover.js';
import { distillLevels, type DistillSettings } from './distill.js';
import { blockwiseRecoverLevels, blockwiseSettings, TOPK_ROWS, type BlockwiseSettings } from './blockwise.js';
import { budgetPlan } from './budget.js';
import {
  ACTIVATION_TAPS,
  activationScores,
  activationScoresOf,
  fisherScores,
  magnitudeScores,
  ordersFromScores,
  resortWithin,
  taylorScores,
  type ProviderName,
  type UnitScores,
} from './importance.js';
import { levelLoss, levelMasks, maskedLoss, maskSource, skipLayerMasks, streamedLoss } from './masks.js';
import { AUTO_PROVIDERS, checkUniformAnchors, type ReorderOptions } from './options.js';
import { kernelCost } from './latency.js';
import { budgetOf, chooseNested, measureSensitivity, ordersKey, probeCount, searchLevels, searchLevelsRefined, sensitivityArrays, sensitivityFrom, type Budget, type Sensitivity } from './search.js';
import type { LevelWidth as LevelWidthT } from '../../src/core/ir/width.js';
import type { LayerOrder as Order } from './permute.js';
import { mlpsOf } from '../../src/core/arch/units.js';
import { permuteSource, type LayerOrder } from './permute.js';
import { describeLevel, fullWidth, planLevels } from './planner.js';

/** What the pass records in every manifest (passes[].metadata): record `elastic-prefix/2`. */
export type ReorderMetadata = ElasticLevels;

/** Larger models are not recovered in-process: the tfjs trainer holds the model (and a level) as f32. */
export const RECOVER_MAX_PARAMS = 200e6;

const scoreArrays = (s: UnitScores): Record<string, Float64Array> => {
  const a: Record<string, Float64Array> = {};
  s.head.forEach((h, l) => (a[`head.${l}`] = h));
  s.kv.forEach((k, l) => (a[`kv.${l}`] = k));
  for (const [k, v] of Object.entries(s.mlp)) a[`mlp.${k}`] = v;
  return a;
};

const scoresFrom = (arrays: Record<string, Float64Array>, source: ModelSource): UnitScores => {
  const L = source.spec.numLayers;
  const mlp: Record<string, Float64Array> = {};
  for (let l = 0; l < L; l++) for (const m of mlpsOf(source.spec, l)) mlp[m.prefix] = arrays[`mlp.${m.prefix}`];
  return {
    head: Array.from({ length: L }, (_, l) => arrays[`head.${l}`]),
    kv: Array.from({ length: L }, (_, l) => arrays[`kv.${l}`]),
    mlp,
  };
};

/**
 * The pass's measurements, each a cached profile (kind, key): the calibration set, the loss with each
 * layer skipped, and unit importance per provider. `run` and the `profile` hook both go through
 * here, so a profile directory holds exactly what a compile looks up. The engine and the tfjs model
 * open on first use: a run whose profiles are all cached builds neither.
 */
class Measurements {
  private opened?: Engine;
  private tfm?: TfModel;
  private checkpoint?: Promise<string>;
  /** Provider wall times (ms, as first computed). */
  readonly timeMs: Record<string, number> = {};
  /** Activation importance taken within the streamed anchor-layer sweep (the same taps, the same batches). */
  private swept?: UnitScores;

  constructor(
    private readonly source: ModelSource,
    private readonly o: ReorderOptions,
    private readonly cacheDir: PassContext['cacheDir'],
    private readonly progress: Progress,
    private readonly notes: string[],
  ) {}

  readonly engine = async () => (this.opened ??= await Engine.open(this.source));
  private tf = async () => (this.tfm ??= await TfModel.load(this.source, (m) => this.notes.push(m)));
  private identity = () => (this.checkpoint ??= this.source.identity());

  async calibration(): Promise<CalibrationSet> {
    const o = this.o;
    return calibrationSet(
      this.source,
      { source: o.calibText ? await textFileSpec(o.calibText) : 'self-generated', count: o.calibCount, length: o.calibLength, seed: o.seed, heldOut: o.heldOut },
      { cacheDir: this.cacheDir, engine: this.engine, progress: this.progress },
    );
  }

  /** Loss of the calibration batch with each layer replaced by identity, and of the full model. */
  async layerLoss(calib: CalibrationSet): Promise<{ layerLoss: number[]; baseLoss: number }> {
    const { source, progress } = this;
    const L = source.spec.numLayers;
    const prof = await cachedProfile(this.cacheDir, 'layer-loss', { checkpoint: await this.identity(), calibration: calib.key }, async () => {
      let base: number;
      const losses = new Float64Array(L);
      if (streams(source.spec)) {
        // a large model: one streamed sweep, each layer's skipped variant leaving it at that layer (test/stream-passes.test.ts)
        const engine = new StreamEngine(source, { progress });
        const at = (l: number) => engine.segments.findIndex((g) => g.layer === l);
        // without o/down biases the masked layer is the identity exactly: its input handed on, no session built
        const skip = !source.spec.oBias && !source.spec.mlpBias;
        const branches = Array.from({ length: L }, (_, l) => ({ source: skip ? source : maskSource(source, skipLayerMasks(source.spec, l), 'mask'), from: at(l), until: at(l) + 1, skip }));
        // activation importance's taps in the same sweep (one visit per block for both), when it will be asked for
        const fuse = this.o.importance === 'activation' || this.o.importance === 'auto';
        const resume = await sweepResume(source, this.cacheDir, { sweep: 'layer-loss', calibration: calib.key, skip, taps: fuse }, engine.segments.length);
        const r = await engine.losses(calib.calib, branches, { taps: fuse ? ACTIVATION_TAPS : [], resume });
        if (r.resumedAt > 0) this.notes.push(`anchor-layer losses resumed after piece ${r.resumedAt} of ${engine.segments.length} (a stopped sweep read from the profile cache)`);
        if (fuse) this.swept = activationScoresOf(source.spec, r.taps);
        base = r.base;
        losses.set(r.branches);
      } else {
        base = Math.log(await (await this.engine()).perplexity(calib.calib));
        progress.start('reorder: anchor layers', L);
        for (let l = 0; l < L; l++) {
          losses[l] = await maskedLoss(source, skipLayerMasks(source.spec, l), calib.calib);
          progress.tick();
        }
        progress.done();
      }
      return { meta: { baseLoss: base, note: 'layer replaced by identity = all its heads and neurons masked (exact without o/down biases)' }, arrays: { layerLoss: losses } };
    });
    return { layerLoss: Array.from(prof.arrays.layerLoss), baseLoss: prof.meta.baseLoss as number };
  }

  /**
   * Unit importance by provider `p` of the model, or of `on` (the model with a level's masks applied:
   * iterative importance), cached by that model's identity.
   */
  async scores(calib: CalibrationSet, p: ProviderName, on?: ModelSource): Promise<UnitScores> {
    const { progress, o } = this;
    const source = on ?? this.source;
    const fisher = p === 'fisher' ? { fisherTokens: o.fisherTokens, fisherBatch: o.fisherBatch, seed: o.seed } : {};
    const prof = await cachedProfile(this.cacheDir, 'unit-importance', { checkpoint: on ? await on.identity() : await this.identity(), calibration: calib.key, provider: p, ...fisher }, async () => {
      const t0 = performance.now();
      let s: UnitScores;
      if (p === 'fisher') {
        const seqs = await this.fisherData(calib);
        progress.start('reorder: fisher importance', Math.ceil(seqs.length / o.fisherBatch));
        const tfm = on ? await TfModel.load(on) : await this.tf();
        try {
          s = await fisherScores(tfm, seqs, o.fisherBatch, () => progress.tick());
        } finally {
          if (on) tfm.dispose();
        }
        progress.done();
        return { meta: { provider: p, timeMs: performance.now() - t0, tokens: seqs.length * (seqs[0]?.length ?? 0) }, arrays: scoreArrays(s) };
      }
      progress.start(`reorder: ${p} importance`, 1);
      if (p === 'magnitude') s = await magnitudeScores(source);
      // a large model's taps stream layer by layer (the same statistics; test/stream.test.ts)
      else if (p === 'activation') {
        if (streams(source.spec)) s = (!on && this.swept) || (await activationScores(new StreamEngine(source, { progress, pieces: await pieceCache(source, this.cacheDir) }), calib.calib));
        else if (!on) s = await activationScores(await this.engine(), calib.calib);
        else {
          const engine = await Engine.open(on);
          try {
            s = await activationScores(engine, calib.calib);
          } finally {
            await engine.close();
          }
        }
      } else {
        const tfm = on ? await TfModel.load(on) : await this.tf();
        try {
          s = (await taylorScores(tfm, calib.calib)).scores;
        } finally {
          if (on) tfm.dispose();
        }
      }
      progress.done();
      return { meta: { provider: p, timeMs: performance.now() - t0 }, arrays: scoreArrays(s) };
    });
    if (!on) this.timeMs[p] = Math.round(prof.meta.timeMs as number);
    if (p === 'fisher' && !on) this.fisherTokens = prof.meta.tokens as number;
    return scoresFrom(prof.arrays, source);
  }

  /** Tokens the Fisher scores accumulated over (when computed or cached). */
  fisherTokens?: number;

  /** importance=fisher's sequences: ⌈fisherTokens / calibLength⌉ training windows (or self-generated ones), never held-out. */
  private async fisherData(calib: CalibrationSet): Promise<number[][]> {
    const o = this.o;
    const data = await trainingSet(this.source, calib, Math.ceil(o.fisherTokens / o.calibLength), o.seed, { cacheDir: this.cacheDir, engine: this.engine });
    const tokens = data.seqs.length * o.calibLength;
    if (tokens < o.fisherTokens) this.notes.push(`fisher importance: ${tokens} tokens of training text, fewer than reorder.fisherTokens=${o.fisherTokens}`);
    return data.seqs;
  }

  /**
   * The sensitivity table of widths=search (search.ts): the calibration loss of `orders`' level with
   * one non-anchor layer's axis cut, per layer, axis and probed width (cached per orders).
   */
  async sensitivity(calib: CalibrationSet, orders: Order[], anchors: number[], block: number, state?: LevelWidthT[]): Promise<Sensitivity> {
    const { source, progress, o } = this;
    const spec = source.spec;
    const anchorSet = new Set(anchors);
    const key = { checkpoint: await this.identity(), calibration: calib.key, orders: ordersKey(orders), anchors, block, points: o.searchPoints, ...(state ? { state: ordersKey(state) } : {}) };
    const prof = await cachedProfile(this.cacheDir, 'width-sensitivity', key, async () => {
      const loss = (w: LevelWidthT[]) => levelLoss(source, orders, w, calib.calib);
      const base = await loss(state ?? Array.from({ length: spec.numLayers }, () => fullWidth(spec)));
      progress.start(`reorder: per-layer width sensitivity${state ? ' (refined)' : ''}`, probeCount(spec, anchorSet, block, o.searchPoints));
      const s = await measureSensitivity(spec, anchorSet, block, o.searchPoints, loss, base, () => progress.tick(), state);
      progress.done();
      return sensitivityArrays(s);
    });
    return sensitivityFrom(prof.meta, prof.arrays);
  }

  /** Held-out perplexity of the unmodified model (not cached: one forward pass). */
  async heldOutPpl(calib: CalibrationSet): Promise<number> {
    if (streams(this.source.spec)) return Math.exp(await streamedLoss(this.source, calib.heldOut));
    return (await this.engine()).perplexity(calib.heldOut);
  }

  /** Free the tfjs model (importance is done; recovery loads its own). */
  releaseTf(): void {
    this.tfm?.dispose();
    this.tfm = undefined;
  }

  async close(): Promise<void> {
    this.tfm?.dispose();
    await this.opened?.close();
  }
}

/** Held-out perplexity of a model on onnxruntime (the distilled full model). */
async function perplexityOf(source: ModelSource, seqs: number[][]): Promise<number> {
  const engine = await Engine.open(source);
  try {
    return await engine.perplexity(seqs);
  } finally {
    await engine.close();
  }
}

/** Anchor count the options ask for (`default`: round(L·6/32)); explicit lists are not measured. */
const anchorCount = (o: ReorderOptions, L: number) => (Array.isArray(o.anchors) ? 0 : o.anchors === 'default' ? Math.round((L * 6) / 32) : o.anchors);

/** Everything the pass decides (tests and bench use it): the record, the reordered weights and the levels' adapters. */
export async function analyzeReorder(
  source: ModelSource,
  o: ReorderOptions,
  ctx: Pick<PassContext, 'note' | 'cacheDir' | 'target'> & { formats?: PassContext['formats']; progress?: Progress },
): Promise<{
  metadata: ReorderMetadata;
  orders: LayerOrder[];
  scores: UnitScores;
  /** Provider wall times (ms, as first computed); kept out of the manifest so it stays deterministic. */
  timeMs: Record<string, number>;
  /** The reordered model (a gather view of `source`). */
  source: ModelSource;
  /** Per adapted tensor, its adapters by level id (the unit's annotations). */
  adapters: Map<string, TensorAnnotation>;
}> {
  const spec = source.spec;
  const L = spec.numLayers;
  const notes: string[] = [];
  const progress = ctx.progress ?? silentProgress;
  // A target that writes per-layer levels only for some families refuses the others before any measurement.
  const perLayer = ctx.target.capabilities.elasticWidths;
  const refusal = o.widths === 'search' && perLayer.kind === 'uniform' ? perLayer.searchPerLayer?.(spec) : null;
  if (refusal) throw new UsageError(`--target ${ctx.target.name} cannot write per-layer widths (reorder.widths=search) for this model: ${refusal}; compile the levels for --target ts or cuda, or with reorder.widths=uniform`);
  const m = new Measurements(source, o, ctx.cacheDir, progress, notes);
  try {
    const calib = await m.calibration();

    // Anchors.
    let anchors: number[];
    let layerLoss: number[] | null = null;
    let baseLoss: number | null = null;
    // A target with one width for all layers gets no full-width anchors.
    const elastic = ctx.target.capabilities.elasticWidths;
    if (elastic.kind === 'uniform' && !(elastic.searchPerLayer && o.widths === 'search')) {
      checkUniformAnchors(o, ctx.target.name, elastic.why);
      notes.push(`target ${ctx.target.name}: uniform widths, no anchor layers (${elastic.why})`);
      anchors = [];
    } else if (Array.isArray(o.anchors)) {
      for (const a of o.anchors) if (a >= L) throw new UsageError(`reorder.anchors: layer ${a} does not exist (the model has ${L})`);
      anchors = o.anchors;
    } else {
      const K = anchorCount(o, L);
      if (K >= L) throw new UsageError(`reorder.anchors: ${K} anchors leave no elastic layer (the model has ${L})`);
      anchors = [];
      if (K > 0) {
        ({ layerLoss, baseLoss } = await m.layerLoss(calib));
        const loss = layerLoss;
        anchors = Array.from({ length: L }, (_, l) => l)
          .sort((a, b) => loss[b] - loss[a] || a - b)
          .slice(0, K)
          .sort((a, b) => a - b);
      }
    }
    const anchorSet = new Set(anchors);

    // Importance.
    const scoresFor = (p: ProviderName) => m.scores(calib, p);
    const block = o.quantBlock ?? ctx.target.quantBlock(ctx.formats ?? { tensorTypes: [] });
    let provider: ProviderName;
    let scores: UnitScores;
    let auto: Record<string, number> | undefined;
    if (o.importance === 'auto') {
      // Pick by held-out perplexity at the 50% level.
      const half = planLevels(spec, { levels: [0.5], anchors: anchorSet, block, sizeBy: o.sizeBy }).levels[0];
      auto = {};
      let best: { p: ProviderName; ppl: number; s: UnitScores } | undefined;
      for (const p of AUTO_PROVIDERS) {
        const s = await scoresFor(p);
        const orders = ordersFromScores(spec, s, anchorSet);
        const ppl = Math.exp(await levelLoss(source, orders, half.layers, calib.heldOut));
        auto[p] = ppl;
        if (!best || ppl < best.ppl) best = { p, ppl, s };
      }
      provider = best!.p;
      scores = best!.s;
    } else {
      provider = o.importance;
      scores = await scoresFor(provider);
    }
    let orders = ordersFromScores(spec, scores, anchorSet);

    // Levels: one keep fraction per level, or per-layer widths searched under the budget.
    const full = describeLevel(spec, 'full', 1, Array.from({ length: L }, () => fullWidth(spec)), anchorSet);
    let plan: { levels: ReorderMetadata['levels']; notes: string[] };
    let widthSearch: ReorderMetadata['widthSearch'];
    if (o.widths === 'search') {
      const budget: Budget =
        o.budget === 'memory' ? { kind: 'memory', context: o.budgetContext, bytesPerParam: 2 } : o.budget === 'latency' ? { kind: 'latency', cost: await kernelCost(spec, o.budgetContext, ctx.cacheDir) } : { kind: 'params', sizeBy: o.sizeBy };
      const sensitivity = await m.sensitivity(calib, orders, anchors, block);
      const search = (targets: number[]) => searchLevels(spec, { targets, anchors: anchorSet, block, budget, sensitivity });
      let targets: number[];
      if (Array.isArray(o.levels)) targets = o.levels;
      else {
        const n = o.levels.count;
        const min = budgetOf(spec, budget, search([0]).levels[0], full);
        targets = n === 1 ? [1] : Array.from({ length: n }, (_, i) => Math.round((min + ((1 - min) * i) / (n - 1)) * 1e4) / 1e4);
      }
      plan = o.searchRefine
        ? await searchLevelsRefined(spec, { targets, anchors: anchorSet, block, budget, sensitivity }, (state) => m.sensitivity(calib, orders, anchors, block, state))
        : search(targets);
      // Beside each searched level, the uniform cut of the same budget (params budgets): the nested choice of least measured loss.
      let picked: ('searched' | 'uniform')[] | undefined;
      if (budget.kind === 'params') {
        const cands = [];
        for (const lv of plan.levels) {
          const u = lv.paramFrac >= 1 ? null : planLevels(spec, { levels: [lv.nominal], anchors: anchorSet, block, sizeBy: o.sizeBy }).levels[0] ?? null;
          const uniform = u && budgetOf(spec, budget, u, full) <= lv.nominal + 1e-9 ? { ...u, id: lv.id, nominal: lv.nominal } : null;
          const lossOf = (x: ReorderMetadata['levels'][number]) => (x.paramFrac >= 1 ? Promise.resolve(sensitivity.base) : levelLoss(source, orders, x.layers, calib.calib));
          cands.push({ searched: lv, uniform, loss: { searched: await lossOf(lv), uniform: uniform ? await lossOf(uniform) : null } });
        }
        picked = chooseNested(cands);
        plan = { levels: cands.map((c, i) => (picked![i] === 'uniform' ? c.uniform! : c.searched)), notes: plan.notes };
        cands.forEach((c, i) => {
          if (picked![i] === 'uniform') plan.notes.push(`level ${c.searched.nominal}: the uniform cut measured a lower calibration loss (${c.loss.uniform!.toFixed(3)}) than the searched widths (${c.loss.searched.toFixed(3)}); kept uniform`);
        });
      }
      widthSearch = {
        ...(picked ? { picked } : {}), budget: budgetRecord(budget), points: o.searchPoints, ...(o.searchRefine ? { refined: true as const } : {}), probes: probeCount(spec, anchorSet, block, o.searchPoints), baseLoss: sensitivity.base, fractions: plan.levels.map((lv) => Math.round(budgetOf(spec, budget, lv, full) * 1e6) / 1e6) };
    } else plan = planLevels(spec, { levels: o.levels, anchors: anchorSet, block, sizeBy: o.sizeBy });
    notes.push(...plan.notes);
    const levels: ReorderMetadata['levels'] = plan.levels;
    const narrowed = levels.filter((lv) => lv.paramFrac < 1);

    // Iterative importance: largest level first, each level's units re-scored with the next larger one active.
    if (o.iterative) {
      if (provider === 'magnitude') notes.push('iterative importance: magnitude scores do not depend on the active level; orders unchanged');
      else {
        for (let i = narrowed.length - 1; i > 0; i--) {
          const wider = narrowed[i].layers;
          const s = await m.scores(calib, provider, maskSource(source, levelMasks(spec, orders, wider), `level ${narrowed[i].id} active`));
          orders = resortWithin(spec, orders, wider, s);
        }
        // The largest level's units come from the full model's scores (it is the next larger level).
      }
    }
    const evaluate = o.evaluate === 'auto' ? full.params <= 50e6 : o.evaluate;
    m.releaseTf(); // importance is done: free the original model before the levels' models load
    const permuted = permuteSource(source, orders);
    const adapters = new Map<string, TensorAnnotation>();
    let recovery: Recovery | null = null;
    let heldOutPpl: number | undefined;
    let training: RecoverRequest['training'] = null;
    let blockwise: BlockwiseSettings | null = null;
    let shipped: ModelSource = permuted;
    let distilled: { before: Map<string, LevelRecovery>; trainedFull: boolean } | null = null;
    if (o.recover?.method === 'distill') {
      if (full.params > RECOVER_MAX_PARAMS) {
        notes.push(`recovery skipped: ${(full.params / 1e6).toFixed(0)}M parameters is more than the in-process trainer takes (${RECOVER_MAX_PARAMS / 1e6}M; reorder.recover=none silences this)`);
      } else {
        const r = o.recover;
        const data = await trainingSet(source, calib, r.data, r.seed, { cacheDir: ctx.cacheDir, engine: m.engine });
        if (data.droppedHeldOut) notes.push(`recovery: ${data.droppedHeldOut} training sequence(s) equal to held-out ones dropped`);
        const settings: DistillSettings = {
          steps: r.steps === 'auto' ? Math.max(1, Math.floor(data.seqs.length / r.batch)) : r.steps,
          lr: r.lr,
          batch: r.batch,
          seed: r.seed,
          levelsPerStep: r.levelsPerStep,
          ce: r.ce,
          fullWeight: r.fullWeight,
        };
        const before = evaluate ? (await recoverLevels({ model: permuted, levels, heldOut: calib.heldOut, heldOutKey: calib.key, training: null, threads: 1, cacheDir: ctx.cacheDir, progress })).levels : new Map<string, LevelRecovery>();
        const d = await distillLevels(permuted, [...levels, full], data.seqs, settings, progress);
        shipped = d.source;
        distilled = { before, trainedFull: true };
        recovery = {
          method: 'distill',
          ...settings,
          tokens: d.tokens,
          bestStep: d.bestStep,
          data: { source: calib.spec.source, count: data.seqs.length, length: calib.spec.length, profile: data.key },
        };
        if (d.bestStep === 0) notes.push('recovery: no distillation checkpoint beat the reordered weights on the validation sequences; the levels ship untrained');
      }
    } else if (o.recover) {
      // reorder.recover unset: LoRA where it runs, blockwise under the compute budget above RECOVER_MAX_PARAMS or where the model streams.
      let rec = o.recover.large && (full.params > RECOVER_MAX_PARAMS || streams(spec)) ? o.recover.large : o.recover;
      if (!ctx.target.capabilities.adapters) notes.push(`recovery skipped: target ${ctx.target.name} writes no per-level adapters (reorder.recover=none silences this)`);
      else if (full.params > RECOVER_MAX_PARAMS && rec.method !== 'blockwise') {
        notes.push(`recovery skipped: ${(full.params / 1e6).toFixed(0)}M parameters is more than the in-process trainer takes (${RECOVER_MAX_PARAMS / 1e6}M; reorder.recover=blockwise holds one block, reorder.recover=none silences this)`);
      } else {
        const data = await trainingSet(source, calib, rec.data, rec.seed, { cacheDir: ctx.cacheDir, engine: m.engine });
        if (data.droppedHeldOut) notes.push(`recovery: ${data.droppedHeldOut} training sequence(s) equal to held-out ones dropped`);
        let budget: { macsPerParam: number; macs: number } | undefined;
        if (rec.method === 'blockwise' && rec.budget !== undefined) {
          const plan = budgetPlan(spec, { params: full.params, macsPerParam: rec.budget, levels: narrowed.map((lv) => lv.layers), tokens: calib.spec.length, data: data.seqs.length, batch: rec.batch, ...(rec.loss === 'topk' ? { lensRows: TOPK_ROWS } : {}) });
          rec = { ...rec, steps: plan.steps };
          budget = { macsPerParam: rec.budget!, macs: plan.budget };
          if (plan.fixed + plan.perStep > plan.budget) notes.push(`recovery: reorder.recoverBudget=${rec.budget} buys no step beyond the rows' forward passes; 1 step per block and level`);
        }
        const b = rec.method === 'blockwise' ? blockwiseSettings(rec) : null;
        blockwise = b?.blockwise ?? null;
        const settings = b?.settings ?? recoverSettings(rec, narrowed.length);
        training = { seqs: data.seqs, key: data.key, settings };
        recovery = {
          method: 'lora',
          ...settings,
          ...(blockwise ? { blockwise: { target: blockwise.target, endToEnd: blockwise.endToEnd, loss: blockwise.loss, ...(budget ? { budget } : {}) } } : {}),
          targets: [...new Set(adapterTargets(permuted, settings.targets).map((t) => t.weight.split('.').slice(-2, -1)[0]))],
          data: { source: calib.spec.source, count: data.seqs.length, length: calib.spec.length, profile: data.key },
        };
      }
    }
    if (evaluate || training) {
      const threads = o.recover?.threads ?? undefined;
      const r =
        blockwise && training
          ? await blockwiseRecoverLevels({ model: shipped, levels, heldOut: evaluate ? calib.heldOut : [], training, blockwise, cacheDir: ctx.cacheDir, progress })
          : await recoverLevels({ model: shipped, levels, heldOut: calib.heldOut, heldOutKey: calib.key, training, threads, cacheDir: ctx.cacheDir, progress });
      // Blockwise recovery not asked to evaluate (large models) runs no held-out text: the levels ship unmeasured.
      const measured = !(blockwise && training && !evaluate);
      // The full model's perplexity as onnxruntime measures it (what evaluation compares against); levels on tfjs.
      if (measured) heldOutPpl = await m.heldOutPpl(calib);
      if (measured && distilled && recovery?.method === 'distill') {
        // The shipped full model is the trained one: measured the same way, the original's kept beside it.
        recovery.originalHeldOutPpl = heldOutPpl;
        heldOutPpl = await perplexityOf(shipped, calib.heldOut);
        for (const lv of levels) {
          const b = distilled.before.get(lv.id)?.before;
          if (b) lv.unrecovered = b;
        }
      }
      if (measured) {
        full.heldOutPpl = heldOutPpl;
        full.agreement = 1;
      }
      for (const lv of levels) {
        const q = r.levels.get(lv.id)!;
        if (training && q.bestStep === 0 && !q.after) notes.push(`recovery: no training step improved level ${lv.id} on the validation sequences; it ships without adapters`);
        const shipped = q.after ?? q.before;
        if (measured) {
          lv.heldOutPpl = shipped === r.full ? heldOutPpl : shipped.heldOutPpl;
          lv.agreement = shipped.agreement;
        }
        if (!q.after || !q.adapters) continue;
        if (measured) lv.unrecovered = q.before;
        const s = training!.settings;
        lv.adapters = { rank: s.rank, alpha: s.alpha, tensors: 2 * q.adapters.length, params: q.adapters.reduce((n, a) => n + a.a.length + a.b.length, 0) };
        for (const a of q.adapters) {
          const prev = adapters.get(a.weight)?.adapters ?? {};
          const ad: LowRankAdapter = { rank: s.rank, scale: s.alpha / s.rank, inFeatures: a.inFeatures, outFeatures: a.outFeatures, a: a.a, b: a.b };
          adapters.set(a.weight, { adapters: { ...prev, [lv.id]: ad } });
        }
      }
    }

    const metadata: ReorderMetadata = {
      format: ELASTIC_LEVELS.id as ReorderMetadata['format'],
      importance: { provider, requested: o.importance, ...(auto ? { auto } : {}) },
      calibration: { ...calib.spec, profile: calib.key },
      attnUnit: spec.numKvHeads > 1 ? 'kv-group' : 'q-head',
      anchors,
      layerLoss,
      baseLoss,
      quantBlock: block,
      layout: { inSliced: 'row-major-strided' },
      orders,
      full,
      levels,
      ...(widthSearch ? { widthSearch } : {}),
      ...(o.iterative && provider !== 'magnitude' ? { iterative: true } : {}),
      ...(provider === 'fisher' && m.fisherTokens ? { fisherTokens: m.fisherTokens } : {}),
      ...(heldOutPpl !== undefined ? { heldOutPpl } : {}),
      recovery,
      notes,
    };
    return { metadata, orders, scores, timeMs: m.timeMs, source: shipped, adapters };
  } finally {
    await m.close();
  }
}

export const reorderPass: Pass<ReorderOptions> = {
  /** What any target's compile will look up: calibration, layer losses (unless anchors are listed), importance (every provider for auto). */
  async profile(source, o, ctx) {
    const notes: string[] = [];
    const m = new Measurements(source, o, ctx.cacheDir, ctx.progress, notes);
    try {
      const calib = await m.calibration();
      const K = anchorCount(o, source.spec.numLayers);
      if (K > 0 && K < source.spec.numLayers) await m.layerLoss(calib);
      for (const p of o.importance === 'auto' ? AUTO_PROVIDERS : [o.importance]) await m.scores(calib, p);
    } finally {
      await m.close();
    }
    for (const n of notes) ctx.note(`reorder: ${n}`);
  },

  async run(unit, options, ctx) {
    const { metadata, source, adapters } = await analyzeReorder(unit.source, options, ctx);
    for (const n of metadata.notes) ctx.note(`reorder: ${n}`);
    return { unit: evolve(unit, { source, annotate: adapters }), record: metadata };
  },
};

/** The budget as the record keeps it (latency: the fitted kernel cost, µs per call and ns per multiply-add). */
function budgetRecord(b: Budget): NonNullable<ReorderMetadata['widthSearch']>['budget'] {
  if (b.kind === 'memory') return { kind: 'memory', context: b.context, bytesPerParam: b.bytesPerParam };
  if (b.kind === 'latency') return { kind: 'latency', context: b.cost.context, perCallUs: Math.round(b.cost.perCall * 1e9) / 1e3, perMacNs: Math.round(b.cost.perMac * 1e12) / 1e3, host: b.cost.host };
  return { kind: 'params', sizeBy: b.sizeBy };
}

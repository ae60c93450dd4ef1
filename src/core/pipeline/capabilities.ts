/**
 * The checks of a compile against its target's declared capabilities (TargetCapabilities.lowers):
 * a pass that needs a graph feature the target does not lower is refused by the pass manager, before
 * any work; a model with one by the compile driver, once its config is read. One message each, exit 2.
 * `llmc list architectures` asks the same checks (whatTakes), so its table cannot disagree with a compile.
 */
import type { ArchSpec } from '../arch/types.js';
import { UsageError } from '../errors.js';
import type { PassDescriptor } from './pass.js';
import { GRAPH_FEATURES, lowers, type GraphFeature, type Lowering, type TargetDescriptor } from './target.js';

/** The graph features a model has of itself. */
export function modelFeatures(spec: Pick<ArchSpec, 'moe' | 'slidingWindow'>): GraphFeature[] {
  return [...(spec.moe ? (['moe'] as const) : []), ...(spec.slidingWindow !== null ? (['sliding-window'] as const) : [])];
}

const why = (l: Lowering) => (typeof l === 'object' && 'refuses' in l ? `: ${l.refuses}` : '');
const writes = (l: Lowering) => l === true || (typeof l === 'object' && 'approximates' in l);

/** The check's UsageError message, or null when it passes. */
function refusalOf(check: () => void): string | null {
  try {
    check();
    return null;
  } catch (err) {
    if (err instanceof UsageError) return err.message;
    throw err;
  }
}

/** The target writes this model: every graph feature of it lowered or approximated, and its own checkArch passes. */
function writesModel(spec: ArchSpec, target: TargetDescriptor): boolean {
  return modelFeatures(spec).every((f) => writes(target.capabilities.lowers[f])) && refusalOf(() => target.checkArch?.(spec)) === null;
}

/** `--target X does not lower …`, naming the targets that do (and, given the model, that write it). */
function refusal(target: TargetDescriptor, f: GraphFeature, by: string, targets: readonly TargetDescriptor[], spec?: ArchSpec): UsageError {
  const others = targets.filter((t) => lowers(t, f) && (!spec || writesModel(spec, t))).map((t) => t.name);
  return new UsageError(`--target ${target.name} does not lower ${GRAPH_FEATURES[f]}, which ${by}${why(target.capabilities.lowers[f])}${others.length ? ` (targets that do: ${others.join(', ')})` : ''}`);
}

/** Refuses a pass whose output needs a graph feature the target does not lower. */
export function checkPassLowered(pass: { name: string; needs?: readonly GraphFeature[] }, target: TargetDescriptor, targets: readonly TargetDescriptor[]): void {
  for (const f of pass.needs ?? []) if (!lowers(target, f)) throw refusal(target, f, `pass ${pass.name} needs`, targets);
}

/** Refuses a model with a graph feature the target neither lowers nor approximates (that target notes it while writing). */
export function checkModelLowered(spec: ArchSpec, target: TargetDescriptor, targets: readonly TargetDescriptor[]): void {
  for (const f of modelFeatures(spec)) {
    if (!writes(target.capabilities.lowers[f])) throw refusal(target, f, `this ${spec.modelType} model has`, targets, spec);
  }
}

/**
 * The compile driver's checks of a model, once its config is read and before any pass runs: its graph
 * features against the target's, the target's checkArch, then each pass's checkArch for this target.
 */
export function checkModel(spec: ArchSpec, target: TargetDescriptor, passes: readonly Pick<PassDescriptor, 'checkArch'>[], targets: readonly TargetDescriptor[]): void {
  checkModelLowered(spec, target, targets);
  target.checkArch?.(spec);
  for (const p of passes) p.checkArch?.(spec, target);
}

/** Per target and per pass: null where a compile of the model is taken, else the one line that refuses it. */
export interface Takes {
  targets: Record<string, string | null>;
  passes: Record<string, string | null>;
}

/**
 * What the compile's own checks say of a model, per target and pass: a target takes it when
 * checkModel passes and, for each record the target needs, some pass writing it takes the model on
 * that target; a pass takes it when some target that takes the model lowers what the pass needs and
 * the pass's checkArch passes there.
 */
export function whatTakes(spec: ArchSpec, targets: readonly TargetDescriptor[], passes: readonly PassDescriptor[]): Takes {
  const alone = new Map(targets.map((t) => [t, refusalOf(() => checkModel(spec, t, [], targets))]));
  const on = (p: PassDescriptor, t: TargetDescriptor) =>
    alone.get(t) ??
    refusalOf(() => {
      checkPassLowered(p, t, targets);
      p.checkArch?.(spec, t);
    });
  const target = (t: TargetDescriptor): string | null => {
    if (alone.get(t) !== null) return alone.get(t)!;
    for (const r of t.requires) {
      const tried = passes.filter((p) => p.produces.id === r.id).map((p) => on(p, t));
      if (!tried.includes(null)) return tried[0] ?? `--target ${t.name} needs ${r.what}, which no pass writes`;
    }
    return null;
  };
  const pass = (p: PassDescriptor): string | null => {
    const hosts = targets.filter((t) => alone.get(t) === null);
    const lowering = hosts.filter((t) => (p.needs ?? []).every((f) => lowers(t, f)));
    if (!lowering.length) {
      return `pass ${p.name} needs ${(p.needs ?? []).map((f) => GRAPH_FEATURES[f]).join(' and ')}, which no target that takes this ${spec.modelType} model lowers`;
    }
    const tried = lowering.map((t) => on(p, t));
    return tried.includes(null) ? null : tried[0];
  };
  return {
    targets: Object.fromEntries(targets.map((t) => [t.name, target(t)])),
    passes: Object.fromEntries(passes.map((p) => [p.name, pass(p)])),
  };
}

/**
 * The checks of a compile against its target's declared capabilities (TargetCapabilities.lowers):
 * a pass that needs a graph feature the target does not lower is refused by the pass manager, before
 * any work; a model with one by the compile driver, once its config is read. One message each, exit 2.
 */
import type { ArchSpec } from '../arch/types.js';
import { UsageError } from '../errors.js';
import { GRAPH_FEATURES, lowers, type GraphFeature, type Lowering, type TargetDescriptor } from './target.js';

/** The graph features a model has of itself. */
export function modelFeatures(spec: Pick<ArchSpec, 'moe' | 'slidingWindow'>): GraphFeature[] {
  return [...(spec.moe ? (['moe'] as const) : []), ...(spec.slidingWindow !== null ? (['sliding-window'] as const) : [])];
}

const why = (l: Lowering) => (typeof l === 'object' && 'refuses' in l ? `: ${l.refuses}` : '');

/** `--target X does not lower …`, naming the targets that do. */
function refusal(target: TargetDescriptor, f: GraphFeature, by: string, targets: readonly TargetDescriptor[]): UsageError {
  const others = targets.filter((t) => lowers(t, f)).map((t) => t.name);
  return new UsageError(`--target ${target.name} does not lower ${GRAPH_FEATURES[f]}, which ${by}${why(target.capabilities.lowers[f])}${others.length ? ` (targets that do: ${others.join(', ')})` : ''}`);
}

/** Refuses a pass whose output needs a graph feature the target does not lower. */
export function checkPassLowered(pass: { name: string; needs?: readonly GraphFeature[] }, target: TargetDescriptor, targets: readonly TargetDescriptor[]): void {
  for (const f of pass.needs ?? []) if (!lowers(target, f)) throw refusal(target, f, `pass ${pass.name} needs`, targets);
}

/** Refuses a model with a graph feature the target neither lowers nor approximates (that target notes it while writing). */
export function checkModelLowered(spec: ArchSpec, target: TargetDescriptor, targets: readonly TargetDescriptor[]): void {
  for (const f of modelFeatures(spec)) {
    const l = target.capabilities.lowers[f];
    if (l !== true && !(typeof l === 'object' && 'approximates' in l)) throw refusal(target, f, `this ${spec.modelType} model has`, targets);
  }
}

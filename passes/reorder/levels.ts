/**
 * Picking an elastic level from an artifact's manifest (passes[].metadata of `reorder`), for the
 * runtime's `--level`: by id (`L3`), by nominal fraction, or the largest level whose real size is
 * at most the requested fraction.
 */
import { LlmcError, UsageError } from '../../src/core/errors.js';
import type { Level } from './planner.js';

interface PassLike {
  name: string;
  metadata: Record<string, unknown>;
}

export function elasticLevels(passes: readonly PassLike[] | undefined): Level[] | null {
  const p = passes?.find((x) => x.name === 'reorder');
  return p ? ((p.metadata as { levels: Level[] }).levels ?? null) : null;
}

export function selectLevel(passes: readonly PassLike[] | undefined, request: string, where = ''): Level {
  const levels = elasticLevels(passes);
  if (!levels?.length) throw new LlmcError('--level needs an artifact compiled with --passes reorder (no elastic levels in its manifest)', where || undefined);
  const byId = levels.find((l) => l.id === request);
  if (byId) return byId;
  const r = Number(request);
  if (!Number.isFinite(r) || r <= 0 || r > 1) throw new UsageError(`--level takes a level id (${levels.map((l) => l.id).join(', ')}) or a fraction in (0, 1], got "${request}"`);
  const exact = levels.find((l) => Math.abs(l.nominal - r) < 1e-9);
  if (exact) return exact;
  const fit = levels.filter((l) => l.paramFrac <= r + 1e-9);
  if (!fit.length) {
    throw new UsageError(`no level is as small as ${r}; the smallest is ${levels[0].id} (${levels[0].paramFrac} of the parameters)`);
  }
  return fit[fit.length - 1];
}

/** The runtime's per-layer widths for a level. */
export function levelWidths(level: Level): { kvGroups: number; qHeadsPerGroup: number; ffn: number }[] {
  return level.layers.map((l) => ({ kvGroups: l.kvGroups, qHeadsPerGroup: l.qHeadsPerGroup, ffn: l.ffn }));
}

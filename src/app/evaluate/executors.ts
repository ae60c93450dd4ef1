/** Which artifacts have quality metrics: those llmc can run, i.e. whose target descriptor has `open` (light: descriptors only). */
import { TARGETS } from '../../../backends/index.js';

export function evaluable(target: string): boolean {
  return Boolean(TARGETS.find((t) => t.name === target)?.open);
}

/** The targets llmc evaluates, for messages. */
export const evaluableTargets = (): string[] => TARGETS.filter((t) => t.open).map((t) => t.name);

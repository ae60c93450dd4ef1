/**
 * The compiler passes by name. The CLI only looks passes up here; add a pass by adding a line.
 * Each loads on use, like the backends.
 */
import type { Pass } from './types.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export const PASSES: Record<string, () => Promise<Pass<any>>> = {
  reorder: async () => (await import('./reorder/index.js')).reorderPass,
};

/** The compiler passes by name. The CLI only looks passes up here; add a pass by adding a line. */
import type { Pass } from './types.js';
import { reorderPass } from './reorder/index.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export const PASSES: Record<string, Pass<any>> = {
  reorder: reorderPass,
};

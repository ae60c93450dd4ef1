/** Options of the chunk-partition pass (`--opt chunk-partition.key=value`). Light: the descriptor imports it. */
import { UsageError } from '../../src/core/errors.js';
import type { HeuristicVariant } from '../../src/core/chunks/schedule.js';
import type { OptionSchema, OptionSpec } from '../../src/core/pipeline/options.js';

/** Prompt lengths P the chunk length is chosen for: uniform over [min, max], or these lengths equally often. */
export type PromptLengths = { kind: 'uniform'; min: number; max: number } | { kind: 'list'; lengths: number[] };

export interface ChunkPartitionOptions {
  /** Chunk lengths to ship, or 'auto': chosen from the cost table for the prompt lengths. */
  chunk: number[] | 'auto';
  /** auto: how many chunk lengths to ship (each prompt then runs on the one predicted fastest). */
  lengths: number;
  candidates: number[];
  prompts: PromptLengths;
  objective: 'serial' | 'makespan';
  /** Subgraph costs: measured on this host (TS runtime / onnxruntime) or a cost file. */
  costs: 'measure' | 'measure-ort' | { file: string };
  deps: string | null;
  heuristic: HeuristicVariant;
  nMax: number;
  evaluations: number;
  nodes: number;
  shadowLayers: number[];
  seed: number;
}

export const DEFAULT_CANDIDATES = [32, 64, 128, 256, 512, 1024];

const OPTION_SPECS: readonly OptionSpec[] = [
  { key: 'chunk', help: 'chunk length(s) in tokens, e.g. 256 or 32,128,256 (several share the weights), or auto (chosen from the costs for the prompt lengths)', default: 'auto' },
  { key: 'lengths', help: 'auto: how many chunk lengths to ship (1..4)', default: '1' },
  { key: 'candidates', help: 'auto: chunk lengths to choose from (capped by the context)', default: DEFAULT_CANDIDATES.join(',') },
  { key: 'prompts', help: 'prompt lengths to choose for: MIN-MAX (uniform) or a list P1,P2,... (capped by the context)', default: '600-1500' },
  { key: 'objective', help: 'auto: serial (SPEC §1.5: E[Σ_i t_chunk(i)]) | makespan (E[scheduled makespan])', default: 'serial' },
  { key: 'costs', help: 'subgraph costs: measure (TS runtime on this host) | measure-ort (onnxruntime) | a cost file (docs/chunk-partition.md)', default: 'measure' },
  { key: 'deps', help: 'a dependency file adding ordering constraints between subgraphs (docs/chunk-partition.md)' },
  { key: 'heuristic', help: "the paper's heuristic: all (successors on any processor) | opposite (on the other processor only)", default: 'all' },
  { key: 'nMax', help: 'schedules tabulated for N = 1..nMax chunks (capped by context / c); longer prompts are scheduled online', default: '16' },
  { key: 'evaluations', help: 'local-search evaluations per tabulated schedule', default: '2000' },
  { key: 'nodes', help: 'branch-and-bound nodes per tabulated schedule (proves small ones optimal)', default: '20000' },
  { key: 'shadowLayers', help: "layers with an outlier shadow node after their mlp (CPU), e.g. 1,2; needs a 'shadow' cost", default: 'none' },
  { key: 'seed', help: 'local-search seed', default: '1' },
];

const int = (key: string, v: string, min: number, max = Number.MAX_SAFE_INTEGER) => {
  if (!/^-?\d+$/.test(v.trim()) || Number(v) < min || Number(v) > max) throw new UsageError(`chunk-partition.${key} must be an integer in ${min}..${max}, got "${v}"`);
  return Number(v);
};
const oneOf = <T extends string>(key: string, v: string, list: readonly T[]): T => {
  if (!(list as readonly string[]).includes(v.trim())) throw new UsageError(`chunk-partition.${key} must be one of ${list.join(', ')}, got "${v}"`);
  return v.trim() as T;
};
const intList = (key: string, v: string, min: number) => {
  const parts = v.split(',').map((s) => s.trim()).filter(Boolean);
  if (!parts.length) throw new UsageError(`chunk-partition.${key} needs a comma-separated list, got "${v}"`);
  return [...new Set(parts.map((p) => int(key, p, min)))].sort((a, b) => a - b);
};

function chunkOption(v: string): number[] | 'auto' {
  if (v.trim() === 'auto') return 'auto';
  for (const p of v.split(',')) {
    if (/^\s*-?\d+\s*$/.test(p) && Number(p) < 1) throw new UsageError(`chunk-partition.chunk must be at least 1 token, got ${p.trim()}`);
  }
  return intList('chunk', v, 1);
}

function promptsOption(v: string): PromptLengths {
  const range = /^\s*(\d+)\s*-\s*(\d+)\s*$/.exec(v);
  if (range) {
    const [min, max] = [Number(range[1]), Number(range[2])];
    if (min < 1 || max < min) throw new UsageError(`chunk-partition.prompts: a range MIN-MAX needs 1 ≤ MIN ≤ MAX, got "${v}"`);
    return { kind: 'uniform', min, max };
  }
  return { kind: 'list', lengths: v.split(',').map((p) => int('prompts', p, 1)) };
}

export function parseChunkPartitionOptions(raw: Readonly<Record<string, string>>): ChunkPartitionOptions {
  const costs = (raw.costs ?? 'measure').trim();
  // lengths and candidates steer chunk=auto only: with fixed lengths they would be ignored.
  const ignored = (['lengths', 'candidates'] as const).filter((k) => raw[k] !== undefined);
  if (ignored.length && (raw.chunk ?? 'auto').trim() !== 'auto') {
    throw new UsageError(`chunk-partition.${ignored[0]} chooses among chunk lengths for chunk=auto; chunk=${raw.chunk!.trim()} fixes them (drop ${ignored.map((k) => `chunk-partition.${k}`).join(' and ')}, or use chunk=auto)`);
  }
  const shadow = (raw.shadowLayers ?? 'none').trim();
  return {
    chunk: chunkOption(raw.chunk ?? 'auto'),
    lengths: int('lengths', raw.lengths ?? '1', 1, 4),
    candidates: intList('candidates', raw.candidates ?? DEFAULT_CANDIDATES.join(','), 1),
    prompts: promptsOption(raw.prompts ?? '600-1500'),
    objective: oneOf('objective', raw.objective ?? 'serial', ['serial', 'makespan'] as const),
    costs: costs === 'measure' || costs === 'measure-ort' ? costs : { file: costs },
    deps: raw.deps?.trim() || null,
    heuristic: oneOf('heuristic', raw.heuristic ?? 'all', ['all', 'opposite'] as const),
    nMax: int('nMax', raw.nMax ?? '16', 1, 256),
    evaluations: int('evaluations', raw.evaluations ?? '2000', 0),
    nodes: int('nodes', raw.nodes ?? '20000', 0),
    shadowLayers: shadow === 'none' || shadow === '' ? [] : intList('shadowLayers', shadow, 0),
    seed: int('seed', raw.seed ?? '1', 0),
  };
}

export const CHUNK_PARTITION_OPTIONS: OptionSchema<ChunkPartitionOptions> = { specs: OPTION_SPECS, parse: parseChunkPartitionOptions };

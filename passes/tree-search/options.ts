/** Options of the tree-search pass (`--opt tree-search.key=value`, or the --draft flag). */
import { UsageError } from '../../src/core/errors.js';
import type { OptionSchema, OptionSpec } from '../../src/core/pipeline/options.js';
import type { SearchMode, WidthPolicy } from './search.js';

export type DraftChoice = { kind: 'checkpoint'; dir: string } | { kind: 'level'; level: string } | { kind: 'skip'; layers: number[] };

export interface TreeSearchOptions {
  draft: DraftChoice;
  mode: SearchMode;
  /** Tree budget: nodes, the root included. */
  nMax: number;
  dMax: number;
  topK: number;
  widths: WidthPolicy;
  /** `measure` (TS runtime on this host), `measure-ort` (onnxruntime), or a latency file. */
  latency: 'measure' | 'measure-ort' | { file: string };
  ctx: number[];
  calibCount: number;
  /** Held-out prompts (disjoint from calibration): the chosen plan's acceptance is checked on them. */
  heldOut: number;
  calibLength: number;
  calibText: string | null;
  generate: number;
  seed: number;
  /** LLMCad: α0 ('auto' = λ*·c_d, SPEC §1.4), update rule, branch threshold, draft tokens per tree. */
  alpha0: number | 'auto';
  update: 'eq3' | 'prose';
  branchThresh: number;
  /** Hetero partition tile; null = not given (only a two-unit latency file uses it). */
  tile: number | null;
}

export const MODES: readonly SearchMode[] = ['optimal', 'sequoia', 'ghidorah', 'llmcad'];

const OPTION_SPECS: readonly OptionSpec[] = [
  { key: 'draft', help: 'draft checkpoint directory (same vocabulary), also --draft DIR' },
  { key: 'draftLevel', help: 'draft = an elastic level of the target (needs --passes reorder): an id or a fraction, e.g. 0.5' },
  { key: 'draftSkip', help: 'draft = the target without these decoder layers, e.g. 3,4' },
  { key: 'search', help: `tree search: ${MODES.join(' | ')}`, default: 'optimal' },
  { key: 'budget', help: 'tree nodes at most, the root included (1..128)', default: '64' },
  { key: 'depth', help: 'draft depth at most (1..16)', default: '8' },
  { key: 'topK', help: 'draft candidates ranked per step (1..64)', default: '10' },
  { key: 'widths', help: 'tree sizes searched: stepEdges (right edges of the latency steps) | pow2 | any', default: 'stepEdges' },
  { key: 'latency', help: 'step costs: measure (TS runtime, this host) | measure-ort (onnxruntime) | a latency JSON file (docs/tree-search.md)', default: 'measure' },
  { key: 'ctx', help: 'context-length buckets, one plan each', default: '64,256,1024 (below max_position_embeddings)' },
  { key: 'calib', help: 'calibration prompts (the plan is chosen on them; a 95% interval on its acceptance is recorded)', default: '64' },
  { key: 'heldOut', help: 'held-out prompts, disjoint from calibration: the plan\'s acceptance is checked on them', default: '16' },
  { key: 'calibLength', help: 'tokens per calibration prompt', default: '16' },
  { key: 'calibText', help: "a text file to take prompts from (needs the model's tokenizer); default: sampled from the model" },
  { key: 'generate', help: 'greedy tokens the target continues each prompt with (the positions traced)', default: '96' },
  { key: 'seed', help: 'calibration seed', default: '42' },
  { key: 'alpha0', help: 'llmcad: initial fallback threshold α0, or auto (λ*·c_d)', default: 'auto' },
  { key: 'update', help: 'llmcad: α update rule: eq3 | prose', default: 'eq3' },
  { key: 'branchThresh', help: 'llmcad: confidence that opens a branch', default: '0.3' },
  { key: 'tile', help: 'column alignment of a hetero partition (latency files with two units)', default: '64' },
];

export const OPTION_KEYS = OPTION_SPECS.map((s) => s.key);

const int = (key: string, v: string, min: number, max = Number.MAX_SAFE_INTEGER) => {
  if (!/^-?\d+$/.test(v.trim()) || Number(v) < min || Number(v) > max) throw new UsageError(`tree-search.${key} must be an integer in ${min}..${max}, got "${v}"`);
  return Number(v);
};
const num = (key: string, v: string, min: number, max: number) => {
  const x = Number(v);
  if (v.trim() === '' || !Number.isFinite(x) || x < min || x > max) throw new UsageError(`tree-search.${key} must be a number in [${min}, ${max}], got "${v}"`);
  return x;
};
const oneOf = <T extends string>(key: string, v: string, list: readonly T[]): T => {
  if (!(list as readonly string[]).includes(v)) throw new UsageError(`tree-search.${key} must be one of ${list.join(', ')}, got "${v}"`);
  return v as T;
};
const intList = (key: string, v: string, min: number) => {
  const parts = v.split(',').map((s) => s.trim()).filter(Boolean);
  if (!parts.length) throw new UsageError(`tree-search.${key} needs a comma-separated list, got "${v}"`);
  return [...new Set(parts.map((p) => int(key, p, min)))].sort((a, b) => a - b);
};

export function parseTreeSearchOptions(raw: Readonly<Record<string, string>>): TreeSearchOptions {
  const drafts = (['draft', 'draftLevel', 'draftSkip'] as const).filter((k) => raw[k] !== undefined && raw[k].trim() !== '');
  if (drafts.length !== 1) {
    throw new UsageError(
      drafts.length
        ? `tree-search takes one draft, got ${drafts.map((k) => `tree-search.${k}`).join(' and ')}`
        : 'tree-search needs a draft: --draft DIR (a checkpoint with the same vocabulary), --opt tree-search.draftLevel=0.5 (with --passes reorder) or --opt tree-search.draftSkip=LAYERS',
    );
  }
  let draft: DraftChoice;
  if (drafts[0] === 'draft') draft = { kind: 'checkpoint', dir: raw.draft.trim() };
  else if (drafts[0] === 'draftLevel') draft = { kind: 'level', level: raw.draftLevel.trim() };
  else draft = { kind: 'skip', layers: intList('draftSkip', raw.draftSkip, 0) };
  const latencyRaw = (raw.latency ?? 'measure').trim();
  const budget = (raw.budget ?? '64').trim();
  if (!/^-?\d+$/.test(budget)) throw new UsageError(`tree-search.budget must be an integer (tree nodes, the root included), got "${raw.budget}"`);
  const nMax = Number(budget);
  if (nMax < 1) throw new UsageError(`tree-search.budget must be at least 1 (the root alone is plain decoding), got ${nMax}`);
  if (nMax > 128) throw new UsageError(`tree-search.budget must be at most 128, got ${nMax}`);
  const alpha = (raw.alpha0 ?? 'auto').trim();
  const dMax = int('depth', raw.depth ?? '8', 1, 16);
  const generate = int('generate', raw.generate ?? '96', 2);
  if (generate <= dMax) throw new UsageError(`tree-search.generate (${generate}) must exceed tree-search.depth (${dMax}): each traced position needs the next ${dMax} tokens`);
  const mode = oneOf('search', (raw.search ?? 'optimal').trim(), MODES);
  // Options the chosen mode does not read are refused, never ignored.
  if (mode !== 'llmcad') {
    const llmcadOnly = (['alpha0', 'update', 'branchThresh'] as const).filter((k) => raw[k] !== undefined);
    if (llmcadOnly.length) throw new UsageError(`tree-search.${llmcadOnly[0]} is an LLMCad policy option; it needs --opt tree-search.search=llmcad (search is ${mode})`);
  }
  if (mode === 'ghidorah' && raw.widths !== undefined) throw new UsageError('tree-search.widths: search=ghidorah searches its own widths (1, 2, 4, …, 64); leave widths out or use search=optimal');
  if (raw.ctx !== undefined && latencyRaw !== 'measure' && latencyRaw !== 'measure-ort') throw new UsageError('tree-search.ctx: a latency file brings its own context buckets; leave ctx out or measure (tree-search.latency=measure)');
  return {
    draft,
    mode,
    nMax,
    dMax,
    topK: int('topK', raw.topK ?? '10', 1, 64),
    widths: oneOf('widths', (raw.widths ?? 'stepEdges').trim(), ['stepEdges', 'pow2', 'any'] as const),
    latency: latencyRaw === 'measure' || latencyRaw === 'measure-ort' ? latencyRaw : { file: latencyRaw },
    ctx: raw.ctx !== undefined ? intList('ctx', raw.ctx, 1) : [],
    calibCount: int('calib', raw.calib ?? '64', 1),
    heldOut: int('heldOut', raw.heldOut ?? '16', 0),
    calibLength: int('calibLength', raw.calibLength ?? '16', 1),
    calibText: raw.calibText?.trim() || null,
    generate,
    seed: int('seed', raw.seed ?? '42', 0),
    alpha0: alpha === 'auto' ? 'auto' : num('alpha0', alpha, 0, 1),
    update: oneOf('update', (raw.update ?? 'eq3').trim(), ['eq3', 'prose'] as const),
    branchThresh: num('branchThresh', raw.branchThresh ?? '0.3', 0, 1),
    tile: raw.tile === undefined ? null : int('tile', raw.tile, 1),
  };
}

export const TREE_SEARCH_OPTIONS: OptionSchema<TreeSearchOptions> = { specs: OPTION_SPECS, parse: parseTreeSearchOptions };

/** Options of the expert-bits pass (`--opt expert-bits.key=value`). */
import { UsageError } from '../../src/core/errors.js';
import type { OptionSchema, OptionSpec } from '../../src/core/pipeline/options.js';
import type { FormatRequest, TargetDescriptor } from '../../src/core/pipeline/target.js';
import { GRANULARITIES, type Granularity } from '../../src/core/records/expert-table.js';
import { isQuantType, QUANT_TYPES, type QuantType } from '../../src/core/quant/types.js';

export const DEFAULT_CANDIDATES: readonly QuantType[] = ['Q2_K', 'Q3_K', 'Q4_0', 'Q4_K', 'Q8_0', 'F16'];

export interface ExpertBitsOptions {
  strategy: 'mckp' | 'edgemoe';
  granularity: Granularity;
  /** Candidate formats, fewest bits first. */
  formats: QuantType[];
  /** Exactly one budget form: bytes of the planned tensors, bits per weight over them, or relative held-out loss. */
  budgetBytes: number | null;
  budgetBpw: number | null;
  maxLoss: number | null;
  /** Which measured sensitivity the search minimizes. */
  sensitivity: 'kl' | 'recon';
  /**
   * How the KL of each item and candidate is measured: `exact`, one teacher-forced forward per
   * (item, candidate); `block`, block-local (its reconstruction error at its layer times that layer's
   * KL per unit of error, one forward per MoE layer); `auto`, block where the model streams.
   */
  measure: 'auto' | 'exact' | 'block';
  calibCount: number;
  calibLength: number;
  calibText: string | null;
  seed: number;
  heldOut: number;
  /** maxLoss: sequences the written artifact is accepted on (disjoint from calibration and held-out). */
  acceptance: number;
  /** Experts routed fewer calibration tokens than this are measured force-routed. */
  minTokens: number;
  /** Routed tokens per expert used for the reconstruction error (evenly sampled). */
  reconTokens: number;
  /** Predictor: an order-2 row is used from this many observations on; rows keep this many experts. */
  tau: number;
  topM: number;
  /** Experts preloaded per layer at run time. */
  preload: number;
  solver: 'auto' | 'dp' | 'lagrangian';
}

const SPECS: readonly OptionSpec[] = [
  { key: 'strategy', help: 'mckp (exact multiple-choice knapsack) | edgemoe (the paper\'s search; needs maxLoss)', default: 'mckp' },
  { key: 'granularity', help: 'one format per expert | expert-proj (per projection) | layer-proj (per layer and projection)', default: 'expert (layer-proj where the target stacks experts)' },
  { key: 'formats', help: 'candidate formats, comma-separated', default: DEFAULT_CANDIDATES.join(',') },
  { key: 'budgetBytes', help: 'bytes of the expert tensors (e.g. 3.5MB, 2GiB, 1200000)' },
  { key: 'budgetBpw', help: 'mean bits per weight over the expert tensors (e.g. 3.5)' },
  { key: 'maxLoss', help: 'largest held-out perplexity increase, relative (0.05 = 5%); accepted on the written artifact' },
  { key: 'sensitivity', help: 'what the search minimizes: kl (teacher-forced KL) | recon (activation-aware reconstruction error, in KL units)', default: 'kl' },
  { key: 'measure', help: 'KL per item and candidate: exact (a forward each) | block (reconstruction error × its layer\'s KL per unit, a forward per layer) | auto (block where the model streams)', default: 'auto' },
  { key: 'calib', help: 'calibration sequences', default: '8' },
  { key: 'calibLength', help: 'tokens per calibration sequence', default: '64' },
  { key: 'calibText', help: "a text file to calibrate on (needs the model's tokenizer); default: sequences sampled from the model" },
  { key: 'seed', help: 'calibration seed', default: '42' },
  { key: 'heldOut', help: 'held-out sequences (acceptance, reported losses)', default: '8' },
  { key: 'acceptance', help: 'maxLoss: sequences the written artifact is measured on, on its own runtime (95% upper bound ≤ maxLoss)', default: '16' },
  { key: 'minTokens', help: 'experts routed fewer calibration tokens are measured force-routed', default: '8' },
  { key: 'reconTokens', help: 'routed tokens per expert for the reconstruction error', default: '256' },
  { key: 'tau', help: 'predictor: observations before an order-2 context is trusted', default: '8' },
  { key: 'topM', help: 'predictor: experts kept per context', default: '4' },
  { key: 'preload', help: 'experts preloaded per layer at run time (EdgeMoE m)', default: '2' },
  { key: 'solver', help: 'mckp solver: auto | dp (exact) | lagrangian', default: 'auto' },
];

const KEYS = SPECS.map((s) => s.key);

const int = (key: string, v: string, min: number) => {
  if (!/^\d+$/.test(v.trim()) || Number(v) < min) throw new UsageError(`expert-bits.${key} must be an integer ≥ ${min}, got "${v}"`);
  return Number(v);
};

const positive = (key: string, v: string) => {
  const x = Number(v);
  if (!v.trim() || !Number.isFinite(x) || x <= 0) throw new UsageError(`expert-bits.${key} must be a positive number, got "${v}"`);
  return x;
};

const UNITS: Record<string, number> = { '': 1, B: 1, KB: 1e3, MB: 1e6, GB: 1e9, KIB: 2 ** 10, MIB: 2 ** 20, GIB: 2 ** 30 };

/** "3.5MB", "2GiB", "1200000" → bytes. */
export function parseBytes(key: string, v: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(v);
  const unit = m ? UNITS[m[2].toUpperCase()] : undefined;
  if (!m || unit === undefined || Number(m[1]) <= 0) throw new UsageError(`expert-bits.${key} must be a size like 1200000, 3.5MB or 2GiB, got "${v}"`);
  return Math.floor(Number(m[1]) * unit);
}

const bitsOf = (f: QuantType) => (QUANT_TYPES[f].typeSize * 8) / QUANT_TYPES[f].blockSize;

function parseGranularity(v: string): Granularity {
  const g = v.trim().toLowerCase().replace(/[×_]/g, '-');
  if (!(GRANULARITIES as readonly string[]).includes(g)) throw new UsageError(`expert-bits.granularity must be one of ${GRANULARITIES.join(', ')}, got "${v}"`);
  return g as Granularity;
}

export function parseExpertBitsOptions(raw: Readonly<Record<string, string>>): ExpertBitsOptions & { granularitySet: boolean } {
  for (const k of Object.keys(raw)) if (!KEYS.includes(k)) throw new UsageError(`unknown expert-bits option "${k}"; known: ${KEYS.join(', ')}`);
  const strategy = (raw.strategy ?? 'mckp').trim();
  if (strategy !== 'mckp' && strategy !== 'edgemoe') throw new UsageError(`expert-bits.strategy must be mckp or edgemoe, got "${raw.strategy}"`);
  const formats = (raw.formats ?? DEFAULT_CANDIDATES.join(','))
    .split(',')
    .map((s) => s.trim().toUpperCase())
    .filter(Boolean);
  for (const f of formats) if (!isQuantType(f)) throw new UsageError(`expert-bits.formats: unknown format "${f}"; valid: ${Object.keys(QUANT_TYPES).join(', ')}`);
  if (new Set(formats).size < 2) throw new UsageError('expert-bits.formats needs at least two different formats to choose between');
  const sensitivity = (raw.sensitivity ?? 'kl').trim();
  if (sensitivity !== 'kl' && sensitivity !== 'recon') throw new UsageError(`expert-bits.sensitivity must be kl or recon, got "${raw.sensitivity}"`);
  const measure = (raw.measure ?? 'auto').trim();
  if (!['auto', 'exact', 'block'].includes(measure)) throw new UsageError(`expert-bits.measure must be auto, exact or block, got "${raw.measure}"`);
  const solver = (raw.solver ?? 'auto').trim();
  if (!['auto', 'dp', 'lagrangian'].includes(solver)) throw new UsageError(`expert-bits.solver must be auto, dp or lagrangian, got "${raw.solver}"`);
  const budgetBytes = raw.budgetBytes !== undefined ? parseBytes('budgetBytes', raw.budgetBytes) : null;
  const budgetBpw = raw.budgetBpw !== undefined ? positive('budgetBpw', raw.budgetBpw) : null;
  const maxLoss = raw.maxLoss !== undefined ? positive('maxLoss', raw.maxLoss) : null;
  if (budgetBytes !== null && budgetBpw !== null) throw new UsageError('give one of expert-bits.budgetBytes and expert-bits.budgetBpw, not both');
  if (budgetBytes === null && budgetBpw === null && maxLoss === null) {
    throw new UsageError('expert-bits needs a budget: --opt expert-bits.budgetBytes=…, expert-bits.budgetBpw=… or expert-bits.maxLoss=…');
  }
  return {
    strategy,
    granularity: raw.granularity !== undefined ? parseGranularity(raw.granularity) : 'expert',
    granularitySet: raw.granularity !== undefined,
    formats: [...new Set(formats as QuantType[])].sort((a, b) => bitsOf(a) - bitsOf(b)),
    budgetBytes,
    budgetBpw,
    maxLoss,
    sensitivity,
    measure: measure as ExpertBitsOptions['measure'],
    calibCount: raw.calib !== undefined ? int('calib', raw.calib, 1) : 8,
    calibLength: raw.calibLength !== undefined ? int('calibLength', raw.calibLength, 2) : 64,
    calibText: raw.calibText?.trim() || null,
    seed: raw.seed !== undefined ? int('seed', raw.seed, 0) : 42,
    heldOut: raw.heldOut !== undefined ? int('heldOut', raw.heldOut, 1) : 8,
    acceptance: raw.acceptance !== undefined ? int('acceptance', raw.acceptance, 2) : 16,
    minTokens: raw.minTokens !== undefined ? int('minTokens', raw.minTokens, 1) : 8,
    reconTokens: raw.reconTokens !== undefined ? int('reconTokens', raw.reconTokens, 1) : 256,
    tau: raw.tau !== undefined ? int('tau', raw.tau, 1) : 8,
    topM: raw.topM !== undefined ? int('topM', raw.topM, 1) : 4,
    preload: raw.preload !== undefined ? int('preload', raw.preload, 0) : 2,
    solver: solver as ExpertBitsOptions['solver'],
  } as ExpertBitsOptions & { granularitySet: boolean };
}

export type ParsedExpertBitsOptions = ReturnType<typeof parseExpertBitsOptions>;

export const EXPERT_BITS_OPTIONS: OptionSchema<ParsedExpertBitsOptions> = { specs: SPECS, parse: parseExpertBitsOptions };

/** Combination checks before any work: the target must write the candidates per tensor; edgemoe needs maxLoss. */
export function checkExpertBits(o: ParsedExpertBitsOptions, target: TargetDescriptor, _formats: FormatRequest): void {
  if (!target.capabilities.perTensorFormats || !target.formats.tensorTypes) {
    throw new UsageError(`--target ${target.name} cannot write a format per tensor, which expert-bits needs (use --target ts or gguf)`);
  }
  const table = target.formats.tensorTypes.map((t) => t.toUpperCase());
  const missing = o.formats.filter((f) => !table.includes(f));
  if (missing.length) throw new UsageError(`expert-bits.formats: target ${target.name} does not write ${missing.join(', ')} (it writes ${target.formats.tensorTypes.join(', ')})`);
  if (o.strategy === 'edgemoe' && (o.budgetBytes !== null || o.budgetBpw !== null)) {
    throw new UsageError('expert-bits.strategy=edgemoe takes maxLoss only; budgetBytes / budgetBpw need strategy=mckp');
  }
  if (o.strategy === 'edgemoe' && o.maxLoss === null) {
    throw new UsageError('expert-bits.strategy=edgemoe minimizes size under a loss bound: give expert-bits.maxLoss (a budget needs strategy=mckp)');
  }
  if (!target.capabilities.perExpertFormats && o.granularitySet && o.granularity !== 'layer-proj') {
    throw new UsageError(`--target ${target.name} stacks each layer's experts in one tensor of one type: expert-bits.granularity must be layer-proj there`);
  }
}

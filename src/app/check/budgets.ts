/**
 * Budgets for the CI step (`llmc check`, `llmc compile --check`): one key per metric, each with a
 * `min` and/or `max` bound. The file is checked against a schema before any work; a bad file is one
 * line naming the key, exit code 2. docs/ci.md documents the metrics and the JSON summary.
 */
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { LlmcError } from '../../core/errors.js';
import { parseJsonFile } from '../schema.js';
import { evaluable, evaluableTargets } from '../evaluate/executors.js';

export const METRICS = {
  bytes: 'artifact bytes (every file the manifest lists)',
  ppl_delta: 'held-out perplexity of the artifact minus that of the source model',
  ppl_ratio: 'held-out perplexity of the artifact divided by that of the source model',
  kl_delta: 'mean KL(source ‖ artifact) per held-out token, nats',
  kl_p99: '99th percentile of the per-token KL(source ‖ artifact), nats',
  greedy_agreement: 'fraction of held-out positions where both models pick the same next token',
  tokens_per_s: "decode speed on the artifact's runner, tokens per second",
} as const;
export type Metric = keyof typeof METRICS;
export const METRIC_NAMES = Object.keys(METRICS) as Metric[];
/** The metrics that need the source checkpoint and forward passes of both models. */
export const QUALITY_METRICS = ['ppl_delta', 'ppl_ratio', 'kl_delta', 'kl_p99', 'greedy_agreement', 'tokens_per_s'] as const satisfies readonly Metric[];

const bound = z
  .strictObject({ min: z.number().finite().optional(), max: z.number().finite().optional() })
  .refine((b) => b.min !== undefined || b.max !== undefined, { message: 'needs "min" or "max"' })
  .refine((b) => b.min === undefined || b.max === undefined || b.min <= b.max, { message: '"min" is above "max"' });

const BUDGETS = z
  .strictObject(Object.fromEntries(METRIC_NAMES.map((m) => [m, bound.optional()])) as Record<Metric, z.ZodOptional<typeof bound>>)
  .refine((b) => Object.keys(b).length > 0, { message: `no budget: give at least one of ${METRIC_NAMES.join(', ')}` });

export type Bound = { min?: number; max?: number };
export type Budgets = Partial<Record<Metric, Bound>>;

export function parseBudgets(text: string, file: string): Budgets {
  const hint = (path: readonly PropertyKey[]) => (path.length ? 'a budget takes "min" and "max"' : `metrics are ${METRIC_NAMES.join(', ')}`);
  return parseJsonFile(BUDGETS, text, file, hint) as Budgets;
}

export async function readBudgets(file: string): Promise<Budgets> {
  const text = await readFile(file, 'utf8').catch((e: NodeJS.ErrnoException) => {
    throw new LlmcError(`cannot read the budget file: ${e.code ?? e.message}`, file, 2);
  });
  return parseBudgets(text, file);
}

export interface BudgetResult {
  metric: Metric;
  bound: 'min' | 'max';
  limit: number;
  /** The measured figure; null when the metric cannot be measured for this artifact (`reason` says why). */
  value: number | null;
  ok: boolean;
  /** Why the metric was not measured: such a budget fails, it never passes. */
  reason?: string;
}

/** Every bound against the measured figures; a bound on a metric with a reason in `unmeasured` fails with that reason. */
export function judge(budgets: Budgets, measured: Partial<Record<Metric, number>>, unmeasured: Partial<Record<Metric, string>> = {}): BudgetResult[] {
  const out: BudgetResult[] = [];
  for (const metric of METRIC_NAMES) {
    const b = budgets[metric];
    if (!b) continue;
    const value = measured[metric];
    const reason = unmeasured[metric];
    for (const bound of ['min', 'max'] as const) {
      const limit = b[bound];
      if (limit === undefined) continue;
      if (value === undefined) {
        if (reason === undefined) throw new LlmcError(`internal: budget on ${metric}, which was not measured`);
        out.push({ metric, bound, limit, value: null, ok: false, reason });
      } else out.push({ metric, bound, limit, value, ok: bound === 'min' ? value >= limit : value <= limit });
    }
  }
  return out;
}

const fmt = (metric: Metric, v: number) => (metric === 'bytes' ? String(v) : Number(v.toPrecision(6)).toString());

/** One line for a failed budget: the figure and the limit, or why the figure could not be measured. */
export function failureLine(r: BudgetResult): string {
  if (r.value === null) return `budget failed: ${r.metric} (${r.bound} ${fmt(r.metric, r.limit)}) cannot be measured: ${r.reason}`;
  return `budget failed: ${r.metric} = ${fmt(r.metric, r.value)}, ${r.bound} ${fmt(r.metric, r.limit)}`;
}

/** The metrics that need the artifact run (every one but bytes). */
export const RUN_METRICS = METRIC_NAMES.filter((m) => m !== 'bytes');

/**
 * Why each budgeted metric cannot be measured for an artifact of `target` (empty: all can). Such a
 * budget fails the check with the reason (exit 1): CI never passes on a figure nobody measured.
 */
export function unmeasurable(budgets: Budgets, target: string): Partial<Record<Metric, string>> {
  if (evaluable(target)) return {};
  const reason = `llmc does not run ${target} artifacts (it runs ${evaluableTargets().join(', ')})`;
  return Object.fromEntries(RUN_METRICS.filter((m) => budgets[m]).map((m) => [m, reason]));
}

/**
 * Latency files (`--opt tree-search.latency=FILE`): step costs of a device the compiler does not run
 * on, e.g. from a profiler there or a paper's figures. Schema (docs/tree-search.md), times in ms:
 *   {
 *     "format": "llmc-latency/1",
 *     "device": "what it describes", "note": "where the numbers come from",
 *     "ctx": [256, 1024],                            context buckets, ascending
 *     "verify": {
 *       "n": [1, 2, 4, 8, 16, 32, 64],               tree sizes, ascending, from 1
 *       "ms": [[...], [...]]                         one row per ctx bucket, one entry per size
 *       — or, for a unit pair splitting every linear layer by columns (Ghidorah):
 *       "units": [{ "name": "gpu", "ms": [[...]], "contention": 1.05 }, { "name": "cpu", "ms": [[...]] }]
 *     },
 *     "draft": { "batch": [1, 2, 4], "ms": [[...], [...]] },   one draft forward over `batch` tokens
 *     "perNodeMs": 0, "perNnzMs": 0, "syncMs": 0.1             optional
 *   }
 * A size's time applies up to it from the previous size (a step function), so the tabulated sizes
 * are the step edges. Times must not fall as the tree (or draft batch) grows: a file where they do
 * is refused. Light: imported by the descriptor's check, before any work.
 */
import { readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { UsageError, summarize } from '../../src/core/errors.js';
import type { LatencyModel } from './cost.js';
import { parseJson } from '../../src/core/util/json.js';

export const LATENCY_FORMAT = 'llmc-latency/1';

type Json = Record<string, unknown>;

export function readLatencyFile(file: string): LatencyModel {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new UsageError(`latency file ${file}: cannot read it (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  const sha = createHash('sha256').update(text).digest('hex');
  let v: unknown;
  try {
    v = parseJson(text, undefined);
  } catch (e) {
    throw new UsageError(`latency file ${file}: ${(e as Error).message}`);
  }
  return parseLatency(v, file, sha);
}

export function parseLatency(v: unknown, file: string, sha256 = ''): LatencyModel {
  const bad = (msg: string): never => {
    throw new UsageError(`latency file ${file}: ${msg}`);
  };
  const obj = (x: unknown, what: string): Json => (typeof x === 'object' && x !== null && !Array.isArray(x) ? (x as Json) : bad(`${what} must be an object`));
  const nums = (x: unknown, what: string, min: number): number[] => {
    if (!Array.isArray(x) || !x.length || x.some((y) => typeof y !== 'number' || !Number.isFinite(y) || y < min)) bad(`${what} must be a non-empty array of numbers ≥ ${min}`);
    return x as number[];
  };
  const sizes = (x: unknown, what: string): number[] => {
    const a = nums(x, what, 1);
    if (a[0] !== 1 || a.some((y, i) => !Number.isInteger(y) || (i > 0 && y <= a[i - 1]))) bad(`${what} must be ascending integers starting at 1`);
    return a;
  };
  const o = obj(v, 'the file');
  if (o.format !== LATENCY_FORMAT) bad(`format must be "${LATENCY_FORMAT}", got ${summarize(o.format)}`);
  const ctx = nums(o.ctx, 'ctx', 1);
  if (ctx.some((c, i) => !Number.isInteger(c) || (i > 0 && c <= ctx[i - 1]))) bad('ctx must be ascending integers');
  const table = (x: unknown, cols: number[], what: string, along: string): number[][] => {
    if (!Array.isArray(x) || x.length !== ctx.length) bad(`${what} needs one row per ctx bucket (${ctx.length})`);
    return (x as unknown[]).map((row, b) => {
      const r = nums(row, `${what}[${b}]`, 0);
      if (r.length !== cols.length) bad(`${what}[${b}] has ${r.length} entries for ${cols.length} ${along}s`);
      for (let i = 1; i < r.length; i++) {
        if (r[i] < r[i - 1]) bad(`${what} at ctx ${ctx[b]} falls from ${r[i - 1]} ms (${along} ${cols[i - 1]}) to ${r[i]} ms (${along} ${cols[i]}); it must not decrease as the ${along} grows`);
      }
      return r;
    });
  };
  const verify = obj(o.verify, 'verify');
  const n = sizes(verify.n, 'verify.n');
  const draft = obj(o.draft, 'draft');
  const batch = sizes(draft.batch, 'draft.batch');
  const draftMs = table(draft.ms, batch, 'draft.ms', 'batch');
  const opt = (k: string) => (o[k] === undefined ? 0 : nums([o[k]], k, 0)[0]);
  let verifyMs: number[][];
  let units: LatencyModel['units'];
  if (verify.units !== undefined) {
    if (!Array.isArray(verify.units) || verify.units.length !== 2) bad('verify.units must list exactly two units');
    const us = (verify.units as unknown[]).map((u, i) => {
      const x = obj(u, `verify.units[${i}]`);
      if (typeof x.name !== 'string' || !x.name) bad(`verify.units[${i}].name must be a string`);
      const contention = x.contention === undefined ? 1 : nums([x.contention], `verify.units[${i}].contention`, 1)[0];
      return { name: x.name as string, verifyMs: table(x.ms, n, `verify.units[${i}].ms`, 'tree size'), contention };
    });
    units = [us[0], us[1]];
    verifyMs = us[0].verifyMs;
  } else verifyMs = table(verify.ms, n, 'verify.ms', 'tree size');
  return {
    source: `file ${file}${sha256 ? ` (sha256 ${sha256.slice(0, 16)})` : ''}`,
    device: typeof o.device === 'string' ? o.device : 'unnamed device',
    ctx,
    verifyN: n,
    verifyMs,
    draftBatch: batch,
    draftMs,
    perNodeMs: opt('perNodeMs'),
    perNnzMs: opt('perNnzMs'),
    ...(units ? { units, syncMs: opt('syncMs') } : {}),
  };
}

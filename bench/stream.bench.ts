/**
 * Layer-streamed passes at deployment sizes (src/exec/stream): each streamed measurement in a child
 * process of its own (bench/stream-child.ts under peak-rss.js) on the TinyLlama-1.1B shape (bf16) and
 * on llama-100M: wall time, peak RSS (VmHWM), the calibration activations carried between layers, time
 * per parameter (linear growth: the 1.1B/100M ratio), and a 7B projection from the 1.1B rate. Plus
 * one decoder layer of the 1.1B shape on onnxruntime against the TS runtime's interpreter, the
 * measurement the streaming executor's choice rests on.
 *
 * Measurements: quality-source (the evaluation's source logits on 2 × 512 held-out tokens),
 * importance (reorder's activation importance, 10 × 64: its default calibration), outliers (outliers'
 * linear profiles, 10 × 64), anchor-losses (reorder's anchor-layer losses, 10 × 64). The 1.1B checkpoint: $LLMC_BENCH_TINYLLAMA when set (an existing
 * directory of that shape), else generated once into the bench cache (2.2 GB). --quick: llama-100M only.
 * Standalone: `npx tsc -p tsconfig.bench.json && node dist/bench/stream.bench.js [--quick]`.
 */
import path from 'node:path';
import { cachedFixture, checkpointParameters, REPO_ROOT, round, runIfMain, runNodeWithPeakRss, type BenchSuite } from './harness.js';

const CHILD = path.join(REPO_ROOT, 'dist/bench/stream-child.js');
/** Llama-2-7B's parameter count, for the projection. */
const SEVEN_B = 6.74e9;

interface Point {
  what: string;
  sequences: number;
  length: number;
  wallS: number;
  peakRssMB: number;
  activationMB: number;
  nsPerParam: number;
  detail: Record<string, unknown>;
}

async function measure(dir: string, params: number, what: string, sequences: number, length: number): Promise<Point> {
  const r = await runNodeWithPeakRss(CHILD, [dir, what, String(sequences), String(length)]);
  if (r.code !== 0) throw new Error(`${what} on ${dir} failed: ${r.stderr.trim().split('\n').pop()}`);
  const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as { wallMs: number; activationBytes: number } & Record<string, unknown>;
  const { wallMs, activationBytes, ...detail } = out;
  const p: Point = {
    what,
    sequences,
    length,
    wallS: round(wallMs / 1000, 1),
    peakRssMB: Math.round(r.peakRssBytes / 1e6),
    activationMB: round(activationBytes / 1e6, 2),
    nsPerParam: round((wallMs * 1e6) / params, 2),
    detail: { ...detail, cpuS: round(r.cpuMs / 1000, 1) },
  };
  process.stderr.write(`stream: ${path.basename(dir)} ${what} ${sequences}×${length}: ${p.wallS} s, peak ${p.peakRssMB} MB, activations ${p.activationMB} MB\n`);
  return p;
}

const PASSES: [string, number, number][] = [
  ['quality-source', 2, 512],
  ['importance', 10, 64],
  ['outliers', 10, 64],
  ['anchor-losses', 10, 64],
];

export const suite: BenchSuite = {
  name: 'stream',
  description: 'layer-streamed passes (evaluation source, reorder importance, outlier profiles, anchor-layer losses) on the TinyLlama-1.1B shape and llama-100M: wall, peak RSS, activations, time per parameter, 7B projection',
  async run({ quick }) {
    const small = (await cachedFixture('llama-100M', { arch: 'llama', dtype: 'BF16', planted: false })).dir;
    const big = quick ? null : (process.env.LLMC_BENCH_TINYLLAMA ?? (await cachedFixture('tinyllama-1.1B', { arch: 'llama', dtype: 'BF16', shards: 3, planted: false })).dir);
    const out: Record<string, unknown> = {};
    const smallParams = await checkpointParameters(small);
    const smallPoints: Point[] = [];
    for (const [what, n, len] of PASSES) smallPoints.push(await measure(small, smallParams, what, n, len));
    out['llama-100M'] = { parameters: smallParams, passes: smallPoints };
    if (big) {
      const bigParams = await checkpointParameters(big);
      const bigPoints: Point[] = [];
      for (const [what, n, len] of PASSES) bigPoints.push(await measure(big, bigParams, what, n, len));
      const block = { ort: await measure(big, bigParams, 'block-ort', 1, 512), ts: await measure(big, bigParams, 'block-ts', 1, 512) };
      const growth = Object.fromEntries(bigPoints.map((p, i) => [p.what, round(p.nsPerParam / smallPoints[i].nsPerParam, 2)]));
      const projection = Object.fromEntries(bigPoints.map((p) => [p.what, { wallMin: round((p.nsPerParam * SEVEN_B) / 1e9 / 60, 1) }]));
      for (const [what, v] of Object.entries(projection)) process.stderr.write(`stream: 7B projection (${SEVEN_B / 1e9}B parameters at the 1.1B rate): ${what} ≈ ${v.wallMin} min\n`);
      out['tinyllama-1.1B'] = { parameters: bigParams, checkpoint: big, passes: bigPoints, perParamGrowthOver100M: growth, projection7B: projection, layer0: block };
    }
    return out;
  },
};

runIfMain(import.meta.url, suite);

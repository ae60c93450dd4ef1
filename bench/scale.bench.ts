/**
 * Every pass at deployment sizes, as a user runs it (`llmc compile`, built), on random-weight
 * checkpoints of ~100M and of TinyLlama-1.1B's shape (bench/scale-checkpoints.ts; the MoE pass on
 * MoE checkpoints of ~100M and ~0.9B). Per run: wall time; peak RSS as VmHWM of every process of the
 * tree (llmc and the children it forks, e.g. the evaluation's source logits), their sum (an upper bound
 * of the simultaneous peak) and the largest one, and the tree's RSS sampled every 0.5 s; the layer-
 * streamed calibration activations (and what spilled of them) as the executor reports them; time
 * per parameter; per pass the ratio of that between the sizes (1 = linear growth) and a 7B projection
 * from the larger size's rate. A pass llmc refuses at a size (one line, exit 1/2) is reported
 * `refused` with its message; one over its time limit `timeout` (30 min, recovery 60 min).
 *
 * Calibration from ../shared's calibration text (the fixtures' byte-level tokenizer reads it), but
 * tree-search's: its default, sampled from the model (layer-streamed above 1 GiB, src/exec/stream/decode.ts).
 * Env: LLMC_SCALE_PASSES=a,b (default all), LLMC_SCALE_SIZES=100M,1.1B (--quick: 100M),
 * LLMC_SCALE_OUT=file (each result appended as a JSON line as it lands; the summary also reads the
 * file's earlier lines, so sizes measured by separate runs give the growth and the projection).
 * Standalone: `npx tsc -p tsconfig.bench.json && node dist/bench/scale.bench.js [--quick]`.
 */
import { spawn } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { checkpointParameters, REPO_ROOT, round, runIfMain, type BenchSuite } from './harness.js';
import { scaleCheckpoint, type ScaleCheckpoint } from './scale-checkpoints.js';

const CLI = path.join(REPO_ROOT, 'bin/llmc.js');
const TEXT = path.resolve(REPO_ROOT, '../shared/models/trained/text/calibration.txt');
/** Llama-2-7B's parameter count and layers, for the projection (TinyLlama-1.1B has 22 layers). */
const SEVEN_B = 6.74e9;
const SEVEN_B_LAYERS = 32 / 22;
const MIN = 60_000;

interface PassRun {
  /** Which checkpoint family: dense, or MoE for expert-bits. */
  family: 'dense' | 'moe';
  /** compile arguments after the model (the bench adds -o, --cache-dir, --json). */
  args: (layers: number) => string[];
  limitMs: number;
  /** Another engineer's streaming of this pass is in flight: a refusal is expected until it lands. */
  owner?: string;
  /**
   * Time grows as parameters × layers, not parameters: reorder's anchor-layer losses run each skipped
   * layer's variant through every later layer (L²/2 layer runs). Its 7B projection scales by 32/22 layers.
   */
  perLayer?: boolean;
}

const calib = (pass: string) => ['--opt', `${pass}.calibText=${TEXT}`];

export const PASSES: Record<string, PassRun> = {
  'reorder-importance': { family: 'dense', args: () => ['--target', 'ts', '--quant', 'Q8_0', '--passes', 'reorder', '--levels', '0.5,1', '--opt', 'reorder.recover=none', '--opt', 'reorder.importance=activation', ...calib('reorder'), '--no-eval'], limitMs: 30 * MIN, perLayer: true },
  'reorder-recovery': { family: 'dense', args: () => ['--target', 'ts', '--quant', 'Q8_0', '--passes', 'reorder', '--levels', '0.5,1', '--opt', 'reorder.importance=activation', ...calib('reorder'), '--no-eval'], limitMs: 60 * MIN, owner: 'b32 (blockwise recovery)' },
  'outliers-qnn': { family: 'dense', args: () => ['--target', 'qnn', '--passes', 'outliers', ...calib('outliers'), '--no-eval'], limitMs: 30 * MIN },
  imatrix: { family: 'dense', args: () => ['--target', 'gguf', '--quant', 'Q8_0', '--passes', 'imatrix', ...calib('imatrix'), '--no-eval'], limitMs: 30 * MIN },
  'gguf-eval': { family: 'dense', args: () => ['--target', 'gguf', '--quant', 'Q4_K_M', '--eval-tokens', '1022'], limitMs: 30 * MIN },
  // block-local sensitivities at both sizes (the default where the model streams, i.e. at 0.9B; exact below): the same work, so the growth compares like with like
  'expert-bits': { family: 'moe', args: () => ['--target', 'gguf', '--passes', 'expert-bits', '--opt', 'expert-bits.budgetBpw=4.5', '--opt', 'expert-bits.measure=block', ...calib('expert-bits'), '--no-eval'], limitMs: 30 * MIN },
  'tree-search': {
    family: 'dense',
    // the draft: the model's first two layers (no second checkpoint); default calibration (sampled from the model, streamed above 1 GiB)
    args: (L) => ['--target', 'ts', '--quant', 'Q8_0', '--passes', 'tree-search', '--opt', `tree-search.draftSkip=${Array.from({ length: L - 2 }, (_, i) => 2 + i).join(',')}`, '--no-eval'],
    limitMs: 30 * MIN,
  },
  'chunk-partition': { family: 'dense', args: () => ['--target', 'cuda', '--passes', 'chunk-partition', '--no-eval'], limitMs: 30 * MIN, owner: 's30' },
};

const SIZES = { '100M': { dense: 'dense-100M', moe: 'moe-100M' }, '1.1B': { dense: 'dense-1.1B', moe: 'moe-1.1B' } } as const satisfies Record<string, Record<'dense' | 'moe', ScaleCheckpoint>>;
type Size = keyof typeof SIZES;

export interface Result {
  pass: string;
  size: Size;
  checkpoint: string;
  parameters: number;
  status: 'ok' | 'refused' | 'failed' | 'timeout';
  /** The one-line message of a refusal or failure. */
  message?: string;
  owner?: string;
  wallS: number;
  /** Σ VmHWM over the processes of the tree (upper bound of the simultaneous peak), and the largest. */
  peakRssMB: number;
  peakProcessMB: number;
  processes: number;
  sampledTreePeakMB: number;
  activationMB: number;
  spilledMB: number;
  nsPerParam: number;
  /** The machine's 1-minute load average at the start and the end of the run (wall times grow with it). */
  load: [number, number];
  /** CPU time (user + system) of every process of the tree, and per parameter: what the load does not inflate. */
  cpuS: number;
  cpuNsPerParam: number;
}

/** RSS (KiB) of `pid` and its descendants now, from /proc. */
function treeRssKiB(pid: number): number {
  const kids = new Map<number, number[]>();
  const rss = new Map<number, number>();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const st = readFileSync(`/proc/${d}/stat`, 'utf8');
      const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
      const ppid = Number(f[1]);
      kids.set(ppid, [...(kids.get(ppid) ?? []), Number(d)]);
      rss.set(Number(d), (Number(f[21]) * 4096) / 1024);
    } catch {
      /* gone */
    }
  }
  let sum = 0;
  const walk = (p: number) => {
    sum += rss.get(p) ?? 0;
    for (const k of kids.get(p) ?? []) walk(k);
  };
  walk(pid);
  return sum;
}

async function measure(pass: string, size: Size, layersOf: Map<string, number>): Promise<Result> {
  const p = PASSES[pass];
  const dir = await scaleCheckpoint(SIZES[size][p.family]);
  const params = await checkpointParameters(dir);
  if (!layersOf.has(dir)) {
    const ck = await openCheckpoint(dir);
    layersOf.set(dir, ck.spec.numLayers);
    await ck.close();
  }
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-scale-'));
  const rssDir = path.join(tmp, 'rss');
  const stats = path.join(tmp, 'stream-stats.jsonl');
  mkdirSync(rssDir);
  const out = path.join(tmp, p.args(0).includes('gguf') ? 'out.gguf' : 'out');
  const args = [CLI, 'compile', dir, ...p.args(layersOf.get(dir)!), '-o', out, '--cache-dir', path.join(tmp, 'cache'), '--json'];
  const hook = pathToFileURL(path.join(REPO_ROOT, 'dist/bench/tree-rss.js')).href;
  const load0 = os.loadavg()[0];
  const t0 = performance.now();
  const child = spawn(process.execPath, args, {
    cwd: REPO_ROOT,
    env: { ...process.env, NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import=${hook}`.trim(), LLMC_TREE_RSS_DIR: rssDir, LLMC_STREAM_STATS: stats },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stdout.on('data', () => {});
  child.stderr.on('data', (d) => (stderr += d));
  let sampled = 0;
  let timedOut = false;
  const sampler = setInterval(() => (sampled = Math.max(sampled, treeRssKiB(child.pid!))), 500);
  const limit = setTimeout(() => {
    timedOut = true;
    child.kill('SIGTERM');
  }, p.limitMs);
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  const wallMs = performance.now() - t0;
  clearInterval(sampler);
  clearTimeout(limit);
  const exits = readdirSync(rssDir).map((f) => JSON.parse(readFileSync(path.join(rssDir, f), 'utf8')) as { vmHwmKiB: number; cpuMs?: number });
  const hwm = exits.map((x) => x.vmHwmKiB);
  const cpuMs = exits.reduce((a, x) => a + (x.cpuMs ?? 0), 0);
  const lines = existsSync(stats) ? readFileSync(stats, 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as { activationBytes: number; spilledBytes: number }) : [];
  rmSync(tmp, { recursive: true, force: true });
  const last = stderr.trim().split('\n').pop() ?? '';
  const status: Result['status'] = timedOut ? 'timeout' : code === 0 ? 'ok' : (code === 1 || code === 2) && /^llmc: /.test(last) && !/internal error/.test(last) ? 'refused' : 'failed';
  const r: Result = {
    pass,
    size,
    checkpoint: SIZES[size][p.family],
    parameters: params,
    status,
    ...(status === 'ok' ? {} : { message: status === 'timeout' ? `over ${p.limitMs / MIN} min` : last.slice(0, 300) }),
    ...(p.owner ? { owner: p.owner } : {}),
    wallS: round(wallMs / 1000, 1),
    peakRssMB: Math.round((hwm.reduce((a, x) => a + x, 0) * 1.024) / 1000),
    peakProcessMB: Math.round((Math.max(0, ...hwm) * 1.024) / 1000),
    processes: hwm.length,
    sampledTreePeakMB: Math.round((sampled * 1.024) / 1000),
    activationMB: round(Math.max(0, ...lines.map((l) => l.activationBytes)) / 1e6, 2),
    spilledMB: round(Math.max(0, ...lines.map((l) => l.spilledBytes)) / 1e6, 2),
    nsPerParam: round((wallMs * 1e6) / params, 1),
    load: [round(load0, 1), round(os.loadavg()[0], 1)],
    cpuS: round(cpuMs / 1000, 1),
    cpuNsPerParam: round((cpuMs * 1e6) / params, 1),
  };
  process.stderr.write(`scale: ${pass} @ ${size}: ${status}${r.message ? ` (${r.message})` : ''}, ${r.wallS} s, peak ${r.peakRssMB} MB over ${r.processes} process(es) (sampled ${r.sampledTreePeakMB} MB), activations ${r.activationMB} MB, ${r.nsPerParam} ns/parameter, CPU ${r.cpuS} s (${r.cpuNsPerParam} ns/parameter), load ${r.load.join('→')}\n`);
  if (process.env.LLMC_SCALE_OUT) appendFileSync(process.env.LLMC_SCALE_OUT, JSON.stringify(r) + '\n');
  return r;
}

/** Per pass: time per parameter 1.1B over 100M, and the 7B projection from the larger size's rate. */
export function summarize(results: Result[]): Record<string, { perParamGrowth?: number; cpuPerParamGrowth?: number; projection7BMin?: number; projection7BCpuMin?: number; from?: Size }> {
  const out: Record<string, { perParamGrowth?: number; cpuPerParamGrowth?: number; projection7BMin?: number; projection7BCpuMin?: number; from?: Size }> = {};
  for (const pass of Object.keys(PASSES)) {
    const at = (s: Size) => results.find((r) => r.pass === pass && r.size === s && r.status === 'ok');
    const small = at('100M');
    const big = at('1.1B') ?? undefined;
    const rate = (big ?? small)?.nsPerParam;
    if (rate === undefined) continue;
    const cpuRate = (big ?? small)!.cpuNsPerParam;
    // a pass whose time grows with layers too: the 7B rate per parameter is 32/22 of the 1.1B one
    const k = PASSES[pass].perLayer && big ? SEVEN_B_LAYERS : 1;
    out[pass] = {
      ...(small && big ? { perParamGrowth: round(big.nsPerParam / small.nsPerParam, 2) } : {}),
      ...(small?.cpuNsPerParam && big?.cpuNsPerParam ? { cpuPerParamGrowth: round(big.cpuNsPerParam / small.cpuNsPerParam, 2) } : {}),
      projection7BMin: round((k * rate * SEVEN_B) / 1e9 / 60, 1),
      ...(cpuRate ? { projection7BCpuMin: round((k * cpuRate * SEVEN_B) / 1e9 / 60, 1) } : {}),
      from: big ? '1.1B' : '100M',
    };
  }
  return out;
}

export const suite: BenchSuite = {
  name: 'scale',
  description: 'every pass through llmc compile at ~100M and the TinyLlama-1.1B shape: wall, peak RSS of the process tree, streamed activations, time per parameter, 1.1B/100M growth, 7B projection; refusals reported',
  async run({ quick }) {
    if (!existsSync(TEXT)) throw new Error(`the scale suite calibrates on ${TEXT}, which is absent`);
    const passes = process.env.LLMC_SCALE_PASSES ? process.env.LLMC_SCALE_PASSES.split(',') : Object.keys(PASSES);
    for (const p of passes) if (!PASSES[p]) throw new Error(`unknown pass "${p}" (one of ${Object.keys(PASSES).join(', ')})`);
    const sizes = (process.env.LLMC_SCALE_SIZES ? process.env.LLMC_SCALE_SIZES.split(',') : quick ? ['100M'] : ['100M', '1.1B']) as Size[];
    const results: Result[] = [];
    const layers = new Map<string, number>();
    for (const size of sizes) for (const p of passes) results.push(await measure(p, size, layers));
    // LLMC_SCALE_OUT's earlier lines too (sizes measured by separate runs): the latest result per pass and size
    const earlier = process.env.LLMC_SCALE_OUT && existsSync(process.env.LLMC_SCALE_OUT) ? readFileSync(process.env.LLMC_SCALE_OUT, 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as Result) : [];
    const summary = summarize([...earlier, ...results].reverse().filter((r, i, all) => all.findIndex((x) => x.pass === r.pass && x.size === r.size) === i));
    for (const [p, s] of Object.entries(summary)) process.stderr.write(`scale: ${p}: growth per parameter 1.1B/100M ${s.perParamGrowth ?? 'n/a'} (CPU time ${s.cpuPerParamGrowth ?? 'n/a'}), 7B ≈ ${s.projection7BMin} min wall at this load, ${s.projection7BCpuMin ?? 'n/a'} CPU-min (at the ${s.from} rate)\n`);
    return { load: os.loadavg().map((x) => round(x, 1)), results, summary };
  },
};

runIfMain(import.meta.url, suite);

/**
 * Blockwise recovery's cost at deployment sizes, the recovery alone (no importance, no reorder: the
 * weights are random, so only time and memory mean anything): one uniform level at `--frac` of every
 * layer's KV groups and FFN neurons, trained on calibration-text windows with the pass's defaults
 * (or `--steps`, `--e2e`, `--data`). Prints one JSON line per finished block (wall, CPU, RSS, its
 * peak so far) and a summary: per-block CPU seconds, memory against one block's weights and the
 * activations the pass holds — so a run stopped after a few blocks still projects the whole pass
 * (time is linear in blocks: every block costs the same on a uniform model).
 *   node dist/bench/blockwise-scale.js <dense-100M | dense-1.1B | dir> [--frac 0.5] [--steps N] [--e2e N] [--data N] [--loss mse|norm|lens] [--blocks N]
 * `--blocks N` stops after N blocks' local training (a projection run).
 */
import path from 'node:path';
import { readFileSync } from 'node:fs';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import type { LevelLayer } from '../src/core/records/elastic.js';
import { calibrationSet, textFileSpec, trainingSet } from '../src/measure/calibration.js';
import { blockwiseRecoverLevels, blockwiseSettings } from '../passes/reorder/blockwise.js';
import { parseReorderOptions } from '../passes/reorder/options.js';
import { REPO_ROOT, round } from './harness.js';
import { scaleCheckpoint, SCALE_CHECKPOINTS, type ScaleCheckpoint } from './scale-checkpoints.js';

const TEXT = path.resolve(REPO_ROOT, '../shared/models/trained/text/calibration.txt');
const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const which = process.argv[2] ?? 'dense-100M';
const dir = (SCALE_CHECKPOINTS as readonly string[]).includes(which) ? await scaleCheckpoint(which as ScaleCheckpoint) : which;
const frac = Number(arg('--frac') ?? 0.5);
const stopAfter = Number(arg('--blocks') ?? Infinity);

/** Peak RSS of this process so far (VmHWM) and now (VmRSS), in MB. */
const rss = () => {
  const s = readFileSync('/proc/self/status', 'utf8');
  const kb = (k: string) => Number(new RegExp(`${k}:\\s+(\\d+)`).exec(s)?.[1] ?? 0) / 1024;
  return { rssMB: round(kb('VmRSS'), 0), peakMB: round(kb('VmHWM'), 0) };
};

const src = await openCheckpoint(dir);
const spec = src.spec;
const o = parseReorderOptions({ recover: 'blockwise', calibText: TEXT, ...(arg('--steps') ? { recoverSteps: arg('--steps')! } : {}), ...(arg('--e2e') ? { recoverEndToEnd: arg('--e2e')! } : {}), ...(arg('--data') ? { recoverData: arg('--data')! } : {}), ...(arg('--loss') ? { recoverLoss: arg('--loss')! } : {}) });
const calib = await calibrationSet(src, { source: await textFileSpec(TEXT), count: o.calibCount, length: o.calibLength, seed: o.seed, heldOut: o.heldOut });
const data = await trainingSet(src, calib, o.recover!.data, o.seed);
const { settings, blockwise } = blockwiseSettings(o.recover!);
const g = spec.numHeads / spec.numKvHeads;
const kv = Math.max(1, Math.round(spec.numKvHeads * frac));
const ffn = Math.max(1, Math.round(spec.intermediateSize * frac));
const layers: LevelLayer[] = Array.from({ length: spec.numLayers }, (_, layer) => ({ layer, anchor: false, kvGroups: kv, qHeadsPerGroup: g, ffn, heads: kv * g, params: 0 }));
const blockParams = 4 * spec.hiddenSize * spec.hiddenSize * (1 + 1 / g) / 2 + 3 * spec.hiddenSize * spec.intermediateSize;

const t0 = performance.now();
const cpu0 = process.cpuUsage();
const cpuS = () => {
  const u = process.cpuUsage(cpu0);
  return round((u.user + u.system) / 1e6, 1);
};
let ticks = 0;
let blocksDone = 0;
const perBlock: { block: number; wallS: number; cpuS: number; rssMB: number; peakMB: number }[] = [];
const progress = {
  start(label: string) {
    process.stderr.write(`${label}\n`);
  },
  tick(n = 1) {
    ticks += n;
    // The local pass ticks blockSteps per block and level (one level here).
    if (ticks >= (blocksDone + 1) * blockwise.blockSteps && blocksDone < spec.numLayers) {
      blocksDone++;
      const row = { block: blocksDone, wallS: round((performance.now() - t0) / 1000, 1), cpuS: cpuS(), ...rss() };
      perBlock.push(row);
      console.log(JSON.stringify(row));
      if (blocksDone >= stopAfter) {
        summary(false);
        process.exit(0);
      }
    }
  },
  done() {},
};

function summary(finished: boolean, extra: Record<string, unknown> = {}) {
  const d = perBlock.slice(1);
  const cpuPerBlock = d.length ? (d[d.length - 1].cpuS - perBlock[0].cpuS) / d.length : perBlock[0]?.cpuS ?? NaN;
  const wallPerBlock = d.length ? (d[d.length - 1].wallS - perBlock[0].wallS) / d.length : perBlock[0]?.wallS ?? NaN;
  console.log(
    JSON.stringify({
      checkpoint: which,
      layers: spec.numLayers,
      blockWeightsMB: round((blockParams * 4) / 1e6, 0),
      frac,
      settings: { loss: blockwise.loss, steps: blockwise.blockSteps, endToEnd: blockwise.endToEnd, data: data.seqs.length, batch: settings.batch, targets: settings.targets },
      finished,
      blocks: perBlock.length,
      wallS: round((performance.now() - t0) / 1000, 1),
      cpuS: cpuS(),
      cpuPerBlockS: round(cpuPerBlock, 1),
      wallPerBlockS: round(wallPerBlock, 1),
      localProjectionCpuS: round(cpuPerBlock * spec.numLayers, 0),
      ...rss(),
      ...extra,
    }),
  );
}

const r = await blockwiseRecoverLevels({ model: src, levels: [{ id: 'half', layers }], heldOut: calib.heldOut, training: { seqs: data.seqs, key: data.key, settings }, blockwise, progress });
const lv = r.levels.get('half')!;
summary(true, { activationMB: round(r.activationBytes / 1e6, 0), e2e: r.stats.get('half')?.endToEnd ?? null, before: lv.before.heldOutPpl, after: lv.after?.heldOutPpl ?? null });
await src.close();

/**
 * The quality scoreboard (docs/quality.md): `dense-28M` (../shared/models/trained) compiled to every
 * GGUF type and preset llmc writes, every ts format, cuda fp16/int8/int4 and the qnn artifact after
 * the outliers pass; each compiled by the CLI and measured by its own runtime (the runner `llmc check`
 * opens: llama.cpp for GGUF, the TS runtime, onnxruntime for cuda, llmc's simulation of the NPU's
 * integer pipeline for qnn) against the BF16 source on
 * onnxruntime (its logits computed once per window and kept on disk), with the statistics of
 * src/app/evaluate, over
 * the same windows of `text/heldout.txt`: size, bits per weight (artifact bits / source parameters),
 * PPL, ΔPPL, ratio, mean KL and its 99th percentile, same top token, each with its 95% interval.
 * Rows are sorted by KL, as llama.cpp's perplexity README sorts its scoreboard.
 *
 * A non-GGUF row is flagged when a GGUF type at no more bits per weight has a KL whose interval lies
 * wholly below the row's (llmc's GGUF types are byte-identical to ggml's: llama.cpp's own types).
 *
 * Tokens: 16,384 (2,048 with --quick; LLMC_BENCH_QUALITY_TOKENS overrides). LLMC_BENCH_QUALITY_ROWS
 * (e.g. gguf:Q4_K_M,ts:F16) runs a subset. Skipped, with the reason, without ../shared.
 * Standalone: `npx tsc -p tsconfig.bench.json && node dist/bench/quality.bench.js [--quick]`.
 */
import { execFile } from 'node:child_process';
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { heldOutSet } from '../src/app/evaluate/artifact.js';
import { compareModels, type LogitsFn, type QualityFigures } from '../src/app/evaluate/quality.js';
import type { ModelSource } from '../src/core/checkpoint/source.js';
import { Engine } from '../src/exec/engine/index.js';
import { locate } from '../src/app/artifact.js';
import { TARGETS } from '../backends/index.js';
import { REPO_ROOT, round, runIfMain, type BenchSuite } from './harness.js';

const run = promisify(execFile);
const MODEL = path.resolve(REPO_ROOT, '../shared/models/trained/dense-28M');
const TEXT = path.resolve(REPO_ROOT, '../shared/models/trained/text/heldout.txt');
const CALIB = path.resolve(REPO_ROOT, '../shared/models/trained/text/calibration.txt');
/** llama.cpp's importance matrix measured on the training split's calibration text (32 × 256 tokens). */
const IMATRIX_FLAGS = ['--opt', `imatrix.calibText=${CALIB}`, '--opt', 'imatrix.calib=32', '--opt', 'imatrix.calibLength=256'];
const LLMC = path.join(REPO_ROOT, 'bin/llmc.js');

interface RowSpec {
  target: string;
  format: string;
  passes?: string;
  /** Extra compile flags (the imatrix pass's calibration text). */
  flags?: string[];
}

const GGUF = ['F32', 'BF16', 'F16', 'Q8_0', 'Q6_K', 'Q5_K_M', 'Q5_K_S', 'Q5_K', 'Q5_1', 'Q5_0', 'Q4_K_M', 'Q4_K_S', 'Q4_K', 'IQ4_XS', 'IQ4_NL', 'Q4_1', 'Q4_0', 'Q3_K_L', 'Q3_K_M', 'Q3_K_S', 'Q3_K', 'Q2_K'];
const TS = ['F32', 'F16', 'Q8_0', 'Q6_K', 'Q5_0', 'Q4_K', 'Q4_0', 'Q3_K', 'Q2_K'];
const CUDA = ['fp16', 'int8', 'int4'];

/** Measured first (a run cut short still has the types people pick), the other GGUF types after. */
const GGUF_FIRST = ['F16', 'Q8_0', 'Q6_K', 'Q5_K_M', 'Q4_K_M', 'Q4_0', 'Q3_K_M', 'Q2_K'];

export const ROWS: RowSpec[] = [
  ...GGUF_FIRST.map((format) => ({ target: 'gguf', format })),
  ...['Q4_K_M', 'Q3_K_M', 'Q2_K', 'IQ4_XS'].map((format) => ({ target: 'gguf', format, passes: 'imatrix', flags: IMATRIX_FLAGS })),
  ...TS.map((format) => ({ target: 'ts', format })),
  ...CUDA.map((format) => ({ target: 'cuda', format })),
  { target: 'qnn', format: 'w8a8', passes: 'outliers' },
  ...GGUF.filter((f) => !GGUF_FIRST.includes(f)).map((format) => ({ target: 'gguf', format })),
];

type Ci = [number, number];
export interface Row {
  target: string;
  format: string;
  passes: string | null;
  executor: string;
  bytes: number;
  bitsPerWeight: number;
  ppl: number;
  pplCi: Ci;
  pplDelta: number;
  pplDeltaCi: Ci;
  pplRatio: number;
  pplRatioCi: Ci;
  kl: number;
  klCi: Ci;
  klP99: number;
  klP99Ci: Ci;
  topAgreement: number;
  topAgreementCi: Ci;
  compileSeconds: number;
  evalSeconds: number;
  /** Why this row loses to a GGUF type at no more bits (null: it does not). */
  defect: string | null;
}

const label = (r: { target: string; format: string; passes?: string | null }) => `${r.target} ${r.format}${r.passes ? ` (${r.passes})` : ''}`;

/** Non-GGUF rows whose KL interval lies wholly above that of a GGUF type at no more bits per weight. */
export function flagDefects(rows: Row[]): void {
  const gguf = rows.filter((r) => r.target === 'gguf');
  for (const r of rows) {
    if (r.target === 'gguf') continue;
    const better = gguf.filter((g) => g.bitsPerWeight <= r.bitsPerWeight * 1.01 && g.klCi[1] < r.klCi[0]).sort((a, b) => a.kl - b.kl)[0];
    r.defect = better ? `KL ${r.kl.toPrecision(3)} above gguf ${better.format}'s ${better.kl.toPrecision(3)} at ${better.bitsPerWeight.toFixed(2)} ≤ ${r.bitsPerWeight.toFixed(2)} bits/weight` : null;
  }
}

async function llmc(args: string[]): Promise<string> {
  const { stdout } = await run(process.execPath, [LLMC, ...args], { maxBuffer: 64 << 20, env: { ...process.env, NO_COLOR: '1' } });
  return stdout;
}

/**
 * The source's logits of each window, computed once on onnxruntime (as `llmc check` computes them)
 * and kept on disk, so each row costs only its own artifact's forward passes.
 */
async function sourceLogits(source: ModelSource, windows: number[][], dir: string): Promise<LogitsFn> {
  const engine = await Engine.open(source);
  try {
    for (const [i, w] of windows.entries()) {
      const l = await engine.logits(w);
      await fsp.writeFile(path.join(dir, `source-${i}.f32`), new Uint8Array(l.buffer, l.byteOffset, l.byteLength));
    }
  } finally {
    await engine.close();
  }
  const index = new Map(windows.map((w, i) => [w.join(), i]));
  return async (ids) => {
    const b = await fsp.readFile(path.join(dir, `source-${index.get(ids.join())}.f32`));
    return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
  };
}

/** Compile one row (the CLI, as a user would), then run the artifact on its own runtime against the cached source logits. */
async function measureRow(spec: RowSpec, work: string, windows: number[][], reference: LogitsFn, V: number, params: number): Promise<Row> {
  const out = path.join(work, `${spec.target}-${spec.format}${spec.target === 'gguf' ? '.gguf' : ''}`);
  const t0 = performance.now();
  await llmc(['compile', MODEL, '--target', spec.target, '--quant', spec.format, ...(spec.passes ? ['--passes', spec.passes] : []), ...(spec.flags ?? []), '-o', out, '--no-eval', '--json', '--cache-dir', path.join(work, 'cache')]);
  const t1 = performance.now();
  const artifact = await locate(out);
  if (artifact.kind !== 'artifact') throw new Error(`${out}: no manifest`);
  const runner = await TARGETS.find((t) => t.name === spec.target)!.open!(artifact, {});
  let f: QualityFigures;
  try {
    f = await compareModels(reference, runner.logits!, windows, V);
  } finally {
    await runner.close();
  }
  const t2 = performance.now();
  // the model's bytes: imatrix.gguf is a side file (what it was quantized with), not loaded to run
  const bytes = artifact.manifest.files.filter((x) => x.path !== 'imatrix.gguf').reduce((a, x) => a + x.size, 0);
  await fsp.rm(out, { recursive: true, force: true });
  return {
    target: spec.target,
    format: spec.format,
    passes: spec.passes ?? null,
    executor: runner.engine,
    bytes,
    bitsPerWeight: round((bytes * 8) / params, 3),
    ppl: f.candidatePpl,
    pplCi: f.ci95.candidatePpl,
    pplDelta: f.pplDelta,
    pplDeltaCi: f.ci95.pplDelta,
    pplRatio: f.pplRatio,
    pplRatioCi: f.ci95.pplRatio,
    kl: f.kl,
    klCi: f.ci95.kl,
    klP99: f.klP99,
    klP99Ci: f.ci95.klP99,
    topAgreement: f.greedyAgreement,
    topAgreementCi: f.ci95.greedyAgreement,
    compileSeconds: round((t1 - t0) / 1000, 1),
    evalSeconds: round((t2 - t1) / 1000, 1),
    defect: null,
  };
}

export const suite: BenchSuite = {
  name: 'quality',
  description: 'quality scoreboard: dense-28M on heldout.txt for every GGUF type/preset, ts format, cuda fp16/int8/int4 and qnn (outliers): size, bits/weight, PPL, ΔPPL, KL (mean, p99), same top token with 95% intervals, each on its own runtime',
  async run({ quick }) {
    if (!existsSync(MODEL) || !existsSync(TEXT)) return { skipped: `needs ${MODEL} and ${TEXT} (../shared)` };
    const tokens = Number(process.env.LLMC_BENCH_QUALITY_TOKENS ?? (quick ? 2048 : 16384));
    const only = process.env.LLMC_BENCH_QUALITY_ROWS?.split(',').map((s) => s.trim());
    const rows = ROWS.filter((r) => !only || only.includes(`${r.target}:${r.format}`));
    const work = path.join(os.tmpdir(), `llmc-bench-quality-${process.pid}`);
    await fsp.mkdir(work, { recursive: true });
    try {
      // The windows, tokenized once (the same ids for every row): spread evenly over heldout.txt.
      const source = await openCheckpoint(MODEL);
      const held = await heldOutSet(source, { text: TEXT, tokens });
      const params = source.tensors.reduce((a, t) => a + t.shape.reduce((x, y) => x * y, 1), 0);
      const sourceBytes = source.files.reduce((a, f) => a + f.size, 0);
      const V = source.spec.vocabSize;
      const reference = await sourceLogits(source, held.sequences, work);
      await source.close();
      const measured: Row[] = [];
      const failed: { row: string; error: string }[] = [];
      for (const spec of rows) {
        process.stderr.write(`quality: ${label(spec)} ...\n`);
        try {
          measured.push(await measureRow(spec, work, held.sequences, reference, V, params));
          const r = measured[measured.length - 1];
          // LLMC_BENCH_QUALITY_PARTIAL=FILE: the rows so far, after each one (a long run can be read while it goes).
          if (process.env.LLMC_BENCH_QUALITY_PARTIAL) await fsp.writeFile(process.env.LLMC_BENCH_QUALITY_PARTIAL, JSON.stringify({ tokens: held.tokens, rows: measured }, null, 1));
          process.stderr.write(`  ${r.bitsPerWeight.toFixed(2)} bpw, PPL ${r.ppl.toFixed(4)}, KL ${r.kl.toFixed(6)}, top ${(100 * r.topAgreement).toFixed(2)}% (${r.compileSeconds} + ${r.evalSeconds} s)\n`);
        } catch (e) {
          const err = e as { stderr?: string; message?: string };
          failed.push({ row: label(spec), error: (err.stderr || err.message || String(e)).trim().split('\n').slice(-1)[0] });
          process.stderr.write(`  failed: ${failed[failed.length - 1].error}\n`);
        }
      }
      flagDefects(measured);
      measured.sort((a, b) => a.kl - b.kl);
      const sourcePpl = measured.length ? measured[0].ppl - measured[0].pplDelta : null;
      return {
        model: 'dense-28M',
        params,
        sourceBytes,
        text: 'heldout.txt (../shared/models/trained/text)',
        tokens: held.tokens,
        windows: held.sequences.length,
        windowLength: held.length,
        sourcePpl,
        rows: measured,
        failed,
        defects: measured.filter((r) => r.defect).map((r) => `${label(r)}: ${r.defect}`),
        table: markdownTable(measured),
      };
    } finally {
      await fsp.rm(work, { recursive: true, force: true });
    }
  },
};

const pm = (v: number, ci: Ci, d: number) => `${v.toFixed(d)} ± ${((ci[1] - ci[0]) / 2).toFixed(d)}`;

/** The rows in the layout of llama.cpp's perplexity README scoreboard (± half the 95% interval). */
export function markdownTable(rows: Row[]): string {
  const lines = [
    '| Artifact | Runtime | Size [MiB] | Bits/weight | PPL | ΔPPL | KLD | KLD p99 | Same top p |',
    '|---|---|---:|---:|---|---|---|---|---|',
  ];
  for (const r of rows) {
    lines.push(
      `| ${label(r)} | ${r.executor} | ${(r.bytes / 2 ** 20).toFixed(2)} | ${r.bitsPerWeight.toFixed(2)} | ${pm(r.ppl, r.pplCi, 4)} | ${pm(r.pplDelta, r.pplDeltaCi, 4)} | ${pm(r.kl, r.klCi, 6)} | ${pm(r.klP99, r.klP99Ci, 4)} | ${pm(100 * r.topAgreement, [100 * r.topAgreementCi[0], 100 * r.topAgreementCi[1]], 2)} % |`,
    );
  }
  return lines.join('\n');
}

runIfMain(import.meta.url, suite);

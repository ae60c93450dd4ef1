/**
 * Pass `chunk-partition` (docs/chunk-partition.md):
 * - scheduling: prefill makespan of in-order dispatch, the paper's heuristic (both variants), the
 *   improved schedule (local search + branch and bound, seeded by the better of the two) and the lower
 *   bound, on a Qwen1.5-1.8B-shaped instance (the real partition of a 24-layer Qwen2 graph; costs at
 *   c = 256 with the NPU's static work ≈ 2× the CPU's, attention growing with the chunk index) for
 *   N = 1..8, with the NPU's bubble rate and the time each method takes;
 * - speed: prefill tokens/s of chunked prefill on the TS runtime (in order, several c) against
 *   whole-prompt prefill on the 30M fixture, same process, and the logits' agreement.
 * Standalone: `npx tsc -p tsconfig.json && node dist/bench/chunks.bench.js [--quick]`.
 */
import { normalizeConfig } from '../src/core/arch/spec.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { improve } from '../src/core/chunks/improve.js';
import { DEFAULT_DEVICE, partitionGraph, templateOf, type SubgraphKind } from '../src/core/chunks/partition.js';
import { bubbleRate, buildProblem, heuristic, inOrder, lowerBound, plainOverlap, serialMakespan, stagger } from '../src/core/chunks/schedule.js';
import { buildModel } from '../src/core/ir/build.js';
import { ChunkedPrefill } from '../src/exec/runtime/chunked.js';
import { modelFromTensors } from '../src/exec/runtime/memory.js';
import { execFileSync } from 'node:child_process';
import { existsSync, promises as fsp } from 'node:fs';
import path from 'node:path';
import { compile } from '../src/app/compile/compile.js';
import { silentProgress } from '../src/core/util/progress.js';
import { BENCH_CACHE, cachedFixture, repeat, REPO_ROOT, round, runIfMain, type BenchSuite } from './harness.js';

/** ms per subgraph at c = 256 (SPEC §1.7: 315 ms of NPU work per 256-token chunk, ≈ 2× the CPU's); attention: ms + perChunk·(i+1). */
const QWEN_COSTS: Record<SubgraphKind, { ms: number; perChunk: number }> = {
  embed: { ms: 0.3, perChunk: 0 },
  qkv: { ms: 3.3, perChunk: 0 },
  attention: { ms: 2, perChunk: 4.5 },
  mlp: { ms: 9.8, perChunk: 0 },
  shadow: { ms: 0.5, perChunk: 0 },
  head: { ms: 5, perChunk: 0 },
};

function qwenTemplate() {
  const spec = normalizeConfig(
    { model_type: 'qwen2', architectures: ['Qwen2ForCausalLM'], hidden_size: 2048, intermediate_size: 5504, num_hidden_layers: 24, num_attention_heads: 16, num_key_value_heads: 16, vocab_size: 151936, max_position_embeddings: 32768, rms_norm_eps: 1e-6, rope_theta: 1e6, tie_word_embeddings: false },
    'Qwen1.5-1.8B (shape)',
  );
  const p = partitionGraph(buildModel(spec));
  return { p, template: templateOf(p, (k) => DEFAULT_DEVICE[k]) };
}

function scheduling(quick: boolean) {
  const { p, template } = qwenTemplate();
  const rows = [];
  for (let N = 1; N <= 8; N++) {
    const cost = (headEveryChunk: boolean) => (i: number, j: number) => {
      const kind = p.subgraphs[j].kind;
      if (kind === 'head' && !headEveryChunk && i < N - 1) return 0;
      const k = QWEN_COSTS[kind];
      return k.ms + k.perChunk * (i + 1);
    };
    // A prefill for decoding runs the head on the last chunk only (the runners do).
    const problem = buildProblem(template, N, cost(false));
    const io = inOrder(problem);
    const ioHeadEvery = inOrder(buildProblem(template, N, cost(true)));
    const st = stagger(problem);
    const po = plainOverlap(problem);
    const t0 = performance.now();
    const hAll = heuristic(problem, 'all');
    const heuristicMs = performance.now() - t0;
    const hOpp = heuristic(problem, 'opposite');
    const seed = [io, po, hAll, hOpp].reduce((a, b) => (b.makespan < a.makespan ? b : a));
    const t1 = performance.now();
    const best = improve(problem, seed, { seed: N, evaluations: quick ? 500 : 4000, nodes: quick ? 5000 : 40000 });
    const improveMs = performance.now() - t1;
    const lb = lowerBound(problem);
    const npu = template.nodes.findIndex((n) => n.device === 'NPU');
    const npuProc = problem.procOf[npu];
    rows.push({
      N,
      tasks: N * problem.M,
      serial: round(serialMakespan(problem), 2),
      // in order: each processor takes its tasks in (chunk, subgraph) order as their inputs arrive
      inOrder: round(io.makespan, 2),
      // plain overlap: a greedy executor, each free processor starts the task that became ready first
      plainOverlap: round(po.makespan, 2),
      heuristicVsPlainOverlap: round(hAll.makespan / po.makespan, 4),
      improvedVsPlainOverlap: round(best.schedule.makespan / po.makespan, 4),
      // the same with the head run for every chunk (what earlier figures compared against: serial here)
      inOrderHeadEveryChunk: round(ioHeadEvery.makespan, 2),
      // the released code's 2-chunk stagger (lag 4, barrier per step)
      stagger2: round(st.makespan, 2),
      heuristicVsStagger2: round(hAll.makespan / st.makespan, 4),
      heuristicAll: round(hAll.makespan, 2),
      heuristicOpposite: round(hOpp.makespan, 2),
      improved: round(best.schedule.makespan, 2),
      lowerBound: round(lb.bound, 2),
      optimal: best.optimal || best.schedule.makespan <= lb.bound + 1e-9,
      heuristicVsInOrder: round(hAll.makespan / io.makespan, 4),
      improvedVsInOrder: round(best.schedule.makespan / io.makespan, 4),
      heuristicGap: round(hAll.makespan / lb.bound, 4),
      improvedGap: round(best.schedule.makespan / lb.bound, 4),
      npuBubble: { inOrder: round(bubbleRate(problem, io, npuProc), 4), plainOverlap: round(bubbleRate(problem, po, npuProc), 4), heuristic: round(bubbleRate(problem, hAll, npuProc), 4), improved: round(bubbleRate(problem, best.schedule, npuProc), 4) },
      ms: { heuristic: round(heuristicMs, 3), improve: round(improveMs, 1) },
    });
  }
  return { instance: `Qwen1.5-1.8B shape: 24 layers, ${p.subgraphs.length} subgraphs per chunk, c = 256`, costs: QWEN_COSTS, rows };
}

/**
 * What sharing saves, measured as a run's peak memory (VmHWM of a child process, bench/chunk-rss.ts):
 * a 30M-parameter cuda fp16 artifact with chunk graphs for c = 32, a prompt of N·32 tokens prefilled
 * through the shipped graphs (static once) against one graph set per chunk (N sets resident) and
 * against onnx/model.onnx over the whole prompt. The file-size figure the compile notes is beside it.
 */
async function peakMemory(quick: boolean) {
  const fx = await cachedFixture('llama-30M', { arch: 'llama', tokenizer: 'none', planted: false });
  const out = path.join(BENCH_CACHE, 'llama-30M-cuda-chunks');
  const c = 32;
  if (!existsSync(path.join(out, 'llmc-manifest.json'))) {
    const costs = path.join(BENCH_CACHE, 'chunk-costs-32.json');
    await fsp.writeFile(costs, JSON.stringify({ format: 'llmc-chunk-costs/1', device: 'bench', chunks: [{ c, subgraphs: { embed: { device: 'CPU', ms: 0.1 }, qkv: { device: 'NPU', ms: 1 }, attention: { device: 'CPU', ms: 0.5, msPerChunk: 0.3 }, mlp: { device: 'NPU', ms: 2 }, head: { device: 'CPU', ms: 1 } } }] }));
    const src = await openCheckpoint(fx.dir);
    try {
      await compile({ source: src, target: 'cuda', outDir: out, passes: ['chunk-partition'], opts: { 'chunk-partition.chunk': String(c), 'chunk-partition.nMax': '4', 'chunk-partition.costs': costs }, tensorTypes: [], progress: silentProgress, note: () => {} });
    } finally {
      await src.close();
    }
  }
  const manifest = JSON.parse(await fsp.readFile(path.join(out, 'llmc-manifest.json'), 'utf8'));
  const fileRows = (manifest.targetInfo.chunks as { c: number; memory: { rows: { N: number; saved: number }[] } }[])[0].memory.rows;
  const script = path.join(REPO_ROOT, 'dist/bench/chunk-rss.js');
  const run = (P: number, mode: string) => JSON.parse(execFileSync(process.execPath, [script, out, String(c), String(P), mode], { encoding: 'utf8' })) as { vmHwmKiB: number; lastLogit: number };
  const MB = (k: number) => round((k * 1024) / 1e6, 1);
  const rows = [];
  for (const N of quick ? [4] : [2, 4]) {
    const P = N * c;
    const [shared, naive, whole] = [run(P, 'shared'), run(P, 'naive'), run(P, 'whole')];
    rows.push({
      N,
      P,
      peakMB: { shared: MB(shared.vmHwmKiB), oneSetPerChunk: MB(naive.vmHwmKiB), wholePrompt: MB(whole.vmHwmKiB) },
      savedMeasured: round(1 - shared.vmHwmKiB / naive.vmHwmKiB, 4),
      savedByFileSizes: round(fileRows.find((r) => r.N === N)!.saved, 4),
      sameLastLogit: shared.lastLogit === naive.lastLogit,
    });
  }
  return { model: 'llama-30M fixture, cuda fp16, c = 32 (onnxruntime CPU)', rows };
}

async function prefillSpeed(quick: boolean) {
  const fx = await cachedFixture('llama-30M', { arch: 'llama', tokenizer: 'none', planted: false });
  const ck = await openCheckpoint(fx.dir);
  try {
    const model = await modelFromTensors(ck);
    const p = partitionGraph(model.graph);
    const M = p.subgraphs.length;
    const P = quick ? 128 : 512;
    const reps = quick ? 2 : 5;
    const ids = Array.from({ length: P }, (_, t) => (t * 31 + 7) % model.spec.vocabSize);
    const whole = await repeat(reps, () => model.forward(ids, model.newCache(), { lastOnly: true }));
    const ref = model.forward(ids, model.newCache(), { lastOnly: true });
    const rows = [];
    for (const c of quick ? [32, 128] : [32, 64, 128, 256]) {
      const prefill = new ChunkedPrefill(model, { c, subgraphs: p.subgraphs, order: (N) => Int32Array.from({ length: N * M }, (_, t) => t) });
      const t = await repeat(reps, () => prefill.prefill(ids, model.newCache(), 'last'));
      const got = prefill.prefill(ids, model.newCache(), 'last');
      let err = 0;
      let scale = 0;
      for (let v = 0; v < ref.length; v++) {
        err = Math.max(err, Math.abs(got[v] - ref[v]));
        scale = Math.max(scale, Math.abs(ref[v]));
      }
      rows.push({ c, chunks: Math.ceil(P / c), tokensPerSecond: round(P / (t.median / 1000), 1), vsWhole: round(whole.median / t.median, 3), lastLogitsRelErr: Number((err / scale).toExponential(2)) });
    }
    return { model: 'llama-30M fixture (f32, TS runtime, one thread)', promptTokens: P, reps, whole: { tokensPerSecond: round(P / (whole.median / 1000), 1), medianMs: round(whole.median, 1) }, chunked: rows };
  } finally {
    await ck.close();
  }
}

export const suite: BenchSuite = {
  name: 'chunks',
  description: 'chunk-partition: in-order / heuristic / improved makespan vs lower bound on a Qwen1.5-1.8B-shaped instance (N = 1..8); chunked vs whole-prompt prefill tokens/s on the 30M fixture',
  async run({ quick }) {
    return { scheduling: scheduling(quick), prefill: await prefillSpeed(quick), peakMemory: await peakMemory(quick) };
  },
};

runIfMain(import.meta.url, suite);

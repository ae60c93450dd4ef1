/**
 * `--target cuda`: the ONNX decoder directory, checked by onnxruntime-node running every graph it
 * writes: fp32 reproduces stories260K's reference ids (float64 reference, an independent
 * implementation); fp16 / int8 / int4 agree with fp32 where the top-2 gap allows (margins fixed in
 * advance, not measured); each int4 encoding computes exactly the weights it stores, dequantized here
 * from the file by the ONNX / com.microsoft formulas; every architecture agrees with the engine; bad
 * input is one line and leaves nothing behind. transformers.js and the levels have their own files.
 */
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_ARCHS, generateFixture } from '../fixtures/generate.js';
import { compile } from '../src/app/compile/compile.js';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { transformSource, type ModelSource } from '../src/core/checkpoint/source.js';
import { buildModel } from '../src/core/ir/build.js';
import { silentProgress } from '../src/core/util/progress.js';
import { OnnxDecoder } from '../src/exec/engine/decoder-dir.js';
import { Engine } from '../src/exec/engine/index.js';
import { lowerDecoder } from '../src/exec/onnx/decoder.js';
import { writeOnnx } from '../src/exec/onnx/external.js';
import { onnx, type NodeProto } from '../src/exec/onnx/proto.js';
import { llmcInProcess } from './cli.js';

const ROOT = path.resolve(__dirname, '..');
const MODEL = path.join(ROOT, 'fixtures/models/stories260K');
let tmp: string;
let src: Checkpoint;
let ref: number[];

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-cuda-'));
  src = await openCheckpoint(MODEL);
  ref = JSON.parse(await fsp.readFile(path.join(MODEL, 'reference.json'), 'utf8')).greedy_ids;
});
afterAll(async () => {
  await src?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

async function compileCuda(name: string, quant: string, opts: Record<string, string> = {}, tensorTypes: { pattern: RegExp; type: string }[] = [], source: ModelSource = src) {
  const outDir = path.join(tmp, name);
  const manifest = await compile({ source, target: 'cuda', outDir, passes: [], quant, opts, tensorTypes, progress: silentProgress, note: () => {} });
  return { dir: outDir, manifest };
}

async function decoderLogits(dir: string, ids: number[]): Promise<Float32Array> {
  const d = await OnnxDecoder.open(path.join(dir, 'onnx/model.onnx'));
  try {
    return await d.logits(ids);
  } finally {
    await d.close();
  }
}

const relErr = (a: Float32Array, b: Float32Array) => {
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i] - b[i]) ** 2;
    den += b[i] ** 2;
  }
  return Math.sqrt(num / den);
};

const argmax = (r: Float32Array) => r.indexOf(Math.max(...r));

/**
 * Teacher-forced along `seq`: at every step where the fp32 top-2 gap is at least `margin` (fixed in
 * advance per format), the other graph's argmax must be fp32's. Returns how many steps were checked.
 */
function agreeWhereGapAllows(base: Float32Array, other: Float32Array, V: number, margin: number): { checked: number; disagree: number[] } {
  const disagree: number[] = [];
  let checked = 0;
  for (let t = 0; t < base.length / V; t++) {
    const r = base.subarray(t * V, (t + 1) * V);
    const sorted = Float32Array.from(r).sort().reverse();
    if (sorted[0] - sorted[1] < margin) continue;
    checked++;
    if (argmax(other.subarray(t * V, (t + 1) * V)) !== argmax(r)) disagree.push(t);
  }
  return { checked, disagree };
}

/** exp(mean NLL) of each next token of `seq` under logits [T, V]. */
function perplexity(logits: Float32Array, seq: number[], V: number): number {
  let nll = 0;
  for (let t = 0; t + 1 < seq.length; t++) {
    const row = logits.subarray(t * V, (t + 1) * V);
    const max = Math.max(...row);
    let sum = 0;
    for (const x of row) sum += Math.exp(x - max);
    nll += max + Math.log(sum) - row[seq[t + 1]];
  }
  return Math.exp(nll / (seq.length - 1));
}

describe('cuda target: fp32 and fp16', () => {
  it('fp32 reproduces the reference greedy ids on onnxruntime, and through llmc run', async () => {
    const { dir, manifest } = await compileCuda('fp32', 'fp32');
    expect(manifest.files.map((f) => f.path)).toEqual(['build-engine.sh', 'config.json', 'genai_config.json', 'generation_config.json', 'onnx/model.onnx']);
    const d = await OnnxDecoder.open(path.join(dir, 'onnx/model.onnx'));
    try {
      expect(await d.generate([1], { maxTokens: ref.length, stopIds: [] })).toEqual(ref);
      // The Optimum convention, GQA kept: 4 KV heads of 8 query heads in the cache.
      const past = d.session.inputMetadata.find((m) => m.name === 'past_key_values.0.key')!;
      expect(past.isTensor && past.shape).toEqual(['batch_size', 4, 'past_sequence_length', 8]);
      expect(d.session.inputNames.slice(0, 3)).toEqual(['input_ids', 'attention_mask', 'position_ids']);
      expect(d.session.outputNames.slice(0, 3)).toEqual(['logits', 'present.0.key', 'present.0.value']);
    } finally {
      await d.close();
    }
    const run = await llmcInProcess('run', dir, '--prompt-ids', '1', '-n', String(ref.length), '--json');
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout).generated_ids).toEqual(ref);
    // Streamed without --json: the same ids on one line.
    expect((await llmcInProcess('run', dir, '--prompt-ids', '1', '-n', String(ref.length))).stdout).toBe(`${ref.join(' ')}\n`);
  });

  it('left padding: a padded batch row gives the unpadded row\'s logits (explicit mask, position_ids)', async () => {
    const dir = path.join(tmp, 'fp32');
    const session = await ort.InferenceSession.create(path.join(dir, 'onnx/model.onnx'));
    try {
      const ids = [1, 461, 461, 401];
      const feed = (rows: number[][], masks: number[][], pos: number[][]) => {
        const B = rows.length;
        const T = rows[0].length;
        const t = (x: number[][]) => new ort.Tensor('int64', BigInt64Array.from(x.flat(), BigInt), [B, T]);
        const f: Record<string, ort.Tensor> = { input_ids: t(rows), attention_mask: t(masks), position_ids: t(pos) };
        for (let l = 0; l < 5; l++) for (const k of ['key', 'value']) f[`past_key_values.${l}.${k}`] = new ort.Tensor('float32', new Float32Array(0), [B, 4, 0, 8]);
        return f;
      };
      const alone = await session.run(feed([ids], [[1, 1, 1, 1]], [[0, 1, 2, 3]]));
      const batch = await session.run(feed([[0, 0, ...ids.slice(0, 2)], ids], [[0, 0, 1, 1], [1, 1, 1, 1]], [[1, 1, 0, 1], [0, 1, 2, 3]]));
      const V = 512;
      const a = alone.logits.data as Float32Array;
      const b = batch.logits.data as Float32Array;
      // Row 1 = the unpadded sequence; row 0's last position = ids[0..1] alone at position 1.
      expect(relErr(b.subarray(4 * V, 8 * V), a)).toBeLessThan(1e-6);
      expect(relErr(b.subarray(3 * V, 4 * V), a.subarray(V, 2 * V))).toBeLessThan(1e-5);
    } finally {
      await session.release();
    }
  });

  it('is deterministic, and external data gives the same graph', async () => {
    const a = await compileCuda('fp16-a', 'fp16');
    const b = await compileCuda('fp16-b', 'fp16');
    expect(a.manifest.files.map((f) => f.sha256)).toEqual(b.manifest.files.map((f) => f.sha256));
    const ext = await compileCuda('fp16-ext', 'fp16', { 'cuda.externalData': 'true' });
    expect(ext.manifest.files.map((f) => f.path)).toContain('onnx/model.onnx_data');
    const config = JSON.parse(await fsp.readFile(path.join(ext.dir, 'config.json'), 'utf8'));
    expect(config['transformers.js_config'].use_external_data_format).toEqual({ 'model.onnx': 1 });
    const seq = [1, ...ref];
    expect(Buffer.from((await decoderLogits(ext.dir, seq)).buffer).equals(Buffer.from((await decoderLogits(a.dir, seq)).buffer))).toBe(true);
  });
});

describe('cuda target: quantized formats', () => {
  const seq = () => [1, ...ref];

  it('fp16 and int8 agree with fp32 where the reference\'s top-2 gap allows; errors and perplexity reported', async () => {
    const V = 512;
    const base = await decoderLogits(path.join(tmp, 'fp32'), seq());
    const int8 = await compileCuda('int8', 'int8');
    const report: Record<string, unknown> = {};
    // Margins fixed in advance: fp16's logits move by ~0.1, int8's (per channel on a 64-wide model) by ~2.
    for (const [name, dir, margin] of [['fp16', path.join(tmp, 'fp16-a'), 0.25], ['int8', int8.dir, 2.0]] as const) {
      const l = await decoderLogits(dir, seq());
      const { checked, disagree } = agreeWhereGapAllows(base, l, V, margin);
      expect(disagree).toEqual([]);
      expect(checked).toBeGreaterThanOrEqual(8);
      report[name] = { checked, relErr: relErr(l, base), pplDelta: perplexity(l, seq(), V) - perplexity(base, seq(), V) };
    }
    expect((report.fp16 as { relErr: number }).relErr).toBeLessThan(0.01);
    console.log('stories260K vs fp32 (teacher-forced on the reference ids):', JSON.stringify(report));
  });

  it('int4 in both encodings, symmetric and with zero points, agrees with fp32 where the gap allows', async () => {
    // stories260K is too narrow for int4 (64-wide rows: two blocks; its logits move by ~8, more than any
    // top-2 gap), so this runs on a 256-wide fixture whose tied head makes greedy decoding confident.
    const fx = await generateFixture(path.join(tmp, 'fx-int4'), {
      arch: 'llama',
      seed: 5,
      tokenizer: 'none',
      planted: false,
      tieEmbeddings: true,
      dims: { hiddenSize: 256, intermediateSize: 704, numLayers: 2, numHeads: 8, numKvHeads: 2, vocabSize: 1024 },
    });
    const fsrc = await openCheckpoint(fx.dir);
    try {
      const V = 1024;
      const base = await compileCuda('fx-fp32', 'fp32', {}, [], fsrc);
      const d = await OnnxDecoder.open(path.join(base.dir, 'onnx/model.onnx'));
      const prompt = [1, 17, 300, 45];
      const ids = [...prompt, ...(await d.generate(prompt, { maxTokens: 24, stopIds: [] }))];
      const fp32 = await d.logits(ids);
      await d.close();
      const gen = (l: Float32Array) => l.subarray((prompt.length - 1) * V);
      const report: Record<string, unknown> = {};
      for (const [name, opts] of [
        ['MatMulNBits', {}],
        ['MatMulNBits-zp', { 'cuda.zeroPoints': 'true' }],
        ['DequantizeLinear', { 'cuda.int4': 'dequantizelinear' }],
        ['DequantizeLinear-zp', { 'cuda.int4': 'dequantizelinear', 'cuda.zeroPoints': 'true' }],
      ] as const) {
        const q = await compileCuda(`fx-int4-${name}`, 'int4', opts, [], fsrc);
        expect(q.manifest.targetInfo.opset).toBe(name.startsWith('Deq') ? 21 : 17);
        const l = await decoderLogits(q.dir, ids);
        const { checked, disagree } = agreeWhereGapAllows(gen(fp32), gen(l), V, 2.5);
        expect(disagree).toEqual([]);
        expect(checked).toBeGreaterThanOrEqual(8);
        report[name] = { checked, relErr: relErr(l, fp32), pplDelta: perplexity(l, ids, V) - perplexity(fp32, ids, V) };
      }
      console.log('int4 vs fp32 (256-wide fixture):', JSON.stringify(report));
    } finally {
      await fsrc.close();
    }
  });

  it('each int4 encoding gives the logits of its stored weights dequantized to fp32 (1e-5)', async () => {
    const fsrc = await openCheckpoint(path.join(tmp, 'fx-int4'));
    try {
      const ids = [1, 17, 300, 45, 9, 9, 1000];
      for (const opts of [{}, { 'cuda.zeroPoints': 'true' }, { 'cuda.int4': 'dequantizelinear' }, { 'cuda.int4': 'dequantizelinear', 'cuda.zeroPoints': 'true' }] as Record<string, string>[]) {
        const name = `deq-${Object.values(opts).join('-') || 'nb'}`;
        const q = await compileCuda(name, 'int4', { ...opts, 'cuda.embeddings': 'fp32', 'cuda.lmHead': 'fp32' }, [], fsrc);
        const { max, weights } = await againstDequantized(fsrc, q.dir, ids, name);
        expect(weights.size).toBe(fsrc.spec.numLayers * 7);
        expect(max).toBeLessThan(1e-5);
      }
    } finally {
      await fsrc.close();
    }
  });
});

/** Max relative difference of an int4 graph's logits from an fp32 graph of the weights it stores (returned too), dequantized from the file. */
async function againstDequantized(source: ModelSource, dir: string, ids: number[], label: string): Promise<{ max: number; weights: Map<string, Float32Array> }> {
  const weights = dequantizedWeights(await fsp.readFile(path.join(dir, 'onnx/model.onnx')));
  const deq = transformSource(source, { label: 'dequantized', paramsHash: label, rewrite: (n, data) => weights.get(n) ?? data });
  const g = lowerDecoder(deq, buildModel(deq.spec), { compute: 'fp32', format: () => ({ kind: 'fp32' }) });
  const file = path.join(tmp, `${label}-f32.onnx`);
  await writeOnnx(file, g, null);
  const d = await OnnxDecoder.open(file);
  const expected = await d.logits(ids);
  await d.close();
  const got = await decoderLogits(dir, ids);
  let max = 0;
  for (let i = 0; i < got.length; i++) max = Math.max(max, Math.abs(got[i] - expected[i]) / (1 + Math.abs(expected[i])));
  return { max, weights };
}

describe('cuda int4 on rows no block divides (stories260K: FFN 172, hidden 64)', () => {
  it('pads the last block as onnxruntime does: int4 / b64 / b128 in both encodings compile in one go, compute their stored weights (1e-5), agree with each other, and stay within the documented bound of fp32', async () => {
    const seq = [1, ...ref];
    const base = await decoderLogits(path.join(tmp, 'fp32'), seq);
    const report: Record<string, unknown> = {};
    for (const quant of ['int4', 'int4-b64', 'int4-b128']) {
      let first: Float32Array | null = null;
      for (const [enc, opts] of [
        ['MatMulNBits', {}],
        ['DequantizeLinear', { 'cuda.int4': 'dequantizelinear' }],
        ['MatMulNBits-zp', { 'cuda.zeroPoints': 'true' }],
        ['DequantizeLinear-zp', { 'cuda.int4': 'dequantizelinear', 'cuda.zeroPoints': 'true' }],
      ] as const) {
        const label = `s260-${quant}-${enc}`;
        const notes: string[] = [];
        const manifest = await compile({ source: src, target: 'cuda', outDir: path.join(tmp, label), passes: [], quant, opts: { ...opts, 'cuda.embeddings': 'fp32', 'cuda.lmHead': 'fp32' }, progress: silentProgress, note: (m) => notes.push(m) });
        expect(manifest.files.map((f) => f.path)).toContain('onnx/model.onnx');
        expect((await againstDequantized(src, path.join(tmp, label), seq.slice(0, 16), label)).max).toBeLessThan(1e-5);
        const l = await decoderLogits(path.join(tmp, label), seq);
        // Symmetric: both encodings store the same codes and scales, so the same logits.
        if (!enc.endsWith('-zp')) {
          if (first) expect(relErr(l, first)).toBeLessThan(1e-5);
          else first = l;
        }
        const e = relErr(l, base);
        // docs/cuda.md: stories260K is too narrow for int4 (a 64-wide row is one to two blocks); its
        // logits move by 0.60–0.85 of their own size (measured), bounded here at 0.9.
        expect(e).toBeLessThan(0.9);
        report[`${quant} ${enc}`] = { relErr: +e.toFixed(4), pplDelta: +(perplexity(l, seq, 512) - perplexity(base, seq, 512)).toFixed(2) };
      }
    }
    console.log('stories260K int4 vs fp32 (teacher-forced on the reference ids):', JSON.stringify(report));
  }, 120_000);
});

/**
 * The fp32 weights an int4 graph's MatMulNBits / DequantizeLinear nodes compute with, recovered from
 * the file by the formulas of their specs (HF [out, in] layout), keyed by Hugging Face name.
 */
function dequantizedWeights(bytes: Uint8Array): Map<string, Float32Array> {
  const model = onnx.ModelProto.decode(bytes);
  const init = new Map(model.graph!.initializer!.map((t) => [t.name!, t]));
  const raw = (name: string) => {
    const t = init.get(name)!;
    return { bytes: t.rawData!, dims: t.dims!.map(Number), dataType: t.dataType! };
  };
  const floats = (name: string) => {
    const r = raw(name);
    return new Float32Array(r.bytes.buffer.slice(r.bytes.byteOffset, r.bytes.byteOffset + r.bytes.byteLength));
  };
  const nibble = (b: Uint8Array, i: number) => (i % 2 === 0 ? b[i >> 1] & 15 : b[i >> 1] >> 4);
  const attrs = (n: NodeProto) => Object.fromEntries(n.attribute!.map((a) => [a.name!, Number(a.i)]));
  const out = new Map<string, Float32Array>();
  for (const n of model.graph!.node!) {
    if (n.opType === 'MatMulNBits') {
      // com.microsoft MatMulNBits: B[n, k/bs, bs/2] nibbles low first; w = (q − zp) · scale[n·blocks + j], zp 8 by default.
      const { K, N, block_size: bs } = attrs(n);
      const [, B, S, Z] = n.input!;
      const b = raw(B).bytes;
      const s = floats(S);
      const zp = Z ? raw(Z).bytes : null;
      // k_blocks = ceil(K / bs): a row's last block is padded (its codes past K are the zero point's).
      const nb = Math.ceil(K / bs);
      expect(raw(B).dims).toEqual([N, nb, bs / 2]);
      const w = new Float32Array(N * K);
      for (let r = 0; r < N; r++) {
        for (let c = 0; c < nb * bs; c++) {
          const j = Math.floor(c / bs);
          const z = zp ? nibble(zp, r * Math.ceil(nb / 2) * 2 + j) : 8;
          if (c >= K) expect(nibble(b, r * nb * bs + c), 'a padded code stands for 0').toBe(z);
          else w[r * K + c] = (nibble(b, r * nb * bs + c) - z) * s[r * nb + j];
        }
      }
      out.set(B.replace(/\.MatMulNBits\.B$/, ''), w);
    } else if (n.opType === 'DequantizeLinear' && n.attribute!.some((a) => a.name === 'block_size')) {
      // ONNX DequantizeLinear-21, blocked: y[i, j] = (x[i, j] − zp[blk]) · scale[blk] along `axis`.
      const { axis, block_size: bs } = attrs(n);
      const [X, S, Z] = n.input!;
      const x = raw(X);
      const s = floats(S);
      const zp = Z ? raw(Z).bytes : null;
      const [R, C] = x.dims;
      const signed = x.dataType === 22;
      const y = new Float32Array(R * C);
      for (let i = 0; i < R; i++) {
        for (let j = 0; j < C; j++) {
          // Scales have ceil(D / bs) blocks along the axis: the last one may be partial.
          const si = axis === 0 ? Math.floor(i / bs) * C + j : i * Math.ceil(C / bs) + Math.floor(j / bs);
          let q = nibble(x.bytes, i * C + j);
          if (signed && q >= 8) q -= 16;
          y[i * C + j] = (q - (zp ? nibble(zp, si) : 0)) * s[si];
        }
      }
      // [in, out] (axis 0, named `<w>^T.int4`) back to the HF [out, in] layout.
      const name = X.replace(/(\^T)?\.int4$/, '');
      if (axis === 0) {
        const t = new Float32Array(R * C);
        for (let i = 0; i < R; i++) for (let j = 0; j < C; j++) t[j * R + i] = y[i * C + j];
        out.set(name, t);
      } else out.set(name, y);
    }
  }
  return out;
}

describe('cuda target: every architecture', () => {
  it('fp32 decoder graphs give the engine\'s logits; fp16 ones run and stay close', async () => {
    for (const arch of FIXTURE_ARCHS) {
      const fx = await generateFixture(path.join(tmp, `arch-${arch}`), { arch, seed: 2, tokenizer: 'none' });
      const s = await openCheckpoint(fx.dir);
      try {
        const ids = [1, 5, 9, 200, 3, 77, 12];
        const e = await Engine.open(s);
        const expected = await e.logits(ids);
        await e.close();
        const f32 = await compileCuda(`arch-${arch}-fp32`, 'fp32', {}, [], s);
        expect(relErr(await decoderLogits(f32.dir, ids), expected)).toBeLessThan(1e-5);
        const f16 = await compileCuda(`arch-${arch}-fp16`, 'fp16', {}, [], s);
        expect(relErr(await decoderLogits(f16.dir, ids), expected)).toBeLessThan(0.02);
      } finally {
        await s.close();
      }
    }
  });
});

describe('cuda target: f16 / bf16 checkpoints', () => {
  it('fp16 weights from stored f16 / bf16 bits equal the float32 route byte for byte', async () => {
    for (const dtype of ['F16', 'BF16'] as const) {
      const fx = await generateFixture(path.join(tmp, `st-${dtype}`), { arch: 'qwen2', seed: 4, tokenizer: 'none', dtype });
      const s = await openCheckpoint(fx.dir);
      try {
        // A value rewrite hides the stored layout: every tensor then goes through readF32.
        const viaF32 = transformSource(s, { label: 'identity', paramsHash: 'id', rewrite: (_, d) => d });
        const a = await compileCuda(`st-${dtype}-bits`, 'fp16', {}, [], s);
        const b = await compileCuda(`st-${dtype}-f32`, 'fp16', {}, [], viaF32);
        // The same initializers (the graphs' doc strings name their different sources).
        const inits = async (dir: string) => onnx.ModelProto.decode(await fsp.readFile(path.join(dir, 'onnx/model.onnx'))).graph!.initializer!.map((t) => [t.name, t.dims!.join('x'), Buffer.from(t.rawData ?? []).toString('base64')].join(':'));
        const [x, y] = [await inits(a.dir), await inits(b.dir)];
        expect(x.length).toBeGreaterThan(10);
        expect(x).toEqual(y);
      } finally {
        await s.close();
      }
    }
  });
});

describe('cuda target: bad input', () => {
  it('a --quant the target does not take: one line, nothing written', async () => {
    const out = path.join(tmp, 'bad');
    const q = await llmcInProcess('compile', MODEL, '--target', 'cuda', '--quant', 'Q4_0', '-o', out);
    expect(q.code).toBe(2);
    expect(q.stderr.trim().split('\n')).toHaveLength(1);
    expect(q.stderr).toMatch(/unknown quant type "Q4_0" for target cuda; valid: fp32, fp16, int8, int4/);
    expect(existsSync(out)).toBe(false);
    const list = await llmcInProcess('list');
    expect(list.stdout).toMatch(/cuda: fp32, fp16, int8, int4, int4-b64, int4-b128 \(default: fp16\)/);
    expect(list.stdout).toContain('--opt cuda.int4: ');
    const opt = await llmcInProcess('compile', MODEL, '--target', 'cuda', '--opt', 'cuda.int4=nf4', '-o', out);
    expect(opt.code).toBe(2);
    expect(opt.stderr).toMatch(/cuda\.int4 must be one of matmulnbits, dequantizelinear/);
    expect(existsSync(out)).toBe(false);
  });

  it('a model over 2 GB without external data: one line, exit 1, nothing left behind', async () => {
    // A real checkpoint (1.15 GB of f16, a sparse file) that is 2.3 GB as an fp32 graph.
    const dir = path.join(tmp, 'huge');
    await fsp.mkdir(dir);
    const D = 4096;
    const V = 140_000;
    const config = { architectures: ['LlamaForCausalLM'], model_type: 'llama', hidden_size: D, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 32, num_key_value_heads: 8, vocab_size: V, max_position_embeddings: 64, rms_norm_eps: 1e-5, tie_word_embeddings: true };
    await fsp.writeFile(path.join(dir, 'config.json'), JSON.stringify(config));
    const shapes: Record<string, number[]> = {
      'model.embed_tokens.weight': [V, D],
      'model.layers.0.input_layernorm.weight': [D],
      'model.layers.0.self_attn.q_proj.weight': [D, D],
      'model.layers.0.self_attn.k_proj.weight': [1024, D],
      'model.layers.0.self_attn.v_proj.weight': [1024, D],
      'model.layers.0.self_attn.o_proj.weight': [D, D],
      'model.layers.0.post_attention_layernorm.weight': [D],
      'model.layers.0.mlp.gate_proj.weight': [64, D],
      'model.layers.0.mlp.up_proj.weight': [64, D],
      'model.layers.0.mlp.down_proj.weight': [D, 64],
      'model.norm.weight': [D],
    };
    const header: Record<string, unknown> = {};
    let at = 0;
    for (const [name, shape] of Object.entries(shapes)) {
      const n = 2 * shape.reduce((a, b) => a * b, 1);
      header[name] = { dtype: 'F16', shape, data_offsets: [at, at + n] };
      at += n;
    }
    let json = Buffer.from(JSON.stringify(header));
    json = Buffer.concat([json, Buffer.alloc((8 - (json.length % 8)) % 8, 0x20)]);
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(json.length));
    const file = path.join(dir, 'model.safetensors');
    await fsp.writeFile(file, Buffer.concat([len, json]));
    await fsp.truncate(file, 8 + json.length + at);
    const out = path.join(tmp, 'huge-out');
    // In process: the refusal comes before any weight is read (the driver's background hash of the
    // source may still be reading the sparse file; a child process would wait for it to finish).
    const res = await llmcInProcess('compile', dir, '--target', 'cuda', '--quant', 'fp32', '--opt', 'cuda.externalData=false', '-o', out);
    expect(res.code).toBe(2);
    expect(res.stderr.trim().split('\n')).toHaveLength(1);
    expect(res.stderr).toMatch(/above protobuf's 2 GiB limit: use --opt cuda\.externalData=auto \(or true\)/);
    expect(existsSync(out)).toBe(false);
  });
});

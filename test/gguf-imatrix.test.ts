/**
 * llama.cpp's importance matrix, end to end against llama.cpp itself: `llmc compile --imatrix auto`
 * writes imatrix.gguf; llama.cpp's own loader (common_imatrix_load from the libllama-common shipped
 * inside node-llama-cpp) reads it, and llama_model_quantize quantizes llmc's F32 GGUF with it as
 * llama-quantize --imatrix does (the shim repeats tools/quantize/quantize.cpp: sums / count, the four
 * quantize.imatrix.* keys). llmc's direct compile must give the same metadata, tensor types and
 * bytes, with `--imatrix auto` and with `--imatrix FILE`. The sums of layer 0's q/k/v input are
 * checked against a float64 RMSNorm of the embeddings of the calibration ids. Skipped (with a note)
 * where g++ or the libraries are not available.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { gguf } from '@huggingface/gguf';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { chooseTensorType, LLAMA_FTYPES, parseQuant } from '../backends/gguf/presets.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { Rng } from '../src/core/util/rng.js';
import { llmcInProcess } from './cli.js';
import { ggufContents } from './gguf-helpers.js';
import { LLAMA_BINS } from './native.js';

const BINS = LLAMA_BINS;
const LIB = fs.existsSync(BINS) ? fs.readdirSync(BINS).find((f) => /^libllama\.v[\d.]+\.so$/.test(f)) : undefined;
const COMMON = path.join(BINS, 'libllama-common.so');
const hasGxx = (() => {
  try {
    execFileSync('g++', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();
const AVAILABLE = LIB !== undefined && fs.existsSync(COMMON) && hasGxx;
if (!AVAILABLE) console.warn(`gguf-imatrix: skipped (needs g++, libllama and libllama-common in ${BINS})`);

/**
 * Our own shim: llama.cpp is called, not copied. argv: libllama libcommon in.gguf out.gguf ftype imatrix.gguf.
 * The structs are llama.h's / common/imatrix-loader.h's declarations (their ABI), nothing else.
 */
const SHIM = String.raw`
#include <dlfcn.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>
struct common_imatrix_entry { std::vector<float> sums; std::vector<int64_t> counts; };
struct common_imatrix {
  std::map<std::string, common_imatrix_entry> entries; std::vector<std::string> datasets;
  int32_t chunk_count = 0; int32_t chunk_size = 0; bool is_legacy = false; bool has_metadata = false;
};
struct imat_data { const char *name; const float *data; size_t size; };
struct kv_override { int tag; char key[128]; union { int64_t val_i64; double val_f64; bool val_bool; char val_str[128]; }; };
struct qparams {
  int32_t nthread; int32_t ftype; int32_t output_tensor_type; int32_t token_embedding_type;
  bool allow_requantize, quantize_output_tensor, only_copy, pure, keep_split, dry_run;
  const imat_data *imatrix; const kv_override *kv_overrides; const void *tt_overrides; const int32_t *prune_layers;
  size_t max_buf_size; unsigned char rest[256];
};
int main(int argc, char **argv) {
  if (argc != 7) return 2;
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  void *hc = dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL);
  if (!h || !hc) { fprintf(stderr, "%s\n", dlerror()); return 3; }
  auto load = (bool (*)(const std::string &, common_imatrix &))dlsym(hc, "_Z19common_imatrix_loadRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEER14common_imatrix");
  auto defaults = (qparams (*)(void))dlsym(h, "llama_model_quantize_default_params");
  auto quantize = (uint32_t (*)(const char *, const char *, const qparams *))dlsym(h, "llama_model_quantize");
  auto backend_init = (void (*)(void))dlsym(h, "llama_backend_init");
  if (!load || !defaults || !quantize) return 4;
  common_imatrix m;
  if (!load(argv[6], m)) return 5;
  if (!m.is_legacy && !m.has_metadata) return 6;
  // tools/quantize/quantize.cpp load_imatrix (GGUF form): normalize by the per-matrix counts
  std::map<std::string, std::vector<float>> data;
  for (auto & [name, e] : m.entries) {
    auto & w = data[name]; w.resize(e.sums.size());
    int64_t nc = e.counts.size(), ne0 = e.sums.size() / nc;
    for (int64_t j = 0; j < nc; ++j) {
      float c = (float)e.counts[j];
      for (int64_t i = 0; i < ne0; ++i) w[j*ne0 + i] = c > 0.0f ? e.sums[j*ne0 + i] / c : 1;
    }
  }
  std::vector<imat_data> idata;
  for (auto & [name, w] : data) idata.push_back({name.c_str(), w.data(), w.size()});
  idata.push_back({nullptr, nullptr, 0});
  std::vector<kv_override> kvs;
  auto str = [&](const char *k, const std::string &v) { kv_override o{}; o.tag = 3; strcpy(o.key, k); strncpy(o.val_str, v.c_str(), 127); o.val_str[127] = 0; kvs.push_back(o); };
  auto num = [&](const char *k, int64_t v) { kv_override o{}; o.tag = 0; strcpy(o.key, k); o.val_i64 = v; kvs.push_back(o); };
  str("quantize.imatrix.file", argv[6]);
  if (!m.datasets.empty()) str("quantize.imatrix.dataset", m.datasets[0]);
  num("quantize.imatrix.entries_count", (int64_t)data.size());
  if (m.chunk_count > 0) num("quantize.imatrix.chunks_count", m.chunk_count);
  kvs.push_back(kv_override{});
  if (backend_init) backend_init();
  qparams p = defaults();
  p.nthread = 1; p.ftype = atoi(argv[5]); p.imatrix = idata.data(); p.kv_overrides = kvs.data();
  return quantize(argv[3], argv[4], &p) == 0 ? 0 : 7;
}
`;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'llmc-imatrix-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));
let shim = '';
let model = '';
let idsFile = '';
let calibIds: number[][] = [];

async function compile(out: string, ...args: string[]): Promise<string> {
  const r = await llmcInProcess('compile', model, '--target', 'gguf', '-o', out, '--cache-dir', path.join(tmp, 'cache'), ...args);
  expect(r.code, r.stderr).toBe(0);
  return out;
}

describe.skipIf(!AVAILABLE)("imatrix.gguf and quantizing with it equal llama.cpp's (libllama, libllama-common from node-llama-cpp)", () => {
  beforeAll(async () => {
    fs.writeFileSync(path.join(tmp, 'shim.cpp'), SHIM);
    shim = path.join(tmp, 'shim');
    execFileSync('g++', ['-std=c++17', '-O1', '-o', shim, path.join(tmp, 'shim.cpp'), '-ldl']);
    // Rows in whole 256-blocks. Small, as the weighted K-quant search costs ~3-8 µs a weight here
    // (1 layer: 0.35M weighted per compile); the first-eighth has_imatrix rules are checked below on 8.
    const dims = { hiddenSize: 256, intermediateSize: 256, numLayers: 1, numHeads: 4, numKvHeads: 1, vocabSize: 768 };
    model = (await generateFixture(path.join(tmp, 'llama'), { arch: 'llama', tokenizer: 'byte-level', dims })).dir;
    // Calibration ids given as JSON, so the float64 reference below sees the same tokens.
    const rng = new Rng(5);
    calibIds = Array.from({ length: 3 }, () => Array.from({ length: 32 }, () => rng.int(768)));
    idsFile = path.join(tmp, 'calib.json');
    fs.writeFileSync(idsFile, JSON.stringify(calibIds));
  }, 120_000);

  const calib = () => ['--opt', `imatrix.calibText=${idsFile}`, '--opt', 'imatrix.calib=3', '--opt', 'imatrix.calibLength=32'];

  test('imatrix.gguf: llama-imatrix\'s keys and tensors; layer 0\'s q/k/v sums equal a float64 RMSNorm of the embeddings', async () => {
    const out = await compile(path.join(tmp, 'auto-q4km'), '--quant', 'Q4_K_M', '--imatrix', 'auto', ...calib());
    const { metadata: md, tensorInfos } = await gguf(path.join(out, 'imatrix.gguf'), { allowLocalFile: true });
    const metadata = md as unknown as Record<string, unknown>;
    expect(metadata['general.type']).toBe('imatrix');
    expect(metadata['imatrix.datasets']).toEqual([idsFile]);
    expect(metadata['imatrix.chunk_count']).toBe(3);
    expect(metadata['imatrix.chunk_size']).toBe(32);
    // per weight name (sorted) its sums then its counts; every linear of the decoder layers, none of
    // token_embd / output (llama-imatrix without --process-output)
    const names = tensorInfos.map((t) => t.name);
    const bases = names.filter((n) => n.endsWith('.in_sum2')).map((n) => n.slice(0, -'.in_sum2'.length));
    expect(bases).toEqual([...bases].sort());
    expect(names).toEqual(bases.flatMap((b) => [`${b}.in_sum2`, `${b}.counts`]));
    expect(bases).toHaveLength(7);
    expect(names.some((n) => n.startsWith('output') || n.startsWith('token_embd'))).toBe(false);
    const c = await ggufContents(path.join(out, 'imatrix.gguf'));
    const f32 = (name: string) => {
      const t = c.tensors.find((x) => x.name === name)!;
      return new Float32Array(t.data.buffer.slice(t.data.byteOffset, t.data.byteOffset + 4 * t.shape.reduce((a, b) => a * b, 1)));
    };
    expect(c.tensors.find((t) => t.name === 'blk.0.attn_q.weight.in_sum2')!.shape).toEqual([256]);
    expect(Array.from(f32('blk.0.attn_q.weight.counts'))).toEqual([96]);
    expect(f32('blk.0.attn_k.weight.in_sum2')).toEqual(f32('blk.0.attn_q.weight.in_sum2'));
    expect(f32('blk.0.ffn_up.weight.in_sum2')).toEqual(f32('blk.0.ffn_gate.weight.in_sum2'));
    // float64 reference: Σ over tokens of (rmsnorm(embed(id)) · γ)²
    const ck = await openCheckpoint(model);
    try {
      const E = await ck.readF32('model.embed_tokens.weight');
      const g = await ck.readF32('model.layers.0.input_layernorm.weight');
      const D = 256;
      const eps = ck.spec.rmsNormEps;
      const ref = new Float64Array(D);
      for (const id of calibIds.flat()) {
        let ss = 0;
        for (let j = 0; j < D; j++) ss += E[id * D + j] ** 2;
        const r = 1 / Math.sqrt(ss / D + eps);
        for (let j = 0; j < D; j++) ref[j] += (E[id * D + j] * r * g[j]) ** 2;
      }
      const ours = f32('blk.0.attn_q.weight.in_sum2');
      let worst = 0;
      for (let j = 0; j < D; j++) worst = Math.max(worst, Math.abs(ours[j] - ref[j]) / ref[j]);
      expect(worst).toBeLessThan(1e-5);
    } finally {
      await ck.close();
    }
  }, 120_000);

  // Q4_K_M (Q4_K, Q6_K), IQ4_XS (IQ4_XS, Q5_K: gqa 4); every weighted quantizer's bytes: quant-ggml.test.ts.
  const PRESETS = ['Q4_K_M', 'IQ4_XS'] as const;

  test(`llama_model_quantize with llama.cpp's loader on llmc's imatrix.gguf == llmc --imatrix FILE (${PRESETS.join(', ')}) == --imatrix auto (Q4_K_M)`, async () => {
    const f32 = await compile(path.join(tmp, 'f32'), '--quant', 'F32');
    const mismatches: string[] = [];
    const auto = path.join(tmp, 'auto-q4km'); // the first test's artifact
    const imatrixFile = path.join(auto, 'imatrix.gguf');
    for (const preset of PRESETS) {
      const ref = path.join(tmp, `${preset}-llama.gguf`);
      execFileSync(shim, [path.join(BINS, LIB!), COMMON, path.join(f32, 'model.gguf'), ref, String(LLAMA_FTYPES[preset]), imatrixFile], {
        stdio: 'pipe', env: { ...process.env, LD_LIBRARY_PATH: BINS },
      });
      const file = await compile(path.join(tmp, `file-${preset}`), '--quant', preset, '--imatrix', imatrixFile);
      const [b, r] = await Promise.all([ggufContents(path.join(file, 'model.gguf')), ggufContents(ref)]);
      // quantize.imatrix.file: the path given, in both
      expect(b.meta, `${preset} metadata`).toEqual(r.meta);
      expect(b.tensors.map((t) => [t.name, t.type, t.shape]), `${preset} tensor infos`).toEqual(r.tensors.map((t) => [t.name, t.type, t.shape]));
      for (let i = 0; i < b.tensors.length; i++) {
        if (b.tensors[i].sha256 !== r.tensors[i].sha256) mismatches.push(`${preset} ${b.tensors[i].name} (${b.tensors[i].type})`);
      }
      if (preset === 'Q4_K_M') {
        // --imatrix auto wrote the same tensors (only quantize.imatrix.file names its own file)
        const a = await ggufContents(path.join(auto, 'model.gguf'));
        expect({ ...a.meta, 'quantize.imatrix.file': r.meta['quantize.imatrix.file'] }).toEqual(r.meta);
        expect(a.meta['quantize.imatrix.file']).toBe('"imatrix.gguf"');
        expect(a.tensors.map((t) => t.sha256)).toEqual(b.tensors.map((t) => t.sha256));
        // and the imatrix is not ignored: without it every weighted tensor differs
        const plain = await ggufContents(path.join(await compile(path.join(tmp, 'plain-q4km'), '--quant', preset), 'model.gguf'));
        expect(plain.tensors.filter((t, i) => t.sha256 !== a.tensors[i].sha256).length).toBe(7);
      }
    }
    expect(mismatches).toEqual([]);
  }, 300_000);

  test("llama.cpp's has_imatrix rules on 8 layers: Q4_0/Q5_0 keep a min on the first eighth of ffn_down, IQ4_* no longer widen it", () => {
    const m = { arch: 'llama', numLayers: 8, gqa: 4, numExperts: 0, hasOutput: true, is70B: false };
    const t = (name: string) => ({ name, ne: [256, 256] });
    const type = (q: string, name: string, hasImatrix: boolean) => chooseTensorType(parseQuant(q, 'F16'), [], t(name), { ...m, hasImatrix }).type;
    expect([type('Q4_0', 'blk.0.ffn_down.weight', true), type('Q4_0', 'blk.1.ffn_down.weight', true), type('Q4_0', 'blk.0.ffn_down.weight', false)]).toEqual(['Q4_1', 'Q4_0', 'Q4_0']);
    expect(type('Q5_0', 'blk.0.ffn_down.weight', true)).toBe('Q5_1');
    expect([type('IQ4_XS', 'blk.0.ffn_down.weight', false), type('IQ4_XS', 'blk.0.ffn_down.weight', true), type('IQ4_NL', 'blk.0.attn_v.weight', true)]).toEqual(['Q5_K', 'IQ4_XS', 'Q5_K']);
  });

  test('refusals: --imatrix on another target, a file that is not an imatrix, one of another model', async () => {
    const ts = await llmcInProcess('compile', model, '--target', 'ts', '--imatrix', 'auto', '-o', path.join(tmp, 'ts'));
    expect(ts.code).toBe(2);
    expect(ts.stderr).toMatch(/pass imatrix weighs ggml's quantizers, which target ts does not run/);
    const tsFile = await llmcInProcess('compile', model, '--target', 'ts', '--imatrix', idsFile, '-o', path.join(tmp, 'ts2'));
    expect(tsFile.code).toBe(2);
    const notImatrix = path.join(tmp, 'f32', 'model.gguf');
    const r = await llmcInProcess('compile', model, '--target', 'gguf', '--quant', 'Q4_K_M', '--imatrix', notImatrix, '-o', path.join(tmp, 'bad1'));
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/missing imatrix metadata/);
    expect(fs.existsSync(path.join(tmp, 'bad1'))).toBe(false);
    // an imatrix of another shape (stories260K's) for this model
    const stories = await llmcInProcess('compile', path.resolve(__dirname, '../fixtures/models/stories260K'), '--target', 'gguf', '--quant', 'Q4_0', '--imatrix', 'auto', '--opt', 'imatrix.calib=2', '--opt', 'imatrix.calibLength=16', '-o', path.join(tmp, 'stories'), '--cache-dir', path.join(tmp, 'cache'));
    expect(stories.code, stories.stderr).toBe(0);
    const other = await llmcInProcess('compile', model, '--target', 'gguf', '--quant', 'Q4_0', '--imatrix', path.join(tmp, 'stories', 'imatrix.gguf'), '-o', path.join(tmp, 'bad2'));
    expect(other.code).toBe(1);
    expect(other.stderr).toMatch(/imatrix size 64 is different from tensor size 256 for blk\.0\.attn_q\.weight/);
    const both = await llmcInProcess('compile', model, '--target', 'gguf', '--quant', 'Q4_0', '--passes', 'imatrix', '--imatrix', path.join(tmp, 'stories', 'imatrix.gguf'), '-o', path.join(tmp, 'bad3'));
    expect(both.code).toBe(2);
  }, 120_000);
});

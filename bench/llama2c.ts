/**
 * The C decode baseline: Karpathy's llama2.c `run.c` (gcc -O2, one thread) on the same weights.
 * llmc does not carry run.c: point LLAMA2C_RUN_C at a checkout's run.c
 * (`git clone https://github.com/karpathy/llama2.c`; LLAMA2C_RUN_C=$PWD/llama2.c/run.c). The bench
 * writes the checkpoint in llama2.c's own format (below), builds bench/c/llama2c-decode.c around
 * run.c with gcc and runs it; without gcc or run.c it returns the reason it was skipped.
 */
import { execFile } from 'node:child_process';
import { existsSync, promises as fsp } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { REPO_ROOT } from './harness.js';

const run = promisify(execFile);

/**
 * llama2.c's legacy (version 0) checkpoint: seven int32 (dim, hidden_dim, n_layers, n_heads,
 * n_kv_heads, vocab_size — negative when the classifier is not tied —, seq_len), then f32 arrays in
 * its order. q/k rows go back from Hugging Face's half-split rotary layout to llama2.c's interleaved
 * pairs (the inverse of the permutation HF's conversion applies).
 */
export async function writeLlama2c(modelDir: string, out: string): Promise<void> {
  const ck = await openCheckpoint(modelDir);
  try {
    const s = ck.spec;
    if (s.modelType !== 'llama' || s.moe) throw new Error(`llama2.c runs dense llama models; ${modelDir} is ${s.modelType}`);
    const hd = s.headDim;
    const L = s.numLayers;
    const tied = !ck.tensors.some((t) => t.name === 'lm_head.weight');
    const header = new Int32Array([s.hiddenSize, s.intermediateSize, L, s.numHeads, s.numKvHeads, tied ? s.vocabSize : -s.vocabSize, s.maxPositions]);
    const parts: Uint8Array[] = [new Uint8Array(header.buffer)];
    const push = (a: Float32Array) => parts.push(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
    const interleave = (w: Float32Array, heads: number, cols: number) => {
      const o = new Float32Array(w.length);
      for (let h = 0; h < heads; h++) {
        for (let i = 0; i < hd / 2; i++) {
          for (let j = 0; j < 2; j++) o.set(w.subarray((h * hd + j * (hd / 2) + i) * cols, (h * hd + j * (hd / 2) + i + 1) * cols), (h * hd + 2 * i + j) * cols);
        }
      }
      return o;
    };
    const layer = async (name: string, fix?: (w: Float32Array) => Float32Array) => {
      for (let l = 0; l < L; l++) {
        const w = await ck.readF32(`model.layers.${l}.${name}`);
        push(fix ? fix(w) : w);
      }
    };
    push(await ck.readF32('model.embed_tokens.weight'));
    await layer('input_layernorm.weight');
    await layer('self_attn.q_proj.weight', (w) => interleave(w, s.numHeads, s.hiddenSize));
    await layer('self_attn.k_proj.weight', (w) => interleave(w, s.numKvHeads, s.hiddenSize));
    await layer('self_attn.v_proj.weight');
    await layer('self_attn.o_proj.weight');
    await layer('post_attention_layernorm.weight');
    await layer('mlp.gate_proj.weight');
    await layer('mlp.down_proj.weight');
    await layer('mlp.up_proj.weight');
    push(await ck.readF32('model.norm.weight'));
    push(new Float32Array(s.maxPositions * hd)); // the retired freq_cis tables
    if (!tied) push(await ck.readF32('lm_head.weight'));
    await fsp.writeFile(out, Buffer.concat(parts));
  } finally {
    await ck.close();
  }
}

export interface CDecode {
  ids: number[];
  /** Fastest forward() per position over the rounds, nanoseconds. */
  ns: number[];
}

/** Build the harness (gcc `flags`) around LLAMA2C_RUN_C in `work`; a reason string when it cannot. */
export async function buildLlama2c(work: string, flags: string[]): Promise<string | { exe: string }> {
  const runc = process.env.LLAMA2C_RUN_C;
  if (!runc) return 'skipped: set LLAMA2C_RUN_C to llama2.c\'s run.c (git clone https://github.com/karpathy/llama2.c)';
  if (!existsSync(runc)) return `skipped: LLAMA2C_RUN_C=${runc} does not exist`;
  const exe = path.join(work, `llama2c-decode${flags.join('').replace(/[^A-Za-z0-9]/g, '_')}`);
  try {
    await run('gcc', [...flags, `-DRUN_C="${path.resolve(runc)}"`, '-Dmain=llama2c_main', path.join(REPO_ROOT, 'bench/c/llama2c-decode.c'), '-lm', '-o', exe]);
  } catch (e) {
    return `skipped: gcc could not build the run.c harness (${(e as Error).message.split('\n')[0]})`;
  }
  return { exe };
}

export async function runLlama2c(exe: string, model: string, steps: number, rounds: number): Promise<CDecode> {
  const { stdout } = await run(exe, [model, String(steps), String(rounds)], { maxBuffer: 1 << 26 });
  return JSON.parse(stdout) as CDecode;
}

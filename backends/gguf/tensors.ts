/**
 * Hugging Face tensors → llama.cpp GGUF tensors, as convert_hf_to_gguf.py names and lays them out:
 * names from gguf-py's tensor map, ggml dims (ne) = the reverse of the row-major shape, q/k rows
 * re-interleaved for the llama architecture, Mixtral experts stacked per layer into 3-D tensors.
 */
import { EMBED, FINAL_NORM, LM_HEAD, layerNames, moeNames, type ArchSpec, isMoeLayer, type ModelSource } from '../../src/core/checkpoint/index.js';
import { layerNorms } from '../../src/core/arch/names.js';
import { LlmcError } from '../../src/core/errors.js';
import { archOf, type ArchEntry } from '../../src/core/arch/registry.js';
import { checkGgufRope } from './metadata.js';

export type GgufArch = ArchEntry['gguf'];

export function ggufArch(spec: ArchSpec): GgufArch {
  return archOf(spec).gguf;
}

export interface TensorPlan {
  /** GGUF tensor name. */
  name: string;
  /** Row-major shape as written (a stacked expert tensor is [experts, rows, cols]). */
  shape: number[];
  /** Source tensors, concatenated along the first axis (several only for stacked experts). */
  sources: string[];
  /** llama q/k: re-interleave rotary halves within each of this many heads. */
  permuteHeads?: number;
  /** Computed rather than read (llama3 rope factors). */
  computed?: () => Float32Array;
}

/** ggml's ne: innermost (contiguous) dimension first. */
export const neOf = (shape: readonly number[]) => [...shape].reverse();

/**
 * LlamaModel.permute: Hugging Face stores each head's rotary pairs as two halves
 * [x0..x(d/2-1), y0..]; llama.cpp's (non-NeoX) rope expects them interleaved [x0, y0, x1, y1 ...].
 * Row r = j*(d/2) + i of a head moves to row 2i + j. Works on f32 values or raw 16-bit values, into
 * `out` when given (no allocation).
 */
export function permuteRotaryRows<T extends Float32Array | Uint16Array>(data: T, rows: number, heads: number, out?: T): T {
  const cols = data.length / rows;
  const hd = rows / heads;
  if (!Number.isInteger(hd) || hd % 2 !== 0) {
    throw new LlmcError(`cannot permute ${rows} rows into ${heads} heads of even size`);
  }
  const half = hd / 2;
  const dst = out ?? (new (data.constructor as new (n: number) => T)(data.length));
  for (let h = 0; h < heads; h++) {
    for (let j = 0; j < 2; j++) {
      for (let i = 0; i < half; i++) {
        const src = (h * hd + j * half + i) * cols;
        dst.set(data.subarray(src, src + cols) as ArrayLike<number>, (h * hd + 2 * i + j) * cols);
      }
    }
  }
  return dst;
}

/** convert_hf_to_gguf's llama3 rope factors (rope_freqs.weight), one per rotary frequency. */
export function llama3RopeFactors(spec: ArchSpec): Float32Array {
  const rs = spec.ropeScaling;
  if (!rs || rs.type !== 'llama3') throw new LlmcError('internal: llama3 rope factors without llama3 scaling');
  const dim = spec.headDim;
  const lowWavelen = rs.originalMaxPositions / rs.lowFreqFactor;
  const highWavelen = rs.originalMaxPositions / rs.highFreqFactor;
  const out = new Float32Array(dim / 2);
  for (let k = 0; k < dim / 2; k++) {
    const freq = 1 / spec.ropeTheta ** ((2 * k) / dim);
    const wavelen = (2 * Math.PI) / freq;
    if (wavelen < highWavelen) out[k] = 1;
    else if (wavelen > lowWavelen) out[k] = rs.factor;
    else {
      const smooth = (rs.originalMaxPositions / wavelen - rs.lowFreqFactor) / (rs.highFreqFactor - rs.lowFreqFactor);
      out[k] = 1 / ((1 - smooth) / rs.factor + smooth);
    }
  }
  return out;
}

/**
 * What llama.cpp's graph of `arch` computes differently from the spec, refused with one line: its
 * qwen3moe always renormalizes the top-k router weights and olmoe never does, both run every layer
 * through experts, and its olmoe has no grouped-query attention; smollm3 skips rope on every 4th layer (a constant, no GGUF key); granite takes
 * head_dim as n_embd / n_head (the converter drops head_dim).
 */
export function checkGgufLayers(spec: ArchSpec, arch: GgufArch, file: string): void {
  const refuse = (why: string): never => {
    throw new LlmcError(`${why}; llama.cpp (GGUF ${arch}) cannot express it, so the gguf target refuses rather than change the model`, file);
  };
  const moe = spec.moe;
  if (arch === 'qwen3moe' && moe!.routing !== 'softmax-topk-renorm') refuse('norm_topk_prob is false (top-k router weights kept unnormalized)');
  if (arch === 'olmoe' && moe!.routing !== 'softmax-topk') refuse('norm_topk_prob is true (top-k router weights renormalized)');
  if ((arch === 'qwen3moe' || arch === 'olmoe') && moe!.denseLayers.length > 0) refuse(`layers ${moe!.denseLayers.join(', ')} are dense (mlp_only_layers / decoder_sparse_step)`);
  if (arch === 'smollm3') {
    const every4 = Array.from({ length: spec.numLayers }, (_, l) => l).filter((l) => (l + 1) % 4 !== 0);
    const rope = spec.ropeLayers ?? Array.from({ length: spec.numLayers }, (_, l) => l);
    if (rope.join(',') !== every4.join(',')) refuse(`no_rope_layers rotates layers [${rope.join(', ')}], not all but every 4th`);
  }
  // llama.cpp's olmoe sizes attn_k_norm as n_embd: it has no grouped-query attention there.
  if (arch === 'olmoe' && spec.numKvHeads !== spec.numHeads) refuse(`num_key_value_heads ${spec.numKvHeads} differs from num_attention_heads ${spec.numHeads} (grouped-query attention with a k_norm of ${spec.numKvHeads * spec.headDim})`);
  if (arch === 'granite' && spec.headDim * spec.numHeads !== spec.hiddenSize) refuse(`head_dim ${spec.headDim} is not hidden_size / num_attention_heads`);
}

/** Every GGUF tensor of the model, in file order, with where its data comes from. */
export function planTensors(source: ModelSource): { arch: GgufArch; tensors: TensorPlan[]; ignored: string[] } {
  const spec = source.spec;
  const arch = ggufArch(spec);
  checkGgufRope(spec, arch);
  const shapeOf = (name: string): number[] => {
    const m = source.meta(name);
    if (!m) throw new LlmcError(`missing tensor "${name}"`, source.description);
    return m.shape;
  };
  const used = new Set<string>();
  const tensors: TensorPlan[] = [];
  const one = (name: string, hf: string, extra: Partial<TensorPlan> = {}) => {
    used.add(hf);
    tensors.push({ name, shape: shapeOf(hf), sources: [hf], ...extra });
  };
  const optional = (name: string, hf: string, extra: Partial<TensorPlan> = {}) => {
    if (source.meta(hf)) one(name, hf, extra);
  };
  const stacked = (name: string, hfs: string[]) => {
    const s = shapeOf(hfs[0]);
    for (const h of hfs) {
      if (shapeOf(h).join(',') !== s.join(',')) throw new LlmcError(`experts of "${name}" differ in shape`, source.description);
      used.add(h);
    }
    tensors.push({ name, shape: [hfs.length, ...s], sources: hfs });
  };
  const bias = (w: string) => w.replace(/\.weight$/, '.bias');

  if (arch === 'qwen2moe' && spec.moe!.denseLayers.length > 0) {
    throw new LlmcError(
      `layers ${spec.moe!.denseLayers.join(', ')} are dense (mlp_only_layers / decoder_sparse_step), which llama.cpp's qwen2moe cannot load`,
      source.description,
    );
  }
  checkGgufLayers(spec, arch, source.description);
  // The architectures llama.cpp rotates GPT-J style (LLAMA_ROPE_TYPE_NORM): convert_hf_to_gguf's LlamaModel subclasses.
  const llamaPermute = arch === 'llama' || arch === 'granite' || arch === 'smollm3';

  one('token_embd.weight', EMBED);
  if (spec.ropeScaling?.type === 'llama3' && arch === 'llama') {
    tensors.push({ name: 'rope_freqs.weight', shape: [spec.headDim / 2], sources: [], computed: () => llama3RopeFactors(spec) });
  }
  for (let l = 0; l < spec.numLayers; l++) {
    const n = layerNames(l);
    const b = `blk.${l}`;
    const norms = layerNorms(spec, l);
    if (norms.attnIn) one(`${b}.attn_norm.weight`, norms.attnIn);
    one(`${b}.attn_q.weight`, n.q, llamaPermute ? { permuteHeads: spec.numHeads } : {});
    optional(`${b}.attn_q.bias`, n.qBias, llamaPermute ? { permuteHeads: spec.numHeads } : {});
    one(`${b}.attn_k.weight`, n.k, llamaPermute ? { permuteHeads: spec.numKvHeads } : {});
    optional(`${b}.attn_k.bias`, n.kBias, llamaPermute ? { permuteHeads: spec.numKvHeads } : {});
    one(`${b}.attn_v.weight`, n.v);
    optional(`${b}.attn_v.bias`, n.vBias);
    one(`${b}.attn_output.weight`, n.o);
    optional(`${b}.attn_output.bias`, n.oBias);
    if (spec.qkNorm) {
      one(`${b}.attn_q_norm.weight`, n.qNorm);
      one(`${b}.attn_k_norm.weight`, n.kNorm);
    }
    if (norms.attnOut) one(`${b}.post_attention_norm.weight`, norms.attnOut);
    if (norms.mlpIn) one(`${b}.ffn_norm.weight`, norms.mlpIn);
    if (isMoeLayer(spec, l)) {
      const m = moeNames(spec, l);
      one(`${b}.ffn_gate_inp.weight`, m.router);
      stacked(`${b}.ffn_gate_exps.weight`, m.experts.map((e) => e.gate));
      stacked(`${b}.ffn_down_exps.weight`, m.experts.map((e) => e.down));
      stacked(`${b}.ffn_up_exps.weight`, m.experts.map((e) => e.up));
      if (m.shared) {
        one(`${b}.ffn_gate_inp_shexp.weight`, m.sharedGate!);
        one(`${b}.ffn_gate_shexp.weight`, m.shared.gate);
        one(`${b}.ffn_down_shexp.weight`, m.shared.down);
        one(`${b}.ffn_up_shexp.weight`, m.shared.up);
      }
    } else {
      one(`${b}.ffn_gate.weight`, n.mlp.gate);
      one(`${b}.ffn_down.weight`, n.mlp.down);
      one(`${b}.ffn_up.weight`, n.mlp.up);
      if (spec.mlpBias) {
        one(`${b}.ffn_gate.bias`, bias(n.mlp.gate));
        one(`${b}.ffn_down.bias`, bias(n.mlp.down));
        one(`${b}.ffn_up.bias`, bias(n.mlp.up));
      }
    }
    if (norms.mlpOut) one(`${b}.post_ffw_norm.weight`, norms.mlpOut);
  }
  one('output_norm.weight', FINAL_NORM);
  // Tied embeddings: no output.weight, llama.cpp reuses token_embd (as the converter leaves it).
  if (!spec.tieEmbeddings) one('output.weight', LM_HEAD);
  else used.add(LM_HEAD);
  const ignored = source.tensors.map((t) => t.name).filter((t) => !used.has(t));
  return { arch, tensors, ignored };
}

/**
 * Hugging Face tensors → llama.cpp GGUF tensors, as convert_hf_to_gguf.py names and lays them out:
 * names from gguf-py's tensor map, ggml dims (ne) = the reverse of the row-major shape, q/k rows
 * re-interleaved for the llama architecture, Mixtral experts stacked per layer into 3-D tensors.
 */
import { EMBED, FINAL_NORM, LM_HEAD, layerNames, moeNames, type ArchSpec, isMoeLayer, type ModelSource } from '../../src/core/checkpoint/index.js';
import { LlmcError } from '../../src/core/errors.js';
import { archOf, type GgufFamily } from '../../src/core/arch/registry.js';
import { layerNorms } from '../../src/core/arch/names.js';
import { checkGgufRope } from './metadata.js';
import type { StreamedTensor } from '../../src/core/checkpoint/stream.js';

/** How llama.cpp writes the spec's family (the registry entry's gguf side). */
export function ggufFamily(spec: ArchSpec): GgufFamily {
  return archOf(spec).gguf;
}

/** A GGUF tensor (name: llama.cpp's) and where its values come from. */
export type TensorPlan = StreamedTensor;

/** ggml's ne: innermost (contiguous) dimension first. */
export const neOf = (shape: readonly number[]) => [...shape].reverse();

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

/** Every GGUF tensor of the model, in file order, with where its data comes from. */
export function planTensors(source: ModelSource): { family: GgufFamily; tensors: TensorPlan[]; ignored: string[] } {
  const spec = source.spec;
  const family = ggufFamily(spec);
  checkGgufRope(spec, family);
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
  const norm = (name: string, hf: string) => one(name, hf, family.normPlusOne ? { plusOne: true } : {});
  /** Rows of several source tensors in one GGUF tensor (phi3's fused projections). */
  const fused = (name: string, hfs: string[]) => {
    const shapes = hfs.map(shapeOf);
    for (const h of hfs) used.add(h);
    tensors.push({ name, shape: [shapes.reduce((a, s) => a + s[0], 0), shapes[0][1]], sources: hfs });
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

  const refusal = family.refuse(spec);
  if (refusal !== null) throw new LlmcError(refusal, source.description);
  const llamaPermute = family.permuteQK;

  one('token_embd.weight', EMBED);
  if (spec.ropeScaling?.type === 'llama3' && family.ropeFreqs) {
    tensors.push({ name: 'rope_freqs.weight', shape: [spec.headDim / 2], sources: [], computed: () => llama3RopeFactors(spec) });
  }
  // Phi3MiniModel.generate_extra_tensors: longrope's per-frequency divisors, float32 as given.
  const rs = spec.ropeScaling;
  if (rs?.type === 'longrope' && family.longropeFactors) {
    tensors.push({ name: 'rope_factors_long.weight', shape: [spec.headDim / 2], sources: [], computed: () => Float32Array.from(rs.longFactor) });
    tensors.push({ name: 'rope_factors_short.weight', shape: [spec.headDim / 2], sources: [], computed: () => Float32Array.from(rs.shortFactor) });
  }
  for (let l = 0; l < spec.numLayers; l++) {
    const n = layerNames(l);
    const b = `blk.${l}`;
    const norms = layerNorms(spec, l);
    if (norms.attnIn) norm(`${b}.attn_norm.weight`, norms.attnIn);
    if (family.fusedProjections) fused(`${b}.attn_qkv.weight`, [n.q, n.k, n.v]);
    // Heads from the rows (a level with per-layer widths has its own count in each layer; deci.ts).
    const qHeads = llamaPermute && !family.fusedProjections ? shapeOf(n.q)[0] / spec.headDim : spec.numHeads;
    const kHeads = llamaPermute && !family.fusedProjections ? shapeOf(n.k)[0] / spec.headDim : spec.numKvHeads;
    if (!family.fusedProjections) one(`${b}.attn_q.weight`, n.q, llamaPermute ? { permuteHeads: qHeads } : {});
    optional(`${b}.attn_q.bias`, n.qBias, llamaPermute ? { permuteHeads: qHeads } : {});
    if (!family.fusedProjections) one(`${b}.attn_k.weight`, n.k, llamaPermute ? { permuteHeads: kHeads } : {});
    optional(`${b}.attn_k.bias`, n.kBias, llamaPermute ? { permuteHeads: kHeads } : {});
    if (!family.fusedProjections) one(`${b}.attn_v.weight`, n.v);
    optional(`${b}.attn_v.bias`, n.vBias);
    one(`${b}.attn_output.weight`, n.o);
    optional(`${b}.attn_output.bias`, n.oBias);
    if (spec.qkNorm) {
      norm(`${b}.attn_q_norm.weight`, n.qNorm);
      norm(`${b}.attn_k_norm.weight`, n.kNorm);
    }
    // gguf-py's ATTN_POST_NORM / FFN_POST_NORM for norms on a block's output (olmo2, gemma2).
    if (norms.attnOut) norm(`${b}.post_attention_norm.weight`, norms.attnOut);
    if (norms.mlpIn) norm(`${b}.ffn_norm.weight`, norms.mlpIn);
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
    } else if (family.fusedProjections) {
      one(`${b}.ffn_down.weight`, n.mlp.down);
      fused(`${b}.ffn_up.weight`, [n.mlp.gate, n.mlp.up]);
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
    if (norms.mlpOut) norm(`${b}.post_ffw_norm.weight`, norms.mlpOut);
    for (const t of family.layerTensors(spec, l)) one(`${b}.${t.name}`, t.hf);
  }
  norm('output_norm.weight', FINAL_NORM);
  // Tied embeddings: no output.weight, llama.cpp reuses token_embd (as the converter leaves it).
  if (!spec.tieEmbeddings) one('output.weight', LM_HEAD);
  else used.add(LM_HEAD);
  const ignored = source.tensors.map((t) => t.name).filter((t) => !used.has(t));
  return { family, tensors, ignored };
}

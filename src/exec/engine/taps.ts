/**
 * Tap results: profiling observations merged over every sequence the engine ran, keyed the
 * Hugging Face way (see TapPoint.key in src/core/ir/ir.ts).
 */
import type * as ort from 'onnxruntime-node';
import type { TapOutputs } from '../onnx/lower.js';

export interface LinearInputStats {
  layer: number;
  /** Per input channel: max over tokens of |x|. */
  absMax: Float32Array;
  /** Per input channel: sum over tokens of x². */
  sumSq: Float64Array;
  /** Tokens observed (for expert linears: the tokens routed to the expert). */
  tokens: number;
  /** With `full`: one [rows·T, C] block per forward pass (see TapResult.batches; for experts, tokens not routed to it are zero). */
  full?: Float32Array[];
  /** With `sums`: per channel, sum over tokens of x. */
  sum?: Float64Array;
  /** With `top`: the `top` elements of largest |x| over every pass so far, largest first (signed), and their channels. */
  top?: { values: Float32Array; channels: Int32Array };
}

export interface HeadOutputStats {
  layer: number;
  /** Per attention head: sum over tokens and head dims of the head's output² (before o_proj). */
  sumSq: Float64Array;
  tokens: number;
}

export interface RouterLogits {
  layer: number;
  numExperts: number;
  /** One [rows·T, E] block per forward pass; `TapResult.batches` says which sequences each holds. */
  logits: Float32Array[];
}

export interface MlpActStats {
  layer: number;
  /** Per neuron: sum over tokens of |act(gate)·up|. */
  absSum: Float64Array;
  /** Tokens observed (for experts: routed to it — the expert's activation count). */
  tokens: number;
  full?: Float32Array[];
}

export interface TapResult {
  /** Tokens run through the model. */
  tokens: number;
  /**
   * The forward passes in order: indices (into the sequences given to tap()) of the rows each
   * ran, all of `length` tokens. Sequences are grouped by length, so full blocks follow this order.
   */
  batches: { sequences: number[]; length: number }[];
  /** Keyed by the linear's weight name (e.g. model.layers.0.self_attn.q_proj.weight). */
  linearInputs: Map<string, LinearInputStats>;
  /** The same for the linears' outputs (before their bias). */
  linearOutputs: Map<string, LinearInputStats>;
  /** Keyed by `model.layers.<l>.self_attn`. */
  headOutputs: Map<string, HeadOutputStats>;
  /** Keyed by the router weight name. */
  routerLogits: Map<string, RouterLogits>;
  /** Keyed by MLP prefix (`model.layers.<l>.mlp`, `...mlp.experts.<e>`, `...block_sparse_moe.experts.<e>`, `...shared_expert`). */
  mlpActs: Map<string, MlpActStats>;
}

export function emptyTapResult(): TapResult {
  return { tokens: 0, batches: [], linearInputs: new Map(), linearOutputs: new Map(), headOutputs: new Map(), routerLogits: new Map(), mlpActs: new Map() };
}

const f32 = (outputs: ort.InferenceSession.ReturnType, name: string) => outputs[name].data as Float32Array;

function addInto(acc: Float64Array, x: Float32Array): void {
  for (let i = 0; i < acc.length; i++) acc[i] += x[i];
}

/**
 * The largest-|x| elements of `kept` and of one pass (signed values, flat indices into [rows, T, C]),
 * as many as the pass gave: the pass's k is the whole set's, so the union's top k is exact.
 */
function mergeTop(kept: LinearInputStats['top'], values: Float32Array, index: BigInt64Array, C: number): NonNullable<LinearInputStats['top']> {
  const k = values.length;
  const n = (kept?.values.length ?? 0) + k;
  const v = new Float32Array(n);
  const ch = new Int32Array(n);
  if (kept) {
    v.set(kept.values);
    ch.set(kept.channels);
  }
  const o = kept?.values.length ?? 0;
  for (let i = 0; i < k; i++) {
    v[o + i] = values[i];
    ch[o + i] = Number(index[i] % BigInt(C));
  }
  const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => Math.abs(v[b]) - Math.abs(v[a]) || a - b);
  const keep = Math.max(k, kept?.values.length ?? 0);
  return { values: Float32Array.from(order.slice(0, keep), (i) => v[i]), channels: Int32Array.from(order.slice(0, keep), (i) => ch[i]) };
}

/** Fold one forward pass (rows × T tokens) into `result`. */
export function mergeTapOutputs(result: TapResult, taps: TapOutputs[], outputs: ort.InferenceSession.ReturnType, rows: number, T: number): void {
  result.tokens += rows * T;
  for (const t of taps) {
    const { point } = t;
    const tokens = t.count ? Math.round(f32(outputs, t.count)[0]) : rows * T;
    // Copies: onnxruntime's output buffers are not ours to keep.
    const full = t.full ? f32(outputs, t.full).slice() : undefined;
    switch (point.kind) {
      case 'linear-input':
      case 'linear-output': {
        const map = point.kind === 'linear-input' ? result.linearInputs : result.linearOutputs;
        let s = map.get(point.key);
        if (!s) {
          s = { layer: point.layer, absMax: new Float32Array(point.channels), sumSq: new Float64Array(point.channels), tokens: 0 };
          map.set(point.key, s);
        }
        const m = f32(outputs, t.absMax!);
        for (let i = 0; i < m.length; i++) if (m[i] > s.absMax[i]) s.absMax[i] = m[i];
        addInto(s.sumSq, f32(outputs, t.sumSq!));
        if (t.sum) addInto((s.sum ??= new Float64Array(point.channels)), f32(outputs, t.sum));
        if (t.top) s.top = mergeTop(s.top, f32(outputs, t.top), outputs[t.topIndex!].data as BigInt64Array, point.channels);
        s.tokens += tokens;
        if (full) (s.full ??= []).push(full);
        break;
      }
      case 'head-output': {
        let s = result.headOutputs.get(point.key);
        if (!s) {
          s = { layer: point.layer, sumSq: new Float64Array(point.heads!), tokens: 0 };
          result.headOutputs.set(point.key, s);
        }
        addInto(s.sumSq, f32(outputs, t.sumSq!));
        s.tokens += tokens;
        break;
      }
      case 'router-logits': {
        let s = result.routerLogits.get(point.key);
        if (!s) {
          s = { layer: point.layer, numExperts: point.channels, logits: [] };
          result.routerLogits.set(point.key, s);
        }
        s.logits.push(full!);
        break;
      }
      case 'mlp-act': {
        let s = result.mlpActs.get(point.key);
        if (!s) {
          s = { layer: point.layer, absSum: new Float64Array(point.channels), tokens: 0 };
          result.mlpActs.set(point.key, s);
        }
        addInto(s.absSum, f32(outputs, t.absSum!));
        s.tokens += tokens;
        if (full) (s.full ??= []).push(full);
        break;
      }
    }
  }
}

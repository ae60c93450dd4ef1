/**
 * A streamed piece's onnxruntime inputs: the ids, the rotary tables from position `P`, the logit
 * positions, each layer's past KV (empty on a prefill) and the values earlier pieces carried.
 * One definition for StreamEngine's sweeps and StreamDecoder's generation steps.
 */
import '../engine/ort-env.js'; // before onnxruntime-node loads
import * as ort from 'onnxruntime-node';
import { LlmcError } from '../../core/errors.js';
import { IO } from '../../core/ir/build.js';
import type { V } from '../../core/ir/ir.js';
import { localRopeSpec, ropeTables } from '../../core/ir/rope.js';
import type { Segment } from '../../core/ir/segments.js';

const PAST = /^past_(key|value)_\d+$/;

/** `ids`: B rows of T tokens at positions P..P+T−1; `kv`: the past by input name (absent: empty). */
export function pieceFeeds(seg: Segment, ids: number[][], carried: ReadonlyMap<V, Float32Array>, logitPositions: readonly number[], kv?: ReadonlyMap<string, ort.Tensor>, P = 0): Record<string, ort.Tensor> {
  const spec = seg.graph.spec;
  const B = ids.length;
  const T = ids[0].length;
  const feeds: Record<string, ort.Tensor> = {};
  let rope: { cos: Float32Array; sin: Float32Array } | null = null;
  let local: { cos: Float32Array; sin: Float32Array } | null = null;
  for (const input of seg.graph.inputs) {
    const name = input.name;
    if (name === IO.ids) feeds[name] = new ort.Tensor('int64', BigInt64Array.from(ids.flat(), (x) => BigInt(x)), [B, T]);
    else if (name === IO.cos || name === IO.sin) {
      rope ??= ropeTables(spec, P, T);
      feeds[name] = new ort.Tensor('float32', name === IO.cos ? rope.cos : rope.sin, [T, spec.headDim / 2]);
    } else if (name === IO.cosLocal || name === IO.sinLocal) {
      local ??= ropeTables(localRopeSpec(spec)!, P, T);
      feeds[name] = new ort.Tensor('float32', name === IO.cosLocal ? local.cos : local.sin, [T, spec.headDim / 2]);
    } else if (name === IO.logitPositions) feeds[name] = new ort.Tensor('int64', BigInt64Array.from(logitPositions, (x) => BigInt(x)), [logitPositions.length]);
    else if (PAST.test(name)) {
      const heads = input.dims[1];
      feeds[name] = kv?.get(name) ?? new ort.Tensor('float32', new Float32Array(0), [B, typeof heads === 'number' ? heads : spec.numKvHeads, 0, spec.headDim]);
    } else {
      const v = carried.get(name);
      if (!v) throw new LlmcError(`internal: piece ${seg.id} needs "${name}", which no earlier piece carried`);
      feeds[name] = new ort.Tensor('float32', v, [B, T, v.length / (B * T)]);
    }
  }
  return feeds;
}

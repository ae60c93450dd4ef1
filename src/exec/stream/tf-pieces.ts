/**
 * The model's stream pieces (./segments.ts: the embedding, each decoder layer, the head) on the tfjs
 * lowering (src/exec/autodiff), for work that needs gradients piece by piece (blockwise recovery of
 * elastic levels): a piece's weights are loaded when asked for and freed on release, so memory
 * follows one piece; with `keep` (a model small enough to hold) they stay loaded for the next use.
 */
import type { ModelSource } from '../../core/checkpoint/source.js';
import { LlmcError } from '../../core/errors.js';
import { buildModel, IO } from '../../core/ir/build.js';
import { TfModel, type RunOptions } from '../autodiff/lower.js';
import { tf } from '../autodiff/tf.js';
import { streamSegments, type Segment } from '../../core/ir/segments.js';

export class TfPieces {
  readonly segments: Segment[];
  private readonly held = new Map<number, TfModel>();
  /** The most pieces held at once so far (memory follows this many pieces' weights). */
  peakHeld = 0;

  constructor(
    readonly source: ModelSource,
    private readonly keep: boolean,
  ) {
    this.segments = streamSegments(buildModel(source.spec));
    for (const [i, seg] of this.segments.entries()) {
      const ins = i === 0 ? 1 : seg.carriedIn.length;
      const outs = i === this.segments.length - 1 ? 1 : seg.carriedOut.length;
      if (ins !== 1 || outs !== 1) throw new LlmcError(`piece ${seg.id} carries ${ins} values in and ${outs} out; only the residual stream is supported here`, source.description);
    }
  }

  /** Indices of the decoder layers' pieces, in order. */
  get decoder(): number[] {
    return this.segments.flatMap((g, i) => (g.layer >= 0 && g.layer < this.source.spec.numLayers ? [i] : []));
  }

  get headIndex(): number {
    return this.segments.length - 1;
  }

  /** Piece `i`'s tfjs model (its weights only). */
  async piece(i: number): Promise<TfModel> {
    const hit = this.held.get(i);
    if (hit) return hit;
    const m = await TfModel.load(this.source, undefined, this.segments[i].graph);
    this.held.set(i, m);
    this.peakHeld = Math.max(this.peakHeld, this.held.size);
    return m;
  }

  /** Done with piece `i` for now: freed unless kept. */
  release(i: number): void {
    if (this.keep) return;
    this.held.get(i)?.dispose();
    this.held.delete(i);
  }

  dispose(): void {
    for (const m of this.held.values()) m.dispose();
    this.held.clear();
  }

  /**
   * Piece `i` over `x`: token ids [B, T] (int32) into the embedding, a hidden state [B, T, C] into a
   * decoder layer (its output, the same shape) or the head (logits [B·T, V]). Call inside tf.tidy / grads.
   */
  run(model: TfModel, i: number, x: tf.Tensor, opts: RunOptions = {}): tf.Tensor {
    const seg = this.segments[i];
    const [B, T] = x.shape as [number, number];
    const input = i === 0 ? IO.ids : seg.carriedIn[0];
    const output = i === this.headIndex ? IO.logits : seg.carriedOut[0];
    const y = model.forward(new Map([[input, x]]), B, T, [output], opts)[0];
    return i === this.headIndex ? tf.reshape(y, [B * T, y.shape[2]!]) : y;
  }
}

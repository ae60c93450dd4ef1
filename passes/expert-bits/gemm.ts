/**
 * y = a · bᵀ in float32 on onnxruntime (one Gemm node, transB = 1, dynamic shapes): the
 * reconstruction errors' matrix products. JS loops in float64 took ≈ 20 min for a 0.9B mixtral's
 * 128 experts × 6 formats; its multithreaded kernels take about a minute. The callers keep the
 * precision by multiplying differences (W_q − W, H_q − H), never subtracting two large products.
 */
import '../../src/exec/engine/ort-env.js'; // before onnxruntime-node loads
import * as ort from 'onnxruntime-node';
import { attr, DT_FLOAT, onnx } from '../../src/exec/onnx/proto.js';
import { OPSET, valueInfo } from '../../src/exec/onnx/lower.js';

export class Gemm {
  private constructor(private readonly session: ort.InferenceSession) {}

  static async open(): Promise<Gemm> {
    const model = onnx.ModelProto.encode(
      onnx.ModelProto.create({
        irVersion: 8,
        opsetImport: [{ domain: '', version: OPSET }],
        producerName: 'llmc expert-bits',
        graph: {
          name: 'abT',
          node: [{ opType: 'Gemm', input: ['A', 'B'], output: ['Y'], attribute: [attr('transB', 1)] }],
          input: [valueInfo('A', DT_FLOAT, ['n', 'k']), valueInfo('B', DT_FLOAT, ['m', 'k'])],
          output: [valueInfo('Y', DT_FLOAT, ['n', 'm'])],
        },
      }),
    ).finish();
    return new Gemm(await ort.InferenceSession.create(model, { graphOptimizationLevel: 'all' }));
  }

  /** a [n, k] · b[m, k]ᵀ → [n, m], row-major. */
  async abT(a: Float32Array, n: number, k: number, b: Float32Array, m: number): Promise<Float32Array> {
    const out = await this.session.run({ A: new ort.Tensor('float32', a, [n, k]), B: new ort.Tensor('float32', b, [m, k]) });
    return out.Y.data as Float32Array;
  }

  async close(): Promise<void> {
    await this.session.release();
  }
}

/**
 * The cuda target's targetInfo: the graph and its external data, opset, compute and weight formats,
 * the decoder's I/O, TensorRT build profiles per device, and where present each elastic level's graph
 * and the chunk graphs (with what sharing their weights saves).
 */
import { z } from 'zod';
import { artifactPath, count, defineTargetInfo } from '../../src/core/records/target-info.js';

const positive = z.number().int().positive();
const valueInfo = z.object({ name: z.string(), dtype: z.string(), dims: z.array(z.number()) });

export const CUDA_INFO = defineTargetInfo(
  'cuda',
  z.object({
    format: z.literal('onnx-decoder'),
    layout: z.literal('optimum'),
    graph: artifactPath,
    externalData: artifactPath.nullable(),
    opset: positive,
    compute: z.enum(['fp32', 'fp16']),
    quant: z.string(),
    int4: z.object({ encoding: z.enum(['matmulnbits', 'dequantizelinear']), zeroPoints: z.boolean() }),
    io: z.object({ kvHeads: z.array(count), headDim: positive, vocab: positive, cacheDtype: z.enum(['float32', 'float16']), maxPositions: positive }),
    /** Each weight's format, by its Hugging Face name. */
    formats: z.record(z.string(), z.string()),
    bytes: z.object({ graph: count, data: count }),
    /** TensorRT optimization profiles per device (engine-plan.ts). */
    profiles: z.record(z.string(), z.object({ note: z.string(), workspaceMiB: count, dla: z.boolean() })),
    levels: z
      .array(z.object({ id: z.string(), file: artifactPath, nominal: z.number(), paramFrac: z.number(), kvHeads: z.array(count), sharedBytes: count, ownBytes: count, graphBytes: count }))
      .optional(),
    levelLayouts: z.object({ shared: count, separate: count, saved: count }).optional(),
    chunks: z
      .array(
        z.object({
          c: positive,
          attentionGraphs: positive,
          graphs: z.array(
            z.object({ name: z.string(), file: artifactPath, kind: z.string(), layer: count.nullable(), i: count.nullable(), inputs: z.array(valueInfo), outputs: z.array(valueInfo), graphBytes: count, sharedBytes: count, ownBytes: count }),
          ),
          memory: z.object({
            staticGraphBytes: count,
            staticWeightBytes: count,
            attentionGraphBytes: z.array(count),
            rows: z.array(z.object({ N: positive, naive: z.number(), shared: z.number(), saved: z.number(), modelNaive: z.number(), modelShared: z.number(), modelSaved: z.number() })),
          }),
        }),
      )
      .optional(),
  }),
);
export type CudaInfo = ReturnType<typeof CUDA_INFO.read>;

/**
 * The tiny TS runtime for `llmc compile --target ts` artifacts (docs/ts-artifact.md). Browser-safe:
 * import this module in a bundle; Node users add `loadDir` / `fileSource` from './node.js'.
 *
 *   const model = await load({ manifest: text, weights: urlSource(url + '/weights.bin') });
 *   for await (const id of model.generate([1], { maxTokens: 32 })) ...
 *   const logits = model.forward(ids);          // [T, V]
 */
export { load, parseManifest, type ArtifactSource, type LoadOptions, type ArtifactManifest } from './load.js';
export { Model, KvCache, type LayerWidth, type ForwardOptions, type GenerateOptions } from './model.js';
export { bufferSource, urlSource, type ByteSource } from './bytes.js';
export { Weight, matmul, dequantRow } from './kernels.js';
export * from './format.js';
export { Sampler, argmax, type SamplingOptions } from '../../core/sampling.js';
export { webWorker, type PoolOptions, type PoolWorker, type SpawnWorker } from './pool.js';

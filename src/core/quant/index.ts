/** Public API of the ggml-exact quantizers (see quantize.ts, parallel.ts, types.ts). */
export { QUANT_TYPES, fallbackType, isQuantType, quantTypeFromGgml, rowBytes } from './types.js';
export type { QuantType, QuantTypeInfo } from './types.js';
export { dequantize, quantize, quantizeInto } from './quantize.js';
export { closeQuantWorkers, defaultQuantThreads, quantizeParallel, resolveWorkerScript } from './parallel.js';
export { IQ4NL_VALUES, quantizeRowsWeighted, usesImportance } from './weighted.js';

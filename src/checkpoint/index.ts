export * from './checkpoint.js';
export * from './names.js';
export * from './safetensors.js';
export * from './source.js';
export * from './spec.js';

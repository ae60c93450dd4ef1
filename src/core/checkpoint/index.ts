export * from './checkpoint.js';
export * from '../arch/names.js';
export * from './safetensors.js';
export * from './source.js';
export * from '../arch/spec.js';
export * from './finite.js';

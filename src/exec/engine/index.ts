export * from './engine.js';
export * from './generator.js';
export * from './taps.js';

/** Pass records and the manifest they live in: browser-safe, read by targets, the runtime and the CLI. */
export * from './manifest.js';
export * from './types.js';
export * from './elastic.js';
export * from './expert-table.js';
export * from './spec-tree.js';
export * from './outliers.js';
export * from './chunk-schedule.js';
export * from './imatrix.js';

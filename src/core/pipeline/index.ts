/** The pipeline contracts: the compile unit, passes, targets and their option schemas. */
export * from './unit.js';
export * from './options.js';
export * from './pass.js';
export * from './target.js';
export * from './summary.js';

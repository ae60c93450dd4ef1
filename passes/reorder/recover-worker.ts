/**
 * A recovery worker thread (passes/reorder/recover.ts `inWorkers`): rebuilds the reordered model from
 * shared memory, then trains the levels it is sent, one at a time, with the same LevelTrainer the
 * main thread uses (the same tfjs kernels: the same adapters).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { memorySource } from '../../src/core/checkpoint/source.js';
import { LevelTrainer, runChain, type FromWorker, type ToWorker, type WorkerInit } from './recover.js';

const init = workerData as WorkerInit;
const model = memorySource({ ...init, tensors: init.tensors.map((t) => ({ meta: t.meta, data: new Float32Array(t.buffer) })) });
const trainer = new LevelTrainer(model, init.work);
const post = (m: FromWorker) => parentPort!.postMessage(m);
const progress = { start() {}, tick: (n = 1) => post({ tick: n }), done() {} };

parentPort!.on('message', async (m: ToWorker) => {
  if ('exit' in m) {
    trainer.dispose();
    process.exit(0);
  }
  try {
    await runChain(trainer, m.job, progress, async (lv, profile) => post({ done: lv.id, profile }));
    post({ idle: true });
  } catch (err) {
    post({ error: (err as Error).message });
  }
});

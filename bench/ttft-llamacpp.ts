/**
 * node-llama-cpp cold, for bench/peers.bench.ts's time to first token: this process starts, loads
 * the GGUF, prefills the prompt and prints the first greedy id (as `llmc run --ids -n 1` does).
 * `node dist/bench/ttft-llamacpp.js MODEL.gguf IDS THREADS`
 */
import type { Token } from 'node-llama-cpp';

const [file, ids, threads] = process.argv.slice(2);
const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: file });
const ctx = await model.createContext({ contextSize: 256, threads: Number(threads) });
const prompt = ids.split(',').map(Number) as Token[];
for await (const token of ctx.getSequence().evaluate(prompt, { temperature: 0 })) {
  process.stdout.write(`${token}\n`);
  break;
}
await ctx.dispose();
await model.dispose();

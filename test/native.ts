/** What the tests that call llama.cpp's own libraries (node-llama-cpp's prebuilt binaries) need. */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const PLATFORM = `${process.platform}-${process.arch}`;

/** The folder of node-llama-cpp's prebuilt llama.cpp libraries for this platform. */
export const LLAMA_BINS = path.join(ROOT, 'node_modules/@node-llama-cpp', PLATFORM, 'bins', PLATFORM);

/** Whether gcc is here to build the small C shims that call them. */
export function hasGcc(): boolean {
  try {
    execFileSync('gcc', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

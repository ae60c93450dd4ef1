/**
 * The target registry: the CLI, the pass manager and --help know targets only through this list.
 * Add a target by adding its folder and one line here (docs/architecture.md). Descriptors are cheap
 * to import; each target's code (onnx-proto, tokenizer conversion, ...) loads when it emits.
 */
import type { TargetDescriptor } from '../src/core/pipeline/target.js';
import { gguf } from './gguf/index.js';
import { ggufLevels } from './gguf/levels/index.js';
import { hf } from './hf/index.js';
import { ts } from './ts/index.js';
import { cuda } from './cuda/index.js';
import { tensorrtLlm } from './tensorrt-llm/index.js';
import { qnn } from './qnn/index.js';

export const TARGETS: TargetDescriptor<any>[] = [gguf, ggufLevels, hf, ts, cuda, tensorrtLlm, qnn]; // eslint-disable-line @typescript-eslint/no-explicit-any

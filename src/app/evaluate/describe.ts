/** A held-out set in words, for summaries and reports. */
import type { HeldOutFacts } from './artifact.js';

/** Where the held-out windows came from, in words. */
export function heldOutWords(h: HeldOutFacts): string {
  const count = h.tokens.toLocaleString('en-US');
  if (h.source === 'self-generated') return `${count} tokens sampled from the source (${h.sequences} sequence${h.sequences === 1 ? '' : 's'} of ${h.length}, seed ${h.seed})`;
  const what = h.source.builtIn ? "llmc's built-in held-out text" : h.source.text;
  return `${count} tokens of ${what} (${h.sequences} window${h.sequences === 1 ? '' : 's'} of ${h.length})`;
}

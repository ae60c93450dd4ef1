/**
 * The Hugging Face `tokenizers` BPE model: a word is split into characters (unknown ones become
 * `<0xNN>` byte tokens with byte_fallback, or unk), then adjacent pairs are merged lowest rank
 * first (leftmost among equal ranks) until no merge applies.
 */
export interface BpeOptions {
  vocab: Map<string, number>;
  /** Merges in rank order. */
  merges: [string, string][];
  unkToken: string | null;
  fuseUnk: boolean;
  byteFallback: boolean;
  /** Llama-3 style: a word that is itself in the vocab is taken whole. */
  ignoreMerges: boolean;
}

interface Merge {
  rank: number;
  id: number;
}

/** A min-heap of candidate merges keyed by (rank, position). */
class Heap {
  private a: [number, number, number][] = []; // [rank, pos, version]
  get size() {
    return this.a.length;
  }
  push(x: [number, number, number]) {
    const a = this.a;
    a.push(x);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (less(a[i], a[p])) {
        [a[i], a[p]] = [a[p], a[i]];
        i = p;
      } else break;
    }
  }
  pop(): [number, number, number] {
    const a = this.a;
    const top = a[0];
    const last = a.pop()!;
    if (a.length) {
      a[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && less(a[l], a[m])) m = l;
        if (r < a.length && less(a[r], a[m])) m = r;
        if (m === i) break;
        [a[i], a[m]] = [a[m], a[i]];
        i = m;
      }
    }
    return top;
  }
}
const less = (x: [number, number, number], y: [number, number, number]) => x[0] < y[0] || (x[0] === y[0] && x[1] < y[1]);

const encoder = new TextEncoder();

export class Bpe {
  private readonly merges = new Map<string, Merge>();
  private readonly unkId: number | null;
  private readonly byteIds: (number | undefined)[];
  private readonly cache = new Map<string, number[]>();

  constructor(private readonly o: BpeOptions, fail: (why: string) => never) {
    o.merges.forEach(([a, b], rank) => {
      const ia = o.vocab.get(a);
      const ib = o.vocab.get(b);
      const id = o.vocab.get(a + b);
      if (ia === undefined || ib === undefined || id === undefined) fail(`merge "${a} ${b}" uses a token that is not in the vocab`);
      const key = `${ia},${ib}`;
      if (!this.merges.has(key)) this.merges.set(key, { rank, id });
    });
    this.unkId = o.unkToken === null ? null : (o.vocab.get(o.unkToken) ?? null);
    if (o.unkToken !== null && this.unkId === null) fail(`unk_token "${o.unkToken}" is not in the vocab`);
    this.byteIds = Array.from({ length: 256 }, (_, b) => o.vocab.get(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`));
  }

  /** Ids of one pre-tokenized word. */
  encodeWord(word: string): number[] {
    if (word === '') return [];
    const hit = this.cache.get(word);
    if (hit) return hit;
    const ids = this.tokenize(word);
    if (this.cache.size < 50_000) this.cache.set(word, ids);
    return ids;
  }

  private tokenize(word: string): number[] {
    const { vocab } = this.o;
    if (this.o.ignoreMerges) {
      const whole = vocab.get(word);
      if (whole !== undefined) return [whole];
    }
    const syms: number[] = [];
    let lastUnk = false;
    for (const ch of word) {
      const id = vocab.get(ch);
      if (id !== undefined) {
        syms.push(id);
        lastUnk = false;
        continue;
      }
      if (this.o.byteFallback) {
        const bytes = encoder.encode(ch);
        const ids = Array.from(bytes, (b) => this.byteIds[b]);
        if (ids.every((x) => x !== undefined)) {
          syms.push(...(ids as number[]));
          lastUnk = false;
          continue;
        }
      }
      if (this.unkId === null) continue; // HF drops characters it can neither find nor replace
      if (!(this.o.fuseUnk && lastUnk)) syms.push(this.unkId);
      lastUnk = true;
    }
    return this.merge(syms);
  }

  /** Apply merges lowest (rank, position) first, with a doubly linked list and a lazy heap. */
  private merge(ids: number[]): number[] {
    const n = ids.length;
    if (n < 2) return ids;
    const sym = ids.slice();
    const prev = Array.from({ length: n }, (_, i) => i - 1);
    const next = Array.from({ length: n }, (_, i) => (i + 1 < n ? i + 1 : -1));
    const version = new Array(n).fill(0);
    const alive = new Array(n).fill(true);
    const heap = new Heap();
    const consider = (i: number) => {
      const j = next[i];
      if (j < 0) return;
      const m = this.merges.get(`${sym[i]},${sym[j]}`);
      if (m) heap.push([m.rank, i, version[i]]);
    };
    for (let i = 0; i + 1 < n; i++) consider(i);
    while (heap.size) {
      const [rank, i, ver] = heap.pop();
      if (!alive[i] || ver !== version[i]) continue;
      const j = next[i];
      if (j < 0) continue;
      const m = this.merges.get(`${sym[i]},${sym[j]}`);
      if (!m || m.rank !== rank) continue;
      sym[i] = m.id;
      alive[j] = false;
      next[i] = next[j];
      if (next[j] >= 0) prev[next[j]] = i;
      version[i]++;
      consider(i);
      if (prev[i] >= 0) {
        version[prev[i]]++;
        consider(prev[i]);
      }
    }
    const out: number[] = [];
    for (let i = 0; i >= 0; i = next[i]) out.push(sym[i]);
    return out;
  }
}

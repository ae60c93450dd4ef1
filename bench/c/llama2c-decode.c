/*
 * Decode timing harness around llama2.c's run.c (not part of llmc: its code is compiled in from a
 * checkout named at build time, never copied here). Build (bench/llama2c.ts does this):
 *   gcc -O2 -DRUN_C='"/path/to/llama2.c/run.c"' -Dmain=llama2c_main bench/c/llama2c-decode.c -lm -o decode
 * Usage: decode model.bin steps rounds
 * Greedy decoding from BOS (id 1) for `steps` positions, `rounds` times; prints one JSON object:
 * the ids of the first round and, per position, the fastest forward() time over the rounds (ns).
 */
#include RUN_C
#undef main

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc != 4) { fprintf(stderr, "usage: %s model.bin steps rounds\n", argv[0]); return 2; }
  Transformer tr;
  build_transformer(&tr, argv[1]);
  int steps = atoi(argv[2]), rounds = atoi(argv[3]);
  if (steps > tr.config.seq_len) steps = tr.config.seq_len;
  long long *best = malloc(sizeof(long long) * steps);
  int *ids = malloc(sizeof(int) * steps);
  for (int p = 0; p < steps; p++) best[p] = -1;
  for (int r = 0; r < rounds; r++) {
    int token = 1;
    for (int p = 0; p < steps; p++) {
      long long t0 = now_ns();
      float *logits = forward(&tr, token, p);
      long long dt = now_ns() - t0;
      int next = 0;
      for (int i = 1; i < tr.config.vocab_size; i++) if (logits[i] > logits[next]) next = i;
      if (best[p] < 0 || dt < best[p]) best[p] = dt;
      if (r == 0) ids[p] = next;
      token = next;
    }
  }
  printf("{\"ids\":[");
  for (int p = 0; p < steps; p++) printf(p ? ",%d" : "%d", ids[p]);
  printf("],\"ns\":[");
  for (int p = 0; p < steps; p++) printf(p ? ",%lld" : "%lld", best[p]);
  printf("]}\n");
  free_transformer(&tr);
  return 0;
}

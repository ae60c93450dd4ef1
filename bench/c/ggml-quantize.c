/*
 * ggml's own single-thread reference quantizers, timed (llmc does not carry ggml: its
 * ggml-quants.c is compiled in from a checkout named at build time). Build (bench/ggml-quant.ts):
 *   gcc -O3 -march=native -I$GGML/src -I$GGML/include $GGML/src/ggml-quants.c bench/c/ggml-quantize.c -lm -o q
 * Usage: q input.f32 row_length budget_ms TYPE...   (input: raw little-endian float32)
 * For each TYPE, quantizes every row of the input repeatedly for about budget_ms (at least twice) and
 * prints one JSON object {"TYPE": best seconds for the whole input, ...}. F16 and BF16 are the loops of
 * ggml.c's ggml_fp32_to_fp16_row / ggml_fp32_to_bf16_row_ref (ggml-impl.h's conversions).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ggml.h"
#include "ggml-impl.h"
#include "ggml-quants.h"

/* ggml.c symbols ggml-quants.c links against; the reference quantizers never call them. */
void ggml_abort(const char * file, int line, const char * fmt, ...) { fprintf(stderr, "ggml_abort %s:%d %s\n", file, line, fmt); abort(); }
size_t ggml_row_size(enum ggml_type type, int64_t ne) { (void)type; (void)ne; abort(); }
size_t ggml_type_size(enum ggml_type type) { (void)type; abort(); }
const char * ggml_type_name(enum ggml_type type) { (void)type; return "?"; }

static void f16_row(const float * x, void * y, int64_t n) { ggml_fp16_t * o = y; for (int64_t i = 0; i < n; i++) o[i] = GGML_FP32_TO_FP16(x[i]); }
static void bf16_row(const float * x, void * y, int64_t n) { ggml_bf16_t * o = y; for (int64_t i = 0; i < n; i++) o[i] = ggml_compute_fp32_to_bf16(x[i]); }

typedef void (*row_fn)(const float *, void *, int64_t);
static const struct { const char * name; row_fn fn; size_t block, bytes; } TYPES[] = {
  { "F16", f16_row, 1, 2 },
  { "BF16", bf16_row, 1, 2 },
  { "Q4_0", (row_fn)quantize_row_q4_0_ref, 32, sizeof(block_q4_0) },
  { "Q4_1", (row_fn)quantize_row_q4_1_ref, 32, sizeof(block_q4_1) },
  { "Q5_0", (row_fn)quantize_row_q5_0_ref, 32, sizeof(block_q5_0) },
  { "Q5_1", (row_fn)quantize_row_q5_1_ref, 32, sizeof(block_q5_1) },
  { "Q8_0", (row_fn)quantize_row_q8_0_ref, 32, sizeof(block_q8_0) },
  { "Q2_K", (row_fn)quantize_row_q2_K_ref, 256, sizeof(block_q2_K) },
  { "Q3_K", (row_fn)quantize_row_q3_K_ref, 256, sizeof(block_q3_K) },
  { "Q4_K", (row_fn)quantize_row_q4_K_ref, 256, sizeof(block_q4_K) },
  { "Q5_K", (row_fn)quantize_row_q5_K_ref, 256, sizeof(block_q5_K) },
  { "Q6_K", (row_fn)quantize_row_q6_K_ref, 256, sizeof(block_q6_K) },
};

static double now_s(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

int main(int argc, char ** argv) {
  if (argc < 5) { fprintf(stderr, "usage: %s input.f32 row_length budget_ms TYPE...\n", argv[0]); return 2; }
  FILE * f = fopen(argv[1], "rb");
  if (!f) { perror(argv[1]); return 1; }
  fseek(f, 0, SEEK_END);
  long n = ftell(f) / 4;
  fseek(f, 0, SEEK_SET);
  float * x = malloc(n * 4);
  if (fread(x, 4, n, f) != (size_t)n) { fprintf(stderr, "short read\n"); return 1; }
  fclose(f);
  long row = atol(argv[2]);
  double budget = atof(argv[3]) / 1000;
  unsigned char * out = malloc(n * 4);
  printf("{");
  for (int a = 4; a < argc; a++) {
    int t = -1;
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++) if (!strcmp(TYPES[i].name, argv[a])) t = (int)i;
    if (t < 0) { fprintf(stderr, "unknown type %s\n", argv[a]); return 2; }
    size_t row_bytes = row / TYPES[t].block * TYPES[t].bytes;
    double best = 1e30, t0 = now_s();
    for (int r = 0; r < 2 || now_s() - t0 < budget; r++) {
      double s = now_s();
      for (long i = 0; i < n / row; i++) TYPES[t].fn(x + i * row, out + i * row_bytes, row);
      double d = now_s() - s;
      if (d < best) best = d;
    }
    printf("%s\"%s\":%.9f", a > 4 ? "," : "", argv[a], best);
  }
  printf("}\n");
  return 0;
}

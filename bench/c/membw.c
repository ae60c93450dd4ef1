/*
 * What this machine allows 2 threads over 1 for the worker pool's work (issue 16: "2 threads ≥ 1.6×
 * one on the llama-100M fixture decode"): one decode token's weights of llama-100M laid out as the ts
 * runtime holds them (12 layers of q|k|v, o, gate|up, down, then lm_head; F32 rows of 4·cols bytes,
 * 352 MB; Q8_0 rows of 34-byte blocks, 93.6 MB), streamed by 1 and by 2 threads with 128-bit SIMD
 * (SSE4.1, as V8's WebAssembly SIMD). Built and run by bench/pool.bench.ts:
 *   gcc -O2 -msse4.1 -pthread bench/c/membw.c -o membw && ./membw [rounds]
 * Workloads: `read352` / `read94` (sum of 128-bit loads over the F32 / Q8_0 layout), `f32` (the
 * runtime's matmul_f32: per row 4 accumulators of f32x4 mul + add against a 768/2048-wide x), `q8`
 * (qdot_q8_0: per 34-byte block, 4 × (8 int8 weights widened to i16, pmaddwd with x's widened int8),
 * scaled by the f16 weight scale (a table, as the kernel) times x's block scale; two rows a pass, row r
 * and r + ⌊n/2⌋ of the piece), `alu` (the q8 arithmetic on registers only: how much of a second core
 * the machine gives right now, the yardstick for the others).
 * Patterns, for 2 threads: `whole` (read only: each thread one contiguous half of the buffer),
 * `split` (each thread its contiguous half of every matrix's rows, no waiting between matrices),
 * `split_sync` (the same, with a barrier after every pool call: 50 calls a token, q|k|v and gate|up
 * grouped, the last layer's q alone), `pool` (src/exec/runtime/pool.ts: chunk c of n of a call starts
 * at row R − ⌊R(n−c)²/n²⌋, n = min(R, max(4t, min(16t, ⌊bytes/128 KiB⌋))), claimed from a shared
 * counter, cut where a matrix ends, a barrier after every call). One thread runs every matrix whole.
 * Rounds are interleaved (every configuration once a round; each workload's group waits up to 2 s for
 * a quiet moment of the machine). Prints one JSON object: per
 * configuration the median and fastest ms per token, GB/s, and `cpu` (the median over rounds of the
 * smallest thread CPU time / wall time of a thread: 1 = never descheduled); then 2-thread ÷ 1-thread
 * speed-ups: the median of the rounds' ratios, fastest ÷ fastest, and `clean` (the medians over the
 * rounds in which every thread ran ≥ 95% of the wall time: on a shared machine, the figure that does
 * not depend on how much CPU the other processes left; 0 where no round was clean).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <smmintrin.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { HIDDEN = 768, FFN = 2048, KV = 256, LAYERS = 12, VOCAB = 16384, MAXT = 2, MAXM = 3, MAXCALLS = 64 };

typedef struct { size_t off; int rows, cols; } mat_t;
typedef struct { mat_t m[MAXM]; int n, rows, cols; } call_t;
typedef struct { uint8_t *buf; size_t bytes; call_t calls[MAXCALLS]; int ncalls; int q8; } layout_t;

static size_t row_bytes(int q8, int cols) { return q8 ? (size_t)cols / 32 * 34 : (size_t)cols * 4; }

static void add_call(layout_t *L, const int *rows, int n, int cols) {
  call_t *c = &L->calls[L->ncalls++];
  c->n = n; c->cols = cols; c->rows = 0;
  for (int i = 0; i < n; i++) {
    c->m[i] = (mat_t){ L->bytes, rows[i], cols };
    L->bytes += rows[i] * row_bytes(L->q8, cols);
    c->rows += rows[i];
  }
}

static void build(layout_t *L, int q8) {
  memset(L, 0, sizeof *L);
  L->q8 = q8;
  for (int l = 0; l < LAYERS; l++) {
    if (l < LAYERS - 1) add_call(L, (int[]){ HIDDEN, KV, KV }, 3, HIDDEN);
    else { add_call(L, (int[]){ HIDDEN }, 1, HIDDEN); add_call(L, (int[]){ KV, KV }, 2, HIDDEN); }
    add_call(L, (int[]){ HIDDEN }, 1, HIDDEN);
    add_call(L, (int[]){ FFN, FFN }, 2, HIDDEN);
    add_call(L, (int[]){ HIDDEN }, 1, FFN);
  }
  add_call(L, (int[]){ VOCAB }, 1, HIDDEN);
  if (posix_memalign((void **)&L->buf, 4096, L->bytes)) { fprintf(stderr, "out of memory\n"); exit(1); }
  uint32_t s = 12345;
  for (size_t i = 0; i < L->bytes; i += 4) { s = s * 1664525u + 1013904223u; memcpy(L->buf + i, &s, 4); }
  if (!q8) { float *f = (float *)L->buf; for (size_t i = 0; i < L->bytes / 4; i++) f[i] = (float)((int)((uint32_t)(i * 2654435761u) >> 24) - 128) / 256.0f; }
  else for (size_t i = 0; i < L->bytes; i += 34) { uint16_t h = 0x2000 | (L->buf[i] & 0x3ff); memcpy(L->buf + i, &h, 2); }
}

/* ---- kernels over rows [r0, r1) of a matrix ---- */
static float xf[FFN] __attribute__((aligned(16)));
static struct { float d; int8_t q[32]; } xq[FFN / 32];
static float f16tab[65536];
static volatile float sink_f;
static volatile int sink_i;

static void k_read(const layout_t *L, const mat_t *m, int r0, int r1) {
  size_t rb = row_bytes(L->q8, m->cols);
  const __m128i *p = (const __m128i *)(L->buf + m->off + r0 * rb), *e = (const __m128i *)(L->buf + m->off + r1 * rb);
  __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
  for (; p + 4 <= e; p += 4) {
    a0 = _mm_add_epi32(a0, _mm_load_si128(p)); a1 = _mm_add_epi32(a1, _mm_load_si128(p + 1));
    a2 = _mm_add_epi32(a2, _mm_load_si128(p + 2)); a3 = _mm_add_epi32(a3, _mm_load_si128(p + 3));
  }
  for (; p < e; p++) a0 = _mm_add_epi32(a0, _mm_load_si128(p));
  a0 = _mm_add_epi32(_mm_add_epi32(a0, a1), _mm_add_epi32(a2, a3));
  sink_i = _mm_cvtsi128_si32(a0);
}

static void k_f32(const layout_t *L, const mat_t *m, int r0, int r1) {
  size_t rb = row_bytes(0, m->cols);
  for (int r = r0; r < r1; r++) {
    const float *w = (const float *)(L->buf + m->off + r * rb);
    __m128 a0 = _mm_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int c = 0; c < m->cols; c += 16) {
      a0 = _mm_add_ps(a0, _mm_mul_ps(_mm_loadu_ps(w + c), _mm_load_ps(xf + c)));
      a1 = _mm_add_ps(a1, _mm_mul_ps(_mm_loadu_ps(w + c + 4), _mm_load_ps(xf + c + 4)));
      a2 = _mm_add_ps(a2, _mm_mul_ps(_mm_loadu_ps(w + c + 8), _mm_load_ps(xf + c + 8)));
      a3 = _mm_add_ps(a3, _mm_mul_ps(_mm_loadu_ps(w + c + 12), _mm_load_ps(xf + c + 12)));
    }
    a0 = _mm_add_ps(_mm_add_ps(a0, a1), _mm_add_ps(a2, a3));
    sink_f = _mm_cvtss_f32(_mm_hadd_ps(_mm_hadd_ps(a0, a0), a0));
  }
}

static inline __m128i wide8(const uint8_t *p) { return _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)p)); }

/* rows a and b (b < 0: a alone) of a Q8_0 matrix, as qdot_q8_0's pass. */
static void q8_pass(const uint8_t *wa, const uint8_t *wb, int nb) {
  __m128 acc0 = _mm_setzero_ps(), acc1 = acc0;
  for (int b = 0; b < nb; b++, wa += 34, wb = wb ? wb + 34 : NULL) {
    __m128i x0 = wide8((const uint8_t *)xq[b].q), x1 = wide8((const uint8_t *)xq[b].q + 8);
    __m128i x2 = wide8((const uint8_t *)xq[b].q + 16), x3 = wide8((const uint8_t *)xq[b].q + 24);
    float dx = xq[b].d;
    __m128i i0 = _mm_add_epi32(_mm_add_epi32(_mm_madd_epi16(wide8(wa + 2), x0), _mm_madd_epi16(wide8(wa + 10), x1)),
                               _mm_add_epi32(_mm_madd_epi16(wide8(wa + 18), x2), _mm_madd_epi16(wide8(wa + 26), x3)));
    acc0 = _mm_add_ps(acc0, _mm_mul_ps(_mm_cvtepi32_ps(i0), _mm_set1_ps(f16tab[*(const uint16_t *)wa] * dx)));
    if (wb) {
      __m128i i1 = _mm_add_epi32(_mm_add_epi32(_mm_madd_epi16(wide8(wb + 2), x0), _mm_madd_epi16(wide8(wb + 10), x1)),
                                 _mm_add_epi32(_mm_madd_epi16(wide8(wb + 18), x2), _mm_madd_epi16(wide8(wb + 26), x3)));
      acc1 = _mm_add_ps(acc1, _mm_mul_ps(_mm_cvtepi32_ps(i1), _mm_set1_ps(f16tab[*(const uint16_t *)wb] * dx)));
    }
  }
  acc0 = _mm_add_ps(acc0, acc1);
  sink_f = _mm_cvtss_f32(_mm_hadd_ps(_mm_hadd_ps(acc0, acc0), acc0));
}

static void k_q8(const layout_t *L, const mat_t *m, int r0, int r1) {
  size_t rb = row_bytes(1, m->cols);
  const uint8_t *w = L->buf + m->off;
  int nb = m->cols / 32, h = (r1 - r0) / 2;
  for (int r = r0; r < r0 + h; r++) q8_pass(w + r * rb, w + (r + h) * rb, nb);
  for (int r = r0 + 2 * h; r < r1; r++) q8_pass(w + r * rb, NULL, nb);
}

/* The q8 arithmetic on registers: `iters` blocks' worth of two rows. */
static void k_alu(long iters) {
  __m128i x0 = _mm_set1_epi16(3), x1 = _mm_set1_epi16(5), w0 = _mm_set1_epi16(7), w1 = _mm_set1_epi16(-2);
  __m128 a0 = _mm_setzero_ps(), a1 = a0, s = _mm_set1_ps(1e-9f);
  for (long i = 0; i < iters; i++) {
    __m128i i0 = _mm_add_epi32(_mm_madd_epi16(w0, x0), _mm_madd_epi16(w1, x1));
    __m128i i1 = _mm_add_epi32(_mm_madd_epi16(w1, x0), _mm_madd_epi16(w0, x1));
    a0 = _mm_add_ps(a0, _mm_mul_ps(_mm_cvtepi32_ps(i0), s));
    a1 = _mm_add_ps(a1, _mm_mul_ps(_mm_cvtepi32_ps(i1), s));
    __asm__ volatile("" : "+x"(w0), "+x"(w1));
  }
  a0 = _mm_add_ps(a0, a1);
  sink_f = _mm_cvtss_f32(a0);
}
enum { ALU_ITERS = 4000000 };

/* ---- threads ---- */
enum { W_READ352, W_READ94, W_F32, W_Q8, W_ALU, NW };
enum { P_ONE, P_WHOLE, P_SPLIT, P_SPLIT_SYNC, P_POOL, P_LANES, NP };
static const char *WNAME[NW] = { "read352", "read94", "f32", "q8", "alu" };
static const char *PNAME[NP] = { "one", "whole", "split", "split_sync", "pool", "lanes" };

static layout_t LF, LQ;
static struct { int w, p, t; } job;
static pthread_barrier_t start_bar, end_bar;
static _Atomic int claim[MAXCALLS][MAXT];
static _Atomic int bar_count, bar_sense;
static double tcpu[MAXT], twall[MAXT];

static double now(clockid_t c) { struct timespec ts; clock_gettime(c, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

static void spin_barrier(int t, int *sense) {
  *sense = !*sense;
  if (atomic_fetch_add(&bar_count, 1) == t - 1) { atomic_store(&bar_count, 0); atomic_store(&bar_sense, *sense); }
  else while (atomic_load_explicit(&bar_sense, memory_order_acquire) != *sense) __builtin_ia32_pause();
}

typedef void (*kfn)(const layout_t *, const mat_t *, int, int);

/* rows [r0, r1) of a call (its matrices' rows in a row), each piece within one matrix. */
static void run_rows(kfn k, const layout_t *L, const call_t *c, int r0, int r1) {
  for (int i = 0, s = 0; i < c->n && s < r1; s += c->m[i++].rows) {
    int lo = (r0 > s ? r0 : s) - s, hi = (r1 < s + c->m[i].rows ? r1 : s + c->m[i].rows) - s;
    if (hi > lo) k(L, &c->m[i], lo, hi);
  }
}

static int pool_chunks(const layout_t *L, const call_t *c, int t) {
  long work = (long)row_bytes(L->q8, c->cols) * c->rows, n = work / (128 << 10);
  if (n > 16 * t) n = 16 * t;
  if (n < 4 * t) n = 4 * t;
  return n < c->rows ? (int)n : c->rows;
}

static void work(int id, int *sense) {
  int w = job.w, p = job.p, t = job.t;
  double c0 = now(CLOCK_THREAD_CPUTIME_ID), w0 = now(CLOCK_MONOTONIC);
  if (w == W_ALU) k_alu(ALU_ITERS / t);
  else {
    const layout_t *L = w == W_READ94 || w == W_Q8 ? &LQ : &LF;
    kfn k = w == W_F32 ? k_f32 : w == W_Q8 ? k_q8 : k_read;
    if (p == P_WHOLE) {
      size_t half = L->bytes / 16 / t * 16;
      mat_t m = { id * half, 1, (int)((id == t - 1 ? L->bytes - id * half : half) / 4) };
      k_read(&(layout_t){ .buf = L->buf, .q8 = 0 }, &m, 0, 1);
    } else
      for (int ci = 0; ci < L->ncalls; ci++) {
        const call_t *c = &L->calls[ci];
        if (p == P_ONE) for (int i = 0; i < c->n; i++) k(L, &c->m[i], 0, c->m[i].rows);
        else if (p == P_POOL) {
          int n = pool_chunks(L, c, t), R = c->rows;
          for (int ch; (ch = atomic_fetch_add(&claim[ci][0], 1)) < n;)
            run_rows(k, L, c, R - (int)((long)R * (n - ch) * (n - ch) / ((long)n * n)), R - (int)((long)R * (n - ch - 1) * (n - ch - 1) / ((long)n * n)));
        } else if (p == P_LANES) {
          /* lane j: rows [jR/t, (j+1)R/t) in n/t chunks shrinking towards its end; thread id starts on lane id, then helps the next lanes */
          for (int j0 = 0; j0 < t; j0++) {
            int j = (id + j0) % t, a = (int)((long)c->rows * j / t), R = (int)((long)c->rows * (j + 1) / t) - a, n = pool_chunks(L, c, t) / t;
            if (n > R) n = R;
            for (int ch; (ch = atomic_fetch_add(&claim[ci][j], 1)) < n;)
              run_rows(k, L, c, a + R - (int)((long)R * (n - ch) * (n - ch) / ((long)n * n)), a + R - (int)((long)R * (n - ch - 1) * (n - ch - 1) / ((long)n * n)));
          }
        } else {
          int r0 = (int)((long)c->rows * id / t), r1 = (int)((long)c->rows * (id + 1) / t);
          run_rows(k, L, c, r0, r1);
        }
        if (p == P_POOL || p == P_LANES || p == P_SPLIT_SYNC) spin_barrier(t, sense);
      }
  }
  tcpu[id] = now(CLOCK_THREAD_CPUTIME_ID) - c0;
  twall[id] = now(CLOCK_MONOTONIC) - w0;
}

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg, sense = 0;
  for (;;) {
    pthread_barrier_wait(&start_bar);
    if (job.w < 0) return NULL;
    work(id, &sense);
    pthread_barrier_wait(&end_bar);
  }
}

static int main_sense;
/* One token of configuration (w, p, t): wall seconds; *cpu = the smallest thread CPU / wall share. */
static double run_job(int w, int p, int t, double *cpu) {
  for (int i = 0; i < MAXCALLS; i++) for (int j = 0; j < MAXT; j++) atomic_store(&claim[i][j], 0);
  job.w = w; job.p = p; job.t = t;
  double t0 = now(CLOCK_MONOTONIC);
  if (t > 1) pthread_barrier_wait(&start_bar);
  work(0, &main_sense);
  if (t > 1) pthread_barrier_wait(&end_bar);
  double wall = now(CLOCK_MONOTONIC) - t0;
  *cpu = 1;
  for (int i = 0; i < t; i++) if (tcpu[i] / twall[i] < *cpu) *cpu = tcpu[i] / twall[i];
  return wall;
}

/* Wait up to 2 s for a quiet moment (≤ 2 runnable threads in /proc/stat, this one included, 3 looks
 * in a row 20 ms apart) before a round: on a shared machine, more rounds then run undisturbed. */
static void await_quiet(void) {
  for (int ok = 0, tries = 0; ok < 3 && tries < 100; tries++) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return;
    char line[256];
    int running = 0;
    while (fgets(line, sizeof line, f)) if (sscanf(line, "procs_running %d", &running) == 1) break;
    fclose(f);
    ok = running <= 2 ? ok + 1 : 0;
    nanosleep(&(struct timespec){ 0, 20000000 }, NULL);
  }
}

static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double median(double *v, int n) { double s[256]; memcpy(s, v, n * sizeof *v); qsort(s, n, sizeof *s, cmpd); return s[n / 2]; }
/* The walls of the rounds in which every thread ran ≥ CLEAN of the time (not descheduled): into out, their count. */
#define CLEAN 0.95
static int clean(int i, int rounds, double cpu[][256], double wall[][256], double *out) {
  int n = 0;
  for (int r = 0; r < rounds; r++) if (cpu[i][r] >= CLEAN) out[n++] = wall[i][r];
  return n;
}
static double minimum(const double *v, int n) { double m = v[0]; for (int i = 1; i < n; i++) if (v[i] < m) m = v[i]; return m; }

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 11;
  if (rounds < 1 || rounds > 256) { fprintf(stderr, "usage: membw [rounds 1..256]\n"); return 2; }
  build(&LF, 0);
  build(&LQ, 1);
  for (int i = 0; i < FFN; i++) xf[i] = (float)((i * 37) % 101 - 50) / 64.0f;
  for (int b = 0; b < FFN / 32; b++) { xq[b].d = 0.01f * (b + 1); for (int j = 0; j < 32; j++) xq[b].q[j] = (int8_t)((b * 31 + j * 7) % 255 - 127); }
  for (int i = 0; i < 65536; i++) { uint32_t h = i, e = (h >> 10) & 31, m = h & 1023, f = (h & 0x8000) << 16 | (e ? (e + 112) << 23 | m << 13 : 0); memcpy(&f16tab[i], &f, 4); }
  pthread_barrier_init(&start_bar, NULL, MAXT);
  pthread_barrier_init(&end_bar, NULL, MAXT);
  pthread_t th;
  pthread_create(&th, NULL, worker, (void *)(intptr_t)1);

  struct { int w, p, t; } cfg[NW * NP];
  int ncfg = 0;
  for (int w = 0; w < NW; w++) {
    cfg[ncfg++] = (typeof(cfg[0])){ w, P_ONE, 1 };
    for (int p = P_WHOLE; p < NP; p++) {
      if (w == W_ALU && p != P_SPLIT) continue;
      if (p == P_WHOLE && w != W_READ352 && w != W_READ94) continue;
      cfg[ncfg++] = (typeof(cfg[0])){ w, p, 2 };
    }
  }
  static double wall[NW * NP][256], cpu[NW * NP][256], cleanw[NW * NP][256];
  int cleanN[NW * NP];
  double dummy;
  for (int i = 0; i < ncfg; i++) run_job(cfg[i].w, cfg[i].p, cfg[i].t, &dummy); /* warm-up: pages, caches */
  for (int r = 0; r < rounds; r++)
    for (int i = 0; i < ncfg; i++) {
      if (cfg[i].t == 1) await_quiet(); /* before each workload's group of patterns */
      wall[i][r] = run_job(cfg[i].w, cfg[i].p, cfg[i].t, &cpu[i][r]);
    }

  printf("{\"rounds\": %d, \"f32_bytes\": %zu, \"q8_bytes\": %zu, \"pool_calls\": %d, \"configs\": {", rounds, LF.bytes, LQ.bytes, LF.ncalls);
  for (int i = 0; i < ncfg; i++) {
    int w = cfg[i].w;
    double med = median(wall[i], rounds), best = minimum(wall[i], rounds);
    size_t bytes = w == W_ALU ? 0 : w == W_READ94 || w == W_Q8 ? LQ.bytes : LF.bytes;
    int nc = clean(i, rounds, cpu, wall, cleanw[i]);
    double cm = nc ? median(cleanw[i], nc) : 0;
    printf("%s\"%s_%s_%d\": {\"ms_median\": %.3f, \"ms_fastest\": %.3f, \"gb_s_median\": %.2f, \"cpu\": %.3f, \"clean_rounds\": %d, \"ms_clean_median\": %.3f, \"gb_s_clean\": %.2f}", i ? ", " : "",
           WNAME[w], PNAME[cfg[i].p], cfg[i].t, med * 1e3, best * 1e3, bytes / med / 1e9, median(cpu[i], rounds), nc, cm * 1e3, nc ? bytes / cm / 1e9 : 0);
    cleanN[i] = nc;
  }
  printf("}, \"speedup_2_over_1\": {");
  int first = 1;
  for (int i = 0; i < ncfg; i++) {
    if (cfg[i].t == 1) continue;
    int base = 0;
    while (!(cfg[base].w == cfg[i].w && cfg[base].t == 1)) base++;
    double ratios[256];
    for (int r = 0; r < rounds; r++) ratios[r] = wall[base][r] / wall[i][r];
    double c1 = cleanN[base] ? median(cleanw[base], cleanN[base]) : 0, c2 = cleanN[i] ? median(cleanw[i], cleanN[i]) : 0;
    printf("%s\"%s_%s\": {\"median\": %.3f, \"fastest\": %.3f, \"clean\": %.3f}", first ? "" : ", ", WNAME[cfg[i].w], PNAME[cfg[i].p],
           median(ratios, rounds), minimum(wall[base], rounds) / minimum(wall[i], rounds), c1 && c2 ? c1 / c2 : 0);
    first = 0;
  }
  printf("}}\n");
  job.w = -1;
  pthread_barrier_wait(&start_bar);
  pthread_join(th, NULL);
  return 0;
}

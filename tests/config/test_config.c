/* Tests of the configuration module: every bad configuration must fail with a
 * "file:line: ..." message that names the key and says what is accepted; good
 * ones fill zs__settings exactly; overrides, app keys and the hash behave as
 * zeroshard.h promises. Files are written to a fresh temporary directory. */
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/config.h"
#include "core/config_scan.h"
#include "core/config_schema.h"
#include "test_util.h"

#ifndef ZS_SOURCE_DIR
#error "ZS_SOURCE_DIR must name the source tree (see tests/config/CMakeLists.txt)"
#endif

static char g_dir[64];
static char g_written[256][128]; /* files to delete at the end */
static int g_written_count;

/* Writes `text` to <tmpdir>/<name> and returns the path (static storage per name). */
static const char *write_file(const char *name, const char *text) {
    static char paths[256][256];
    int slot = -1;
    for (int i = 0; i < g_written_count; i++)
        if (strcmp(g_written[i], name) == 0) slot = i;
    if (slot < 0) {
        ZT_REQUIRE(g_written_count < 256);
        slot = g_written_count++;
        snprintf(g_written[slot], sizeof g_written[slot], "%s", name);
    }
    snprintf(paths[slot], sizeof paths[slot], "%.63s/%.127s", g_dir, name);
    FILE *f = fopen(paths[slot], "w");
    ZT_REQUIRE(f != NULL);
    fputs(text, f);
    fclose(f);
    return paths[slot];
}

/* Loads text written as `name`; on success returns the config, else NULL. */
static zs_config *load_text(const char *name, const char *text, zs_status *status) {
    zs_config *cfg = NULL;
    *status = zs_config_load(write_file(name, text), &cfg);
    return *status == ZS_OK ? cfg : NULL;
}

#define LR "optimizer: { lr = 3e-4; };\n"

/* Expects loading `text` to fail with `status` and a message containing `text`. */
static void expect_load_fails(const char *name, const char *text, zs_status status,
                              const char *expected, int line) {
    zs_config *cfg = NULL;
    zs_status got = zs_config_load(write_file(name, text), &cfg);
    zt_fails_with_(got, status, expected, name, __FILE__, line);
    if (got == ZS_OK) zs_config_destroy(cfg);
}
#define LOAD_FAILS(name, text, status, expected) \
    expect_load_fails(name, text, status, expected, __LINE__)

static void test_defaults(void) {
    zs_status st;
    zs_config *cfg = load_text("minimal.cfg", LR, &st);
    ZT_OK(st);
    ZT_REQUIRE(cfg != NULL);
    const zs__settings *s = zs__config_settings(cfg);
    ZT_EQ_INT(s->backend, ZS_BACKEND_CPU);
    ZT_EQ_U64(s->seed, 42);
    ZT_EQ_INT(s->zero.stage, 0);
    ZT_EQ_INT(s->zero.max_live_units, 2);
    ZT_EQ_INT(s->zero.align, 16);
    ZT_EQ_INT(s->optimizer.kind, ZS_OPTIMIZER_ADAMW);
    ZT_CHECK(s->optimizer.lr == 3e-4);
    ZT_CHECK(s->optimizer.beta1 == 0.9);
    ZT_CHECK(s->optimizer.beta2 == 0.999);
    ZT_CHECK(s->optimizer.eps == 1e-8);
    ZT_CHECK(s->optimizer.weight_decay == 0.0);
    ZT_CHECK(s->optimizer.momentum == 0.0);
    ZT_EQ_INT(s->optimizer.nesterov, 0);
    ZT_EQ_INT(s->scheduler.kind, ZS_SCHEDULE_CONSTANT);
    ZT_EQ_INT(s->scheduler.warmup_steps, 0);
    ZT_EQ_INT(s->scheduler.total_steps, 0);
    ZT_CHECK(s->scheduler.min_lr == 0.0);
    ZT_EQ_INT(s->comm.reduce_scatter, ZS_COMM_IMPL_RING);
    ZT_EQ_INT(s->comm.all_gather, ZS_COMM_IMPL_AUTO);
    ZT_EQ_INT(s->comm.all_gather_mpi_from_bytes, 0);
    ZT_EQ_INT(s->comm.impl, ZS_COMM_LIBRARY_AUTO);
    ZT_EQ_INT(s->comm.staging_bytes, 16777216);
    ZT_EQ_INT(s->comm.host_staging, 0);
    ZT_EQ_INT(s->comm.segment_bytes, 4194304);
    ZT_EQ_INT(s->log.level, ZS_LOG_INFO);
    ZT_CHECK(strcmp(s->log.file, "") == 0);
    ZT_CHECK(strcmp(s->trace.file, "") == 0);
    ZT_EQ_INT(s->trace.capacity, 65536);
    ZT_EQ_INT(s->gradient_accumulation_steps, 1);
    ZT_CHECK(s->gradient_clipping == 0.0);
    ZT_EQ_INT(s->precision.dtype, ZS_DTYPE_FP32);
    ZT_EQ_INT(s->precision.reduce_dtype, ZS_REDUCE_DTYPE_COMPUTE);
    ZT_EQ_INT(s->precision.accumulate_dtype, ZS_ACCUMULATE_DTYPE_FP32);
    ZT_CHECK(s->precision.loss_scale == 0.0);
    ZT_EQ_INT(s->precision.initial_scale_power, 16);
    ZT_EQ_INT(s->precision.loss_scale_window, 1000);
    ZT_EQ_INT(s->precision.hysteresis, 2);
    ZT_EQ_INT(s->precision.consecutive_hysteresis, 0);
    ZT_CHECK(s->precision.min_loss_scale == 1.0);
    ZT_EQ_INT(s->precision.on_min_scale, ZS_MIN_SCALE_ABORT);
    ZT_EQ_INT(s->precision.max_consecutive_skips, 100);
    ZT_EQ_INT(s->precision.check_overflow, 1);
    ZT_CHECK(strstr(zs_config_path(cfg), "minimal.cfg") != NULL);
    zs_config_destroy(cfg);
    zs_config_destroy(NULL); /* a no-op */
    ZT_CHECK(zs__config_settings(NULL) == NULL);
}

static void test_every_key(void) {
    zs_status st;
    zs_config *cfg = load_text("all.cfg",
                               "backend = \"cuda\";\n"
                               "seed = 5000000000L;\n"
                               "zero: { stage = 3; max_live_units = 4; align = 0x40; };\n"
                               "optimizer: { type = \"sgd\"; lr = 1; beta1 = 0.5; beta2 = 0.75;\n"
                               "  eps = 1e-6; weight_decay = 0.1; momentum = 0.9; nesterov = true; };\n"
                               "scheduler: { type = \"warmup_cosine\"; warmup_steps = 10;\n"
                               "  total_steps = 3000000000L; min_lr = 0.5; };\n"
                               "comm: { reduce_scatter = \"mpi\"; all_gather = \"ring\";\n"
                               "  segment_bytes = 1073741824; };\n"
                               "log: { level = \"debug\"; file = \"run-%r.log\"; };\n"
                               "trace: { file = \"trace-%r.json\"; capacity = 16777216; };\n"
                               "gradient_accumulation_steps = 65536;\n"
                               "gradient_clipping = 1e6;\n"
                               "precision: { dtype = \"bf16\"; reduce_dtype = \"fp32\";\n"
                               "  accumulate_dtype = \"compute\"; loss_scale = 18446744073709551616.0;\n"
                               "  initial_scale_power = 64; loss_scale_window = 2147483648L;\n"
                               "  hysteresis = 1000; consecutive_hysteresis = true;\n"
                               "  min_loss_scale = 0.5; on_min_scale = \"continue\";\n"
                               "  max_consecutive_skips = 1000000; check_overflow = false; };\n",
                               &st);
    ZT_OK(st);
    ZT_REQUIRE(cfg != NULL);
    const zs__settings *s = zs__config_settings(cfg);
    ZT_EQ_INT(s->backend, ZS_BACKEND_CUDA);
    ZT_EQ_U64(s->seed, 5000000000ull);
    ZT_EQ_INT(s->zero.stage, 3);
    ZT_EQ_INT(s->zero.max_live_units, 4);
    ZT_EQ_INT(s->zero.align, 64);
    ZT_EQ_INT(s->optimizer.kind, ZS_OPTIMIZER_SGD);
    ZT_CHECK(s->optimizer.lr == 1.0); /* an integer literal for a float key */
    ZT_CHECK(s->optimizer.beta1 == 0.5 && s->optimizer.beta2 == 0.75);
    ZT_CHECK(s->optimizer.eps == 1e-6 && s->optimizer.weight_decay == 0.1);
    ZT_CHECK(s->optimizer.momentum == 0.9);
    ZT_EQ_INT(s->optimizer.nesterov, 1);
    ZT_EQ_INT(s->scheduler.kind, ZS_SCHEDULE_WARMUP_COSINE);
    ZT_EQ_INT(s->scheduler.warmup_steps, 10);
    ZT_EQ_INT(s->scheduler.total_steps, 3000000000ll); /* a 64-bit L literal */
    ZT_CHECK(s->scheduler.min_lr == 0.5);
    ZT_EQ_INT(s->comm.reduce_scatter, ZS_COMM_IMPL_MPI);
    ZT_EQ_INT(s->comm.all_gather, ZS_COMM_IMPL_RING);
    ZT_EQ_INT(s->comm.segment_bytes, 1073741824);
    ZT_EQ_INT(s->log.level, ZS_LOG_DEBUG);
    ZT_CHECK(strcmp(s->log.file, "run-%r.log") == 0);
    ZT_CHECK(strcmp(s->trace.file, "trace-%r.json") == 0);
    ZT_EQ_INT(s->trace.capacity, 16777216);
    ZT_EQ_INT(s->gradient_accumulation_steps, 65536);
    ZT_CHECK(s->gradient_clipping == 1e6);
    ZT_EQ_INT(s->precision.dtype, ZS_DTYPE_BF16);
    ZT_EQ_INT(s->precision.reduce_dtype, ZS_REDUCE_DTYPE_FP32);
    ZT_EQ_INT(s->precision.accumulate_dtype, ZS_ACCUMULATE_DTYPE_COMPUTE);
    ZT_CHECK(s->precision.loss_scale == 18446744073709551616.0); /* 2^64, the top of the range */
    ZT_EQ_INT(s->precision.initial_scale_power, 64);
    ZT_EQ_INT(s->precision.loss_scale_window, 2147483648ll);
    ZT_EQ_INT(s->precision.hysteresis, 1000);
    ZT_EQ_INT(s->precision.consecutive_hysteresis, 1);
    ZT_CHECK(s->precision.min_loss_scale == 0.5);
    ZT_EQ_INT(s->precision.on_min_scale, ZS_MIN_SCALE_CONTINUE);
    ZT_EQ_INT(s->precision.max_consecutive_skips, 1000000);
    ZT_EQ_INT(s->precision.check_overflow, 0); /* allowed outside fp16 */
    zs_config_destroy(cfg);
}

/* The keys of mixed precision and accumulation: every value each enum
 * accepts, the edges of every range, and the two cross-key rules, whose
 * errors point at the line of the key at fault. */
static void test_precision_keys(void) {
    static const struct {
        const char *text;
        zs_dtype dtype;
    } dtypes[] = {{"fp32", ZS_DTYPE_FP32}, {"fp16", ZS_DTYPE_FP16}, {"bf16", ZS_DTYPE_BF16}};
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, LR "precision: { dtype = \"%s\"; };\n", dtypes[i].text);
        zs_status st;
        zs_config *cfg = load_text("dtype.cfg", text, &st);
        ZT_OK(st);
        if (cfg) {
            ZT_EQ_INT(zs__config_settings(cfg)->precision.dtype, dtypes[i].dtype);
            zs_config_destroy(cfg);
        }
    }
    /* Lower edges, and fp16 with a static scale that is not a power of two
     * (allowed: only exactness of unscaling suffers). */
    zs_status st;
    zs_config *cfg = load_text("prec_low.cfg",
                               LR "gradient_accumulation_steps = 1;\ngradient_clipping = 0;\n"
                                  "precision: { dtype = \"fp16\"; loss_scale = 3; initial_scale_power = 0;\n"
                                  "  loss_scale_window = 1; hysteresis = 1; min_loss_scale = 1e-300;\n"
                                  "  max_consecutive_skips = 1; reduce_dtype = \"compute\";\n"
                                  "  accumulate_dtype = \"fp32\"; on_min_scale = \"abort\"; };\n",
                               &st);
    ZT_OK(st);
    if (cfg) {
        const zs__settings *s = zs__config_settings(cfg);
        ZT_EQ_INT(s->precision.dtype, ZS_DTYPE_FP16);
        ZT_CHECK(s->precision.loss_scale == 3.0);
        ZT_EQ_INT(s->precision.initial_scale_power, 0);
        ZT_EQ_INT(s->precision.loss_scale_window, 1);
        ZT_EQ_INT(s->precision.hysteresis, 1);
        ZT_CHECK(s->precision.min_loss_scale == 1e-300);
        ZT_EQ_INT(s->precision.max_consecutive_skips, 1);
        ZT_EQ_INT(s->precision.check_overflow, 1);
        zs_config_destroy(cfg);
    }
    /* min_loss_scale may equal the initial scale; above it only matters when
     * the scale is dynamic (fp16 without a static loss_scale). */
    const char *fine[] = {
        LR "precision: { dtype = \"fp16\"; initial_scale_power = 4; min_loss_scale = 16; };\n",
        LR "precision: { dtype = \"fp16\"; loss_scale = 8; initial_scale_power = 2; min_loss_scale = 64; };\n",
        LR "precision: { dtype = \"bf16\"; initial_scale_power = 0; min_loss_scale = 64; };\n",
        LR "precision: { dtype = \"fp32\"; min_loss_scale = 1e19; initial_scale_power = 0; };\n",
        LR "precision: { dtype = \"fp16\"; initial_scale_power = 64; min_loss_scale = 18446744073709551616.0; };\n",
        LR "precision: { dtype = \"bf16\"; check_overflow = false; };\n",
        LR "precision: { check_overflow = false; };\n",
    };
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        cfg = load_text("prec_fine.cfg", fine[i], &st);
        ZT_CHECK_MSG(st == ZS_OK, "case %zu: %s", i, zs_last_error());
        zs_config_destroy(cfg);
    }

    /* Ranges and types. */
    LOAD_FAILS("gas0.cfg", LR "gradient_accumulation_steps = 0;\n", ZS_ERR_CONFIG,
               "gas0.cfg:2: gradient_accumulation_steps = 0 is out of range; it must be from 1 to 65536");
    LOAD_FAILS("gas1.cfg", LR "gradient_accumulation_steps = 65537;\n", ZS_ERR_CONFIG,
               "gradient_accumulation_steps = 65537 is out of range");
    LOAD_FAILS("gas2.cfg", LR "gradient_accumulation_steps = 2.0;\n", ZS_ERR_CONFIG,
               "gradient_accumulation_steps = 2.0 is a float, but gradient_accumulation_steps "
               "takes only an integer literal");
    LOAD_FAILS("clip0.cfg", LR "gradient_clipping = -0.5;\n", ZS_ERR_CONFIG,
               "clip0.cfg:2: gradient_clipping = -0.5 is out of range; it must be in [0.0, 1000000.0]");
    LOAD_FAILS("clip1.cfg", LR "gradient_clipping = 1e7;\n", ZS_ERR_CONFIG,
               "gradient_clipping = 10000000.0 is out of range");
    LOAD_FAILS("clip2.cfg", LR "gradient_clipping = \"1.0\";\n", ZS_ERR_CONFIG,
               "gradient_clipping must be a number, not a string");
    LOAD_FAILS("pdtype.cfg", LR "precision: {\n  dtype = \"float16\";\n};\n", ZS_ERR_CONFIG,
               "pdtype.cfg:3: precision.dtype = \"float16\" is not an allowed value; it must be "
               "\"fp32\", \"fp16\" or \"bf16\"");
    LOAD_FAILS("pdtype2.cfg", LR "precision: { dtype = 16; };\n", ZS_ERR_CONFIG,
               "precision.dtype must be a string, one of \"fp32\", \"fp16\" or \"bf16\"; not an integer");
    LOAD_FAILS("preduce.cfg", LR "precision: { reduce_dtype = \"bf16\"; };\n", ZS_ERR_CONFIG,
               "precision.reduce_dtype = \"bf16\" is not an allowed value; it must be "
               "\"compute\" or \"fp32\"");
    LOAD_FAILS("paccum.cfg", LR "precision: { accumulate_dtype = \"fp16\"; };\n", ZS_ERR_CONFIG,
               "precision.accumulate_dtype = \"fp16\" is not an allowed value; it must be "
               "\"fp32\" or \"compute\"");
    LOAD_FAILS("pscale.cfg", LR "precision: { loss_scale = -1; };\n", ZS_ERR_CONFIG,
               "precision.loss_scale = -1.0 is out of range; it must be in [0.0, 1.8446744073709552e19]");
    LOAD_FAILS("pscale2.cfg", LR "precision: { loss_scale = 1e20; };\n", ZS_ERR_CONFIG,
               "precision.loss_scale = 1e20 is out of range");
    LOAD_FAILS("pscale3.cfg", LR "precision: { loss_scale = 1e999; };\n", ZS_ERR_CONFIG,
               "pscale3.cfg:2: precision.loss_scale = 1e999 is too large for a double");
    LOAD_FAILS("ppower.cfg", LR "precision: { initial_scale_power = 65; };\n", ZS_ERR_CONFIG,
               "precision.initial_scale_power = 65 is out of range; it must be from 0 to 64");
    LOAD_FAILS("ppower2.cfg", LR "precision: { initial_scale_power = -1; };\n", ZS_ERR_CONFIG,
               "precision.initial_scale_power = -1 is out of range");
    LOAD_FAILS("ppower3.cfg", LR "precision: { initial_scale_power = 16.0; };\n", ZS_ERR_CONFIG,
               "precision.initial_scale_power = 16.0 is a float");
    LOAD_FAILS("pwindow.cfg", LR "precision: { loss_scale_window = 0; };\n", ZS_ERR_CONFIG,
               "precision.loss_scale_window = 0 is out of range; it must be from 1 to 2147483648");
    LOAD_FAILS("pwindow2.cfg", LR "precision: { loss_scale_window = 2147483649L; };\n", ZS_ERR_CONFIG,
               "precision.loss_scale_window = 2147483649 is out of range");
    LOAD_FAILS("physt.cfg", LR "precision: { hysteresis = 0; };\n", ZS_ERR_CONFIG,
               "precision.hysteresis = 0 is out of range; it must be from 1 to 1000");
    LOAD_FAILS("physt2.cfg", LR "precision: { hysteresis = 1001; };\n", ZS_ERR_CONFIG,
               "precision.hysteresis = 1001 is out of range");
    LOAD_FAILS("pcons.cfg", LR "precision: { consecutive_hysteresis = 1; };\n", ZS_ERR_CONFIG,
               "precision.consecutive_hysteresis must be true or false, not an integer");
    LOAD_FAILS("pmin.cfg", LR "precision: { min_loss_scale = 0; };\n", ZS_ERR_CONFIG,
               "precision.min_loss_scale = 0.0 is out of range; it must be in (0.0, 1.8446744073709552e19]");
    LOAD_FAILS("pmin2.cfg", LR "precision: { min_loss_scale = -2; };\n", ZS_ERR_CONFIG,
               "precision.min_loss_scale = -2.0 is out of range");
    LOAD_FAILS("ppolicy.cfg", LR "precision: { on_min_scale = \"skip\"; };\n", ZS_ERR_CONFIG,
               "precision.on_min_scale = \"skip\" is not an allowed value; it must be \"abort\" "
               "or \"continue\"");
    LOAD_FAILS("pskips.cfg", LR "precision: { max_consecutive_skips = 0; };\n", ZS_ERR_CONFIG,
               "precision.max_consecutive_skips = 0 is out of range; it must be from 1 to 1000000");
    LOAD_FAILS("pskips2.cfg", LR "precision: { max_consecutive_skips = 1000001; };\n", ZS_ERR_CONFIG,
               "precision.max_consecutive_skips = 1000001 is out of range");
    LOAD_FAILS("pcheck.cfg", LR "precision: { check_overflow = \"yes\"; };\n", ZS_ERR_CONFIG,
               "precision.check_overflow must be true or false, not a string");
    LOAD_FAILS("punknown.cfg", LR "precision: {\n  loss_scale_windw = 10;\n};\n", ZS_ERR_CONFIG,
               "punknown.cfg:3: unknown key 'precision.loss_scale_windw'; did you mean "
               "'precision.loss_scale_window'?");
    LOAD_FAILS("pgroup.cfg", LR "precision = \"fp16\";\n", ZS_ERR_CONFIG,
               "pgroup.cfg:2: precision must be a group (precision: { ... };), not a string");
    LOAD_FAILS("ptop.cfg", LR "dtype = \"fp16\";\n", ZS_ERR_CONFIG,
               "unknown key 'dtype'; did you mean 'precision.dtype'?");

    /* Cross-key rules. fp16 without overflow checking points at check_overflow. */
    LOAD_FAILS("pcross1.cfg",
               LR "precision: {\n  check_overflow = false;\n  dtype = \"fp16\";\n};\n",
               ZS_ERR_CONFIG,
               "pcross1.cfg:3: precision.check_overflow = false is not allowed with "
               "precision.dtype = \"fp16\"");
    /* It holds for a static fp16 scale too: overflow can happen at any scale. */
    LOAD_FAILS("pcross2.cfg",
               LR "precision: { dtype = \"fp16\"; loss_scale = 128; check_overflow = false; };\n",
               ZS_ERR_CONFIG, "set check_overflow = true (the default), or use \"bf16\" or \"fp32\"");
    /* min_loss_scale above the initial dynamic scale points at min_loss_scale... */
    LOAD_FAILS("pcross3.cfg",
               LR "precision: {\n  dtype = \"fp16\";\n  min_loss_scale = 65537;\n};\n",
               ZS_ERR_CONFIG,
               "pcross3.cfg:4: precision.min_loss_scale = 65537.0 is greater than the initial "
               "dynamic loss scale 2^precision.initial_scale_power = 2^16 = 65536.0; lower "
               "min_loss_scale or raise initial_scale_power");
    /* ...also when an override of initial_scale_power breaks the rule, and the
     * failed override changes nothing. */
    cfg = load_text("pcross4.cfg", LR "precision: {\n  dtype = \"fp16\";\n  min_loss_scale = 4;\n};\n",
                    &st);
    ZT_OK(st);
    if (cfg) {
        ZT_FAILS_WITH(zs_config_override(cfg, "precision.initial_scale_power=1"), ZS_ERR_CONFIG,
                      "pcross4.cfg:4: "
                      "precision.min_loss_scale = 4.0 is greater than the initial dynamic loss "
                      "scale 2^precision.initial_scale_power = 2^1 = 2.0");
        ZT_EQ_INT(zs__config_settings(cfg)->precision.initial_scale_power, 16);
        ZT_OK(zs_config_override(cfg, "precision.initial_scale_power=2"));
        ZT_EQ_INT(zs__config_settings(cfg)->precision.initial_scale_power, 2);
        /* A static scale makes the dynamic keys irrelevant, so the rule lapses;
         * back to dynamic, it applies again. */
        const char *to_static[] = {"precision.loss_scale=1024", "precision.initial_scale_power=0"};
        ZT_OK(zs_config_override_list(cfg, 2, to_static));
        ZT_FAILS_WITH(zs_config_override(cfg, "precision.loss_scale=0"), ZS_ERR_CONFIG,
                      "pcross4.cfg:4: precision.min_loss_scale = 4.0 is greater than");
        /* fp16 and check_overflow may only change together. */
        ZT_FAILS_WITH(zs_config_override(cfg, "precision.check_overflow=false"), ZS_ERR_CONFIG,
                      "override 'precision.check_overflow=false': precision.check_overflow = "
                      "false is not allowed with precision.dtype = \"fp16\"");
        const char *to_bf16[] = {"precision.check_overflow=false", "precision.dtype=bf16"};
        ZT_OK(zs_config_override_list(cfg, 2, to_bf16));
        ZT_EQ_INT(zs__config_settings(cfg)->precision.dtype, ZS_DTYPE_BF16);
        ZT_EQ_INT(zs__config_settings(cfg)->precision.check_overflow, 0);
        /* Going back to fp16 blames the dtype line when check_overflow came from
         * an override, which has no line of its own. */
        ZT_FAILS_WITH(zs_config_override(cfg, "precision.dtype=fp16"), ZS_ERR_CONFIG,
                      "override 'precision.dtype=fp16': precision.check_overflow = false is not "
                      "allowed");
        ZT_OK(zs_config_override(cfg, "gradient_accumulation_steps=8"));
        ZT_EQ_INT(zs__config_settings(cfg)->gradient_accumulation_steps, 8);
        ZT_OK(zs_config_override(cfg, "gradient_clipping=1"));
        ZT_CHECK(zs__config_settings(cfg)->gradient_clipping == 1.0);
        ZT_OK(zs_config_override(cfg, "precision.on_min_scale=continue"));
        ZT_EQ_INT(zs__config_settings(cfg)->precision.on_min_scale, ZS_MIN_SCALE_CONTINUE);
        zs_config_destroy(cfg);
    }
}

static void test_bad_configs(void) {
    /* Syntax errors carry libconfig's file and line. */
    LOAD_FAILS("syntax.cfg", LR "zero: {\n  stage = ;\n};\n", ZS_ERR_CONFIG, "syntax.cfg:3: syntax error");
    LOAD_FAILS("unknown.cfg", LR "zero: {\n  stag = 1;\n};\n", ZS_ERR_CONFIG,
               "unknown.cfg:3: unknown key 'zero.stag'; did you mean 'zero.stage'?");
    LOAD_FAILS("unknown_top.cfg", LR "zro: { stage = 1; };\n", ZS_ERR_CONFIG,
               "unknown_top.cfg:2: unknown key 'zro'; did you mean 'zero'?");
    LOAD_FAILS("wrong_group.cfg", LR "stage = 1;\n", ZS_ERR_CONFIG,
               "wrong_group.cfg:2: unknown key 'stage'; did you mean 'zero.stage'?");
    LOAD_FAILS("far.cfg", LR "zero: { frobnicate = 1; };\n", ZS_ERR_CONFIG,
               "unknown key 'zero.frobnicate'; the keys of group 'zero' are: zero.stage");
    LOAD_FAILS("string_int.cfg", LR "zero: { stage = \"two\"; };\n", ZS_ERR_CONFIG,
               "string_int.cfg:2: zero.stage must be an integer, not a string");
    LOAD_FAILS("float_int.cfg", LR "zero: { stage = 2.0; };\n", ZS_ERR_CONFIG,
               "float_int.cfg:2: zero.stage = 2.0 is a float, but zero.stage takes only an integer literal");
    LOAD_FAILS("float_int2.cfg", LR "zero: { max_live_units = 4e0; };\n", ZS_ERR_CONFIG,
               "zero.max_live_units = 4.0 is a float");
    LOAD_FAILS("range.cfg", "\n\n" LR "zero: { stage = 7; };\n", ZS_ERR_CONFIG,
               "range.cfg:4: zero.stage = 7 is out of range; it must be 0, 1, 2 or 3");
    LOAD_FAILS("range2.cfg", LR "zero: { max_live_units = 0; };\n", ZS_ERR_CONFIG,
               "zero.max_live_units = 0 is out of range; it must be from 1 to 65536");
    LOAD_FAILS("range3.cfg", "optimizer: { lr = 11.0; };\n", ZS_ERR_CONFIG,
               "range3.cfg:1: optimizer.lr = 11.0 is out of range; it must be in (0.0, 10.0]");
    LOAD_FAILS("range4.cfg", "optimizer: { lr = 1e-3; beta1 = 1.0; };\n", ZS_ERR_CONFIG,
               "optimizer.beta1 = 1.0 is out of range; it must be in [0.0, 1.0)");
    LOAD_FAILS("dup.cfg", LR "optimizer: { beta1 = 0.5; };\n", ZS_ERR_CONFIG,
               "dup.cfg:2: duplicate setting name");
    LOAD_FAILS("range5.cfg", "optimizer: { lr = 1e-3; beta2 = 1; };\n", ZS_ERR_CONFIG,
               "optimizer.beta2 = 1.0 is out of range; it must be in [0.0, 1.0)");
    LOAD_FAILS("range6.cfg", LR "seed = -1;\n", ZS_ERR_CONFIG,
               "seed = -1 is out of range; it must be at least 0");
    LOAD_FAILS("inf.cfg", "optimizer: { lr = 1e400; };\n", ZS_ERR_CONFIG,
               "inf.cfg:1: optimizer.lr = 1e400 is too large for a double (the largest is "
               "1.7976931348623157e308); it would silently be read as inf");
    /* Wrapped integers: libconfig 1.5 would read these as -2147483648, 0 and
     * -2147483648 without a word. */
    LOAD_FAILS("wrap1.cfg", LR "seed = 2147483648;\n", ZS_ERR_CONFIG,
               "wrap1.cfg:2: seed = 2147483648 does not fit in 32 bits (libconfig would "
               "silently wrap it); write it as 2147483648L");
    LOAD_FAILS("wrap2.cfg", LR "app: {\n  big = 4294967296;\n};\n", ZS_ERR_CONFIG,
               "wrap2.cfg:3: app.big = 4294967296 does not fit in 32 bits");
    LOAD_FAILS("wrap3.cfg", LR "comm: { segment_bytes = 0x80000000; };\n", ZS_ERR_CONFIG,
               "wrap3.cfg:2: comm.segment_bytes = 0x80000000 does not fit in 32 bits");
    LOAD_FAILS("wrap4.cfg", LR "app: { x = -2147483649; };\n", ZS_ERR_CONFIG,
               "app.x = -2147483649 does not fit in 32 bits");
    LOAD_FAILS("wrap5.cfg", LR "app: { x = [1, 2, 99999999999999999999]; };\n", ZS_ERR_CONFIG,
               "app.x[2] = 99999999999999999999 does not fit in 64 bits");
    LOAD_FAILS("wrap6.cfg", LR "seed = 9223372036854775808L;\n", ZS_ERR_CONFIG,
               "seed = 9223372036854775808L does not fit in 64 bits");
    LOAD_FAILS("wrap7.cfg", LR "seed = 0x8000000000000000L;\n", ZS_ERR_CONFIG,
               "seed = 0x8000000000000000L does not fit in 64 bits");
    /* Missing file and missing required key. */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/no_such_file.cfg", g_dir);
    zs_config *cfg = NULL;
    ZT_FAILS_WITH(zs_config_load(missing, &cfg), ZS_ERR_IO,
                  "no_such_file.cfg': No such file or directory");
    ZT_CHECK(strncmp(zs_last_error(), "cannot open '", 13) == 0);
    ZT_CHECK(cfg == NULL);
    ZT_FAILS_WITH(zs_config_load(g_dir, &cfg), ZS_ERR_IO, "': Is a directory");
    ZT_FAILS_WITH(zs_config_load(NULL, &cfg), ZS_ERR_INVALID_ARGUMENT, "");
    LOAD_FAILS("nolr.cfg", "zero: { stage = 1; };\n", ZS_ERR_CONFIG,
               "nolr.cfg: missing required key 'optimizer.lr' (the learning rate, e.g. "
               "optimizer: { lr = 3e-4; })");
    LOAD_FAILS("empty.cfg", "", ZS_ERR_CONFIG, "missing required key 'optimizer.lr'");
    /* Enums list what they accept. */
    LOAD_FAILS("enum.cfg", "optimizer: {\n  lr = 1e-3;\n  type = \"adamx\";\n};\n", ZS_ERR_CONFIG,
               "enum.cfg:3: optimizer.type = \"adamx\" is not an allowed value; it must be "
               "\"sgd\", \"adam\" or \"adamw\"");
    LOAD_FAILS("enum2.cfg", LR "backend = 1;\n", ZS_ERR_CONFIG,
               "backend must be a string, one of \"cpu\", \"cuda\" or \"sim\"; not an integer");
    LOAD_FAILS("enum3.cfg", LR "log: { level = \"trace\"; };\n", ZS_ERR_CONFIG,
               "log.level = \"trace\" is not an allowed value; it must be \"error\", \"warn\", "
               "\"info\" or \"debug\"");
    /* Groups and scalars in each other's place. */
    LOAD_FAILS("group.cfg", LR "zero: {\n  stage: { x = 1; };\n};\n", ZS_ERR_CONFIG,
               "group.cfg:3: zero.stage must be an integer, not a group");
    LOAD_FAILS("scalar.cfg", LR "zero = 2;\n", ZS_ERR_CONFIG,
               "scalar.cfg:2: zero must be a group (zero: { ... };), not an integer");
    LOAD_FAILS("list.cfg", LR "zero: { stage = [1]; };\n", ZS_ERR_CONFIG,
               "zero.stage must be an integer, not an array");
    LOAD_FAILS("app_scalar.cfg", LR "app = 3;\n", ZS_ERR_CONFIG, "app must be a group");
    LOAD_FAILS("bool2.cfg", "optimizer: { lr = 0.1; momentum = 0.9; nesterov = 1; };\n",
               ZS_ERR_CONFIG, "bool2.cfg:1: optimizer.nesterov must be true or false, not an integer");
    LOAD_FAILS("string.cfg", LR "log: { file = 5; };\n", ZS_ERR_CONFIG,
               "log.file must be a string, not an integer");
    /* Cross-key rules point at the key at fault. */
    LOAD_FAILS("warmup.cfg",
               LR "scheduler: {\n  type = \"warmup_cosine\";\n  warmup_steps = 50;\n"
                  "  total_steps = 40;\n};\n",
               ZS_ERR_CONFIG,
               "warmup.cfg:5: scheduler.type = \"warmup_cosine\" needs scheduler.total_steps > "
               "scheduler.warmup_steps, but total_steps = 40 and warmup_steps = 50");
    LOAD_FAILS("warmup2.cfg", LR "scheduler: {\n  type = \"warmup_cosine\";\n};\n", ZS_ERR_CONFIG,
               "warmup2.cfg:3: scheduler.type = \"warmup_cosine\" needs");
    LOAD_FAILS("minlr.cfg", LR "scheduler: {\n  min_lr = 1e-3;\n};\n", ZS_ERR_CONFIG,
               "minlr.cfg:3: scheduler.min_lr = 0.001 is greater than optimizer.lr = 0.0003");
    LOAD_FAILS("nesterov.cfg", "optimizer: {\n  type = \"sgd\";\n  lr = 0.1;\n  nesterov = true;\n};\n",
               ZS_ERR_CONFIG, "nesterov.cfg:4: optimizer.nesterov = true needs optimizer.momentum > 0");
    LOAD_FAILS("align.cfg", LR "zero: { align = 24; };\n", ZS_ERR_CONFIG,
               "align.cfg:2: zero.align = 24 is not a power of two; it must be a power of two "
               "from 1 to 4096");
    LOAD_FAILS("align2.cfg", LR "zero: { align = 8192; };\n", ZS_ERR_CONFIG,
               "zero.align = 8192 is out of range");
    char long_file[700] = "log: { file = \"";
    memset(long_file + strlen(long_file), 'x', 600);
    long_file[15 + 600] = '\0';
    strcpy(long_file + strlen(long_file), "\"; };\n" LR);
    LOAD_FAILS("longfile.cfg", long_file, ZS_ERR_CONFIG,
               "log.file is 600 bytes long; it must be at most 511 bytes");
    snprintf(long_file, sizeof long_file, "trace: { file = \"%0600d\"; };\n" LR, 0);
    LOAD_FAILS("longtrace.cfg", long_file, ZS_ERR_CONFIG,
               "trace.file is 600 bytes long; it must be at most 511 bytes");
    LOAD_FAILS("tracecap.cfg", LR "trace: { capacity = 1000; };\n", ZS_ERR_CONFIG,
               "trace.capacity = 1000 is out of range");
    LOAD_FAILS("tracefile.cfg", LR "trace: { file = true; };\n", ZS_ERR_CONFIG,
               "trace.file must be a string, not a bool");
}

static void test_good_literals(void) {
    zs_status st;
    /* Digits inside strings, comments and names are not integer literals. */
    zs_config *cfg = load_text("literals.cfg",
                               "# seed = 99999999999999999999\n"
                               "// 4294967296\n"
                               "/* 0x80000000\n   2147483648 */\n"
                               "optimizer: { lr = 2; };\n"
                               "seed = 2147483647;\n"
                               "app: {\n"
                               "  s = \"3000000000 \\\" 4000000000\";\n"
                               "  n12345678901 = 1;\n"
                               "  f = 3000000000.0;\n"
                               "  e = 1e12;\n"
                               "  neg = -2147483648;\n"
                               "  big = 2147483648L;\n"
                               "  h = 0x7fffffff;\n"
                               "  hl = 0x100000000L;\n"
                               "};\n",
                               &st);
    ZT_OK(st);
    ZT_REQUIRE(cfg != NULL);
    ZT_CHECK(zs__config_settings(cfg)->optimizer.lr == 2.0);
    ZT_EQ_U64(zs__config_settings(cfg)->seed, 2147483647u);
    int64_t v = 0;
    ZT_OK(zs_config_app_int(cfg, "neg", 0, INT64_MIN, INT64_MAX, &v));
    ZT_EQ_INT(v, -2147483648ll);
    ZT_OK(zs_config_app_int(cfg, "big", 0, 0, INT64_MAX, &v));
    ZT_EQ_INT(v, 2147483648ll);
    ZT_OK(zs_config_app_int(cfg, "h", 0, 0, INT64_MAX, &v));
    ZT_EQ_INT(v, 0x7fffffff);
    ZT_OK(zs_config_app_int(cfg, "hl", 0, 0, INT64_MAX, &v));
    ZT_EQ_INT(v, 0x100000000ll);
    double d = 0;
    ZT_OK(zs_config_app_float(cfg, "f", 0, 0, 1e20, &d));
    ZT_CHECK(d == 3e9);
    const char *s = NULL;
    ZT_OK(zs_config_app_string(cfg, "s", "", &s));
    ZT_CHECK(s && strcmp(s, "3000000000 \" 4000000000") == 0);
    zs_config_destroy(cfg);

    /* The scanner on its own. */
    static const char ok_text[] = "a = \"2147483648\"; # 2147483648\n b1 = 1.5e300; c = -0x10;";
    ZT_OK(zs__config_scan_text(ok_text, sizeof ok_text - 1, "mem", NULL, 0));
    static const char bad_text[] = "a = 1;\n\n/* x */ b = 3000000000;";
    ZT_FAILS_WITH(zs__config_scan_text(bad_text, sizeof bad_text - 1, "mem", NULL, 0),
                  ZS_ERR_CONFIG, "mem:3: b = 3000000000 does not fit in 32 bits");
}

static void test_includes(void) {
    zs_status st;
    write_file("inc_good.cfg", "zero: { stage = 2; };\n");
    zs_config *cfg = load_text("main_inc.cfg", LR "@include \"inc_good.cfg\"\nseed = 7;\n", &st);
    ZT_OK(st);
    if (cfg) {
        ZT_EQ_INT(zs__config_settings(cfg)->zero.stage, 2);
        ZT_EQ_U64(zs__config_settings(cfg)->seed, 7);
        zs_config_destroy(cfg);
    }
    /* The scan follows includes: a wrapped literal there names that file. */
    write_file("inc_wrap.cfg", "# included\nseed = 2147483648;\n");
    LOAD_FAILS("main_inc2.cfg", LR "@include \"inc_wrap.cfg\"\n", ZS_ERR_CONFIG,
               "inc_wrap.cfg:2: seed = 2147483648 does not fit in 32 bits");
    write_file("inc_bad.cfg", "zero: {\n  stag = 1;\n};\n");
    LOAD_FAILS("main_inc3.cfg", LR "@include \"inc_bad.cfg\"\n", ZS_ERR_CONFIG,
               "inc_bad.cfg:2: unknown key 'zero.stag'; did you mean 'zero.stage'?");
    LOAD_FAILS("main_inc4.cfg", LR "@include \"inc_missing.cfg\"\n", ZS_ERR_IO,
               "main_inc4.cfg:2: @include \"inc_missing.cfg\" (included files are found "
               "relative to");
    ZT_CHECK_MSG(strstr(zs_last_error(), "inc_missing.cfg': No such file or directory") != NULL,
                 "%s", zs_last_error());
}

/* Files that are not plain small text files: directories, FIFOs, huge files,
 * NUL bytes. They live in their own directory under g_dir, which an atexit
 * handler removes even when a check fails and the test exits early. */
static char g_hostile[128];

static void remove_tree(const char *path) {
    struct stat info;
    if (lstat(path, &info) != 0) return;
    if (S_ISDIR(info.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char child[512];
            snprintf(child, sizeof child, "%s/%s", path, e->d_name);
            remove_tree(child);
        }
        if (d) closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static pid_t g_hostile_owner;

/* Runs at exit. A child that libconfig ends with exit() runs it too, so only
 * the process that made the directory removes it. */
static void remove_hostile(void) {
    if (g_hostile[0] && getpid() == g_hostile_owner) remove_tree(g_hostile);
}

/* The path of `name` inside the hostile directory (static storage, 8 slots). */
static const char *hostile_path(const char *name) {
    static char paths[8][512];
    static int next;
    char *out = paths[next++ % 8];
    snprintf(out, sizeof paths[0], "%s/%s", g_hostile, name);
    return out;
}

/* Writes `length` bytes (which may include NULs) as `name` in the hostile
 * directory and returns its path. */
static const char *write_bytes(const char *name, const char *bytes, size_t length) {
    const char *path = hostile_path(name);
    FILE *f = fopen(path, "wb");
    ZT_REQUIRE(f != NULL);
    ZT_REQUIRE(fwrite(bytes, 1, length, f) == length);
    ZT_REQUIRE(fclose(f) == 0);
    return path;
}
#define WRITE_TEXT(name, text) write_bytes(name, text, strlen(text))

/* Loads `path` in a child process, so that a load that exits the process
 * (libconfig's scanner calls exit(2) on a failed read) or hangs (a FIFO)
 * fails this check instead of ending or blocking the whole test. The child
 * reports the status and message through a pipe and leaves with _exit, so
 * it never runs the parent's atexit cleanup. */
static void load_in_child(const char *path, zs_status expected, const char *text, int line) {
    int fds[2];
    ZT_REQUIRE(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    ZT_REQUIRE(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        alarm(5); /* a hang is a failure: SIGALRM ends the child */
        zs_config *cfg = NULL;
        zs_status st = zs_config_load(path, &cfg);
        if (st == ZS_OK) zs_config_destroy(cfg);
        char message[4096];
        int n = snprintf(message, sizeof message, "%d %s", (int)st, st == ZS_OK ? "" : zs_last_error());
        size_t size = n < 0 ? 0 : (size_t)n >= sizeof message ? sizeof message - 1 : (size_t)n;
        ssize_t written = write(fds[1], message, size);
        _exit(written == (ssize_t)size ? 0 : 3);
    }
    close(fds[1]);
    char message[4096];
    size_t used = 0;
    for (;;) {
        ssize_t n = read(fds[0], message + used, sizeof message - 1 - used);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        used += (size_t)n;
    }
    message[used] = '\0';
    close(fds[0]);
    int wstatus = 0;
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    int normal = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0 && used > 0;
    ZT_CHECK_MSG(normal, "line %d: loading %s: the child %s %d (libconfig exited or the load hung)",
                 line, path, WIFEXITED(wstatus) ? "exited with status" : "was killed by signal",
                 WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : WTERMSIG(wstatus));
    if (!normal) return;
    int got = atoi(message);
    const char *got_text = strchr(message, ' ');
    got_text = got_text ? got_text + 1 : "";
    ZT_CHECK_MSG(got == (int)expected && strstr(got_text, text) != NULL,
                 "line %d: loading %s\n  expected status %s with a message containing \"%s\"\n"
                 "  got      status %s with message \"%s\"",
                 line, path, zs_status_name(expected), text, zs_status_name((zs_status)got),
                 got_text);
}
#define LOAD_IN_CHILD(path, status, text) load_in_child(path, status, text, __LINE__)

/* Issue 9, defect 8: @include of "" or of a directory made libconfig's flex
 * scanner call exit(2) inside zs_config_load; a FIFO as the file or as an
 * include blocked forever. Each must fail fast with a message instead. */
static void test_include_targets(void) {
    ZT_REQUIRE(mkdir(hostile_path("subdir"), 0700) == 0);
    ZT_REQUIRE(mkfifo(hostile_path("pipe.cfg"), 0600) == 0);
    WRITE_TEXT("empty.cfg", "");

    LOAD_IN_CHILD(WRITE_TEXT("inc_empty.cfg", LR "@include \"\"\n"), ZS_ERR_CONFIG,
                  "inc_empty.cfg:2: @include \"\" names no file");
    LOAD_IN_CHILD(WRITE_TEXT("inc_dir.cfg", LR "seed = 1;\n@include \"subdir\"\n"), ZS_ERR_IO,
                  "inc_dir.cfg:3: @include \"subdir\" (included files are found relative to");
    LOAD_IN_CHILD(hostile_path("inc_dir.cfg"), ZS_ERR_IO, "subdir': Is a directory");
    /* "." names the include directory itself. */
    LOAD_IN_CHILD(WRITE_TEXT("inc_dot.cfg", LR "@include \".\"\n"), ZS_ERR_IO, "Is a directory");
    /* A FIFO with no writer, as the top file and as an include. */
    LOAD_IN_CHILD(hostile_path("pipe.cfg"), ZS_ERR_CONFIG,
                  "pipe.cfg' is a FIFO (named pipe); a configuration must be a regular file");
    LOAD_IN_CHILD(WRITE_TEXT("inc_pipe.cfg", LR "@include \"pipe.cfg\"\n"), ZS_ERR_CONFIG,
                  "inc_pipe.cfg:2: @include \"pipe.cfg\": '");
    LOAD_IN_CHILD(hostile_path("inc_pipe.cfg"), ZS_ERR_CONFIG, "is a FIFO (named pipe)");
    /* A character device. */
    LOAD_IN_CHILD("/dev/null", ZS_ERR_CONFIG, "'/dev/null' is a character device");
    /* Nested: the bad include is inside an included file, indented (which
     * libconfig still treats as an include), and the message names that file. */
    WRITE_TEXT("level1.cfg", "seed = 3;\n\t @include \"subdir\"\n");
    LOAD_IN_CHILD(WRITE_TEXT("nested.cfg", LR "@include \"level1.cfg\"\n"), ZS_ERR_IO,
                  "level1.cfg:2: @include \"subdir\"");
    WRITE_TEXT("level1b.cfg", "seed = 3;\n@include \"\"\n");
    LOAD_IN_CHILD(WRITE_TEXT("nested2.cfg", LR "@include \"level1b.cfg\"\n"), ZS_ERR_CONFIG,
                  "level1b.cfg:2: @include \"\" names no file");
    /* Names are read with libconfig's escapes: it drops the backslash of
     * "sub\dir" and opens the directory "subdir", even when a regular file
     * literally named sub\dir exists. */
    WRITE_TEXT("sub\\dir", "seed = 4;\n");
    LOAD_IN_CHILD(WRITE_TEXT("escaped.cfg", LR "@include \"sub\\dir\"\n"), ZS_ERR_IO,
                  "subdir': Is a directory");
    /* ...and `\\` is one backslash, so this one is the regular file. */
    LOAD_IN_CHILD(WRITE_TEXT("escaped2.cfg", LR "@include \"sub\\\\dir\"\n"), ZS_OK, "");
    /* Not at the start of a line, @include is a syntax error for libconfig,
     * which opens nothing: the directory is never looked at. */
    LOAD_IN_CHILD(WRITE_TEXT("midline.cfg", LR "seed = 1; @include \"subdir\"\n"), ZS_ERR_CONFIG,
                  "midline.cfg:2: syntax error");
    /* Cycles, found whatever the spelling of the path. */
    WRITE_TEXT("cycle_a.cfg", "@include \"cycle_b.cfg\"\n");
    WRITE_TEXT("cycle_b.cfg", "\n@include \"./cycle_a.cfg\"\n");
    LOAD_IN_CHILD(WRITE_TEXT("cycle.cfg", LR "@include \"cycle_a.cfg\"\n"), ZS_ERR_CONFIG,
                  "cycle_b.cfg:2: @include \"./cycle_a.cfg\" includes '");
    LOAD_IN_CHILD(hostile_path("cycle.cfg"), ZS_ERR_CONFIG, "an include cycle");
    LOAD_IN_CHILD(WRITE_TEXT("self.cfg", LR "@include \"self.cfg\"\n"), ZS_ERR_CONFIG,
                  "self.cfg:2: @include \"self.cfg\" includes '");
    /* Depth: libconfig allows 10 nested includes; the 11th is refused. */
    for (int i = 1; i <= 11; i++) {
        char name[32], text[64];
        snprintf(name, sizeof name, "chain%d.cfg", i);
        snprintf(text, sizeof text, "@include \"chain%d.cfg\"\n", i + 1);
        WRITE_TEXT(name, text);
    }
    WRITE_TEXT("chain11.cfg", "seed = 11;\n");
    LOAD_IN_CHILD(WRITE_TEXT("chain_ok.cfg", LR "@include \"chain2.cfg\"\n"), ZS_OK, "");
    LOAD_IN_CHILD(WRITE_TEXT("chain_deep.cfg", LR "@include \"chain1.cfg\"\n"), ZS_ERR_CONFIG,
                  "chain10.cfg:1: @include \"chain11.cfg\" is nested more than 10 deep");
    /* The number of includes, counting repeats. */
    char *many = malloc(300 * 32 + 64);
    ZT_REQUIRE(many != NULL);
    size_t used = (size_t)sprintf(many, LR);
    for (int i = 0; i < 300; i++) used += (size_t)sprintf(many + used, "@include \"empty.cfg\"\n");
    LOAD_IN_CHILD(write_bytes("many.cfg", many, used), ZS_ERR_CONFIG,
                  "many.cfg:258: @include \"empty.cfg\" is the include number 257 of this "
                  "configuration, more than the limit of 256");
    used = (size_t)sprintf(many, LR);
    for (int i = 0; i < 256; i++) used += (size_t)sprintf(many + used, "@include \"empty.cfg\"\n");
    LOAD_IN_CHILD(write_bytes("many_ok.cfg", many, used), ZS_OK, "");
    free(many);
}

/* Issue 22, item 14: libconfig 1.5 opened `@include "/abs/x.cfg"` as
 * "<dir>//abs/x.cfg". An absolute name is itself now, at any depth, while a
 * relative name is still found in the top file's directory. The scan
 * expands includes itself, so messages are mapped back to file and line. */
static void test_absolute_includes(void) {
    char text[1024];
    zs_status st;
    /* The included files live in the hostile directory, below the top file's
     * directory, so a name joined to the include directory cannot work. */
    const char *abs_inc = WRITE_TEXT("abs_inc.cfg", "zero: { stage = 3; };\n");
    ZT_REQUIRE(abs_inc[0] == '/');
    snprintf(text, sizeof text, LR "@include \"%s\"\nseed = 9;\n", abs_inc);
    zs_config *cfg = load_text("abs_top.cfg", text, &st);
    ZT_OK(st);
    if (cfg) {
        ZT_EQ_INT(zs__config_settings(cfg)->zero.stage, 3);
        ZT_EQ_U64(zs__config_settings(cfg)->seed, 9);
        zs_config_destroy(cfg);
    }
    /* Nested: a relative include pulls in a file that includes an absolute
     * one, which includes a relative one (found in the top directory). */
    write_file("abs_leaf.cfg", "app: { leaf = 5; };\n");
    const char *abs_mid = WRITE_TEXT("abs_mid.cfg", "seed = 11;\n@include \"abs_leaf.cfg\"\n");
    snprintf(text, sizeof text, "@include \"%s\"\n", abs_mid);
    write_file("abs_rel.cfg", text);
    cfg = load_text("abs_top2.cfg", LR "@include \"abs_rel.cfg\"\n", &st);
    ZT_OK(st);
    if (cfg) {
        int64_t leaf = 0;
        ZT_EQ_U64(zs__config_settings(cfg)->seed, 11);
        ZT_OK(zs_config_app_int(cfg, "leaf", 0, 0, 10, &leaf));
        ZT_EQ_INT(leaf, 5);
        zs_config_destroy(cfg);
    }
    /* A missing absolute file is named as it was written. */
    LOAD_FAILS("abs_missing.cfg", LR "@include \"/nonexistent_zeroshard_dir/x.cfg\"\n", ZS_ERR_IO,
               "abs_missing.cfg:2: @include \"/nonexistent_zeroshard_dir/x.cfg\" (an absolute "
               "path): cannot open '/nonexistent_zeroshard_dir/x.cfg'");
    /* Messages name the included file and its own line... */
    const char *abs_bad = WRITE_TEXT("abs_bad.cfg", "\n\nzero: { stag = 1; };\n");
    snprintf(text, sizeof text, LR "@include \"%s\"\n", abs_bad);
    char expected[512];
    snprintf(expected, sizeof expected, "%s:3: unknown key 'zero.stag'", abs_bad);
    LOAD_FAILS("abs_badtop.cfg", text, ZS_ERR_CONFIG, expected);
    write_file("abs_syntax_inc.cfg", "seed = 1;\n\nzero: { stage = ; };\n");
    LOAD_FAILS("abs_syntax.cfg", LR "@include \"abs_syntax_inc.cfg\"\n", ZS_ERR_CONFIG,
               "abs_syntax_inc.cfg:3: syntax error");
    /* ...and lines after an include are the including file's again. */
    LOAD_FAILS("abs_after.cfg", LR "@include \"abs_leaf.cfg\"\n\nbogus = 1;\n", ZS_ERR_CONFIG,
               "abs_after.cfg:4: unknown key 'bogus'");
    LOAD_FAILS("abs_after2.cfg", LR "@include \"abs_leaf.cfg\"\nseed = ;\n", ZS_ERR_CONFIG,
               "abs_after2.cfg:3: syntax error");
    /* The rest of the directive's line is read after the included text, as
     * libconfig did: a `#` comment that ends the included file without a
     * newline does not swallow it... */
    WRITE_TEXT("no_newline.cfg", "seed = 5; # no newline at the end");
    LOAD_IN_CHILD(WRITE_TEXT("rest.cfg", LR "@include \"no_newline.cfg\" bogus = 1;\n"),
                  ZS_ERR_CONFIG, "rest.cfg:2: unknown key 'bogus'");
    /* ...and it does not start a line, so an @include there is still a
     * syntax error that opens nothing (here: not the directory). */
    ZT_REQUIRE(mkdir(hostile_path("subdir2"), 0700) == 0);
    WRITE_TEXT("empty2.cfg", "");
    LOAD_IN_CHILD(WRITE_TEXT("rest2.cfg", LR "@include \"empty2.cfg\" @include \"subdir2\"\n"),
                  ZS_ERR_CONFIG, "rest2.cfg:2: syntax error");
    /* An included file must end outside strings, comments and include names:
     * libconfig would carry them on into the including file. */
    WRITE_TEXT("open_comment.cfg", "seed = 1;\n/* never closed\n");
    LOAD_IN_CHILD(WRITE_TEXT("inc_open_comment.cfg", LR "@include \"open_comment.cfg\"\n"),
                  ZS_ERR_CONFIG, "open_comment.cfg:2: a /* comment is never closed");
    WRITE_TEXT("open_string.cfg", "app: { s = \"never closed\n");
    LOAD_IN_CHILD(WRITE_TEXT("inc_open_string.cfg", LR "@include \"open_string.cfg\"\n"),
                  ZS_ERR_CONFIG, "open_string.cfg:1: app.s = a string is never closed");
    WRITE_TEXT("open_name.cfg", "@include \"never closed\n");
    LOAD_IN_CHILD(WRITE_TEXT("inc_open_name.cfg", LR "@include \"open_name.cfg\"\n"),
                  ZS_ERR_CONFIG, "open_name.cfg:1: the name after @include is never closed");
}

/* Issue 9, defect 9: float literals that underflow to 0 or overflow to inf,
 * NUL bytes, and files too large for libconfig's quadratic string parsing. */
static void test_hostile_text(void) {
    /* Underflow: 1e-400 read as 0 turned clipping, decay or a static loss
     * scale off. The message names file, line and key. */
    LOAD_FAILS("under1.cfg", LR "gradient_clipping = 1e-400;\n", ZS_ERR_CONFIG,
               "under1.cfg:2: gradient_clipping = 1e-400 is too small for a double (the smallest "
               "normal magnitude is 2.2250738585072014e-308); it would silently be read as 0");
    LOAD_FAILS("under2.cfg", "optimizer: {\n  lr = 3e-4;\n  weight_decay = 1e-400;\n};\n",
               ZS_ERR_CONFIG, "under2.cfg:3: optimizer.weight_decay = 1e-400 is too small");
    LOAD_FAILS("under3.cfg", LR "precision: { dtype = \"fp16\";\n  loss_scale = 1e-400; };\n",
               ZS_ERR_CONFIG, "under3.cfg:3: precision.loss_scale = 1e-400 is too small");
    LOAD_FAILS("under4.cfg", LR "gradient_clipping = -0.0001e-330;\n", ZS_ERR_CONFIG,
               "gradient_clipping = -0.0001e-330 is too small");
    LOAD_FAILS("under5.cfg", LR "app: { x = 1e-310; };\n", ZS_ERR_CONFIG,
               "under5.cfg:2: app.x = 1e-310 is too small for a double"); /* subnormal */
    LOAD_FAILS("under6.cfg", LR "app: {\n  xs = [1.0, 2.0,\n    .5e-999];\n};\n", ZS_ERR_CONFIG,
               "under6.cfg:4: app.xs[2] = .5e-999 is too small");
    LOAD_FAILS("under7.cfg", LR "app: { l = ( { a = 1.0; }, { b = 2.0; c = 1E-400; } ); };\n",
               ZS_ERR_CONFIG, "app.l[1].c = 1E-400 is too small");
    /* Overflow, also in an included file (named, with its line). */
    LOAD_FAILS("over1.cfg", LR "app: { big = -1e400; };\n", ZS_ERR_CONFIG,
               "over1.cfg:2: app.big = -1e400 is too large for a double (the largest is "
               "1.7976931348623157e308); it would silently be read as -inf");
    write_file("over_inc.cfg", "\nscheduler: {\n  min_lr = 2e308;\n};\n");
    LOAD_FAILS("over2.cfg", LR "@include \"over_inc.cfg\"\n", ZS_ERR_CONFIG,
               "over_inc.cfg:3: scheduler.min_lr = 2e308 is too large for a double");
    /* A group opened before an include continues in the included file. */
    write_file("inner_inc.cfg", "  min_lr = 1e-999;\n");
    LOAD_FAILS("over3.cfg", LR "scheduler: {\n@include \"inner_inc.cfg\"\n};\n", ZS_ERR_CONFIG,
               "inner_inc.cfg:1: scheduler.min_lr = 1e-999 is too small");
    /* Zero written any way, and the extremes a double holds, still load. */
    zs_status st;
    zs_config *cfg = load_text("zeros.cfg",
                               LR "gradient_clipping = 0e-400;\napp: { a = 0.0e999; "
                                  "b = 2.2250738585072014e-308; c = 1.7976931348623157e308; "
                                  "d = -0.000; };\n",
                               &st);
    ZT_OK(st);
    if (cfg) {
        double d = 1;
        ZT_CHECK(zs__config_settings(cfg)->gradient_clipping == 0.0);
        ZT_OK(zs_config_app_float(cfg, "a", 1, -1, 1, &d));
        ZT_CHECK(d == 0.0);
        ZT_OK(zs_config_app_float(cfg, "b", 1, 0, 1, &d));
        ZT_CHECK(d == 2.2250738585072014e-308);
        ZT_OK(zs_config_app_float(cfg, "c", 1, 0, DBL_MAX, &d));
        ZT_CHECK(d == DBL_MAX);
        ZT_OK(zs_config_app_float(cfg, "d", 1, -1, 1, &d));
        zs_config_destroy(cfg);
    }

    /* NUL bytes: libconfig read "x\0y" as "x" without a word. */
    static const char nul_string[] = LR "app: {\n  s = \"x\0y\";\n};\n";
    load_in_child(write_bytes("nul.cfg", nul_string, sizeof nul_string - 1), ZS_ERR_CONFIG,
                  "nul.cfg:3: a NUL byte (at byte offset 42)", __LINE__);
    static const char nul_comment[] = "# \0\n" LR;
    LOAD_IN_CHILD(write_bytes("nul2.cfg", nul_comment, sizeof nul_comment - 1), ZS_ERR_CONFIG,
                  "nul2.cfg:1: a NUL byte");
    write_bytes("nul_inc.cfg", "\n\n\0", 3);
    LOAD_IN_CHILD(WRITE_TEXT("nul3.cfg", LR "@include \"nul_inc.cfg\"\n"), ZS_ERR_CONFIG,
                  "nul_inc.cfg:3: a NUL byte");

    /* Size: a 50 MB string took libconfig over 12 minutes. The sparse file is
     * refused by its size before anything is read. */
    const char *huge = hostile_path("huge.cfg");
    FILE *f = fopen(huge, "wb");
    ZT_REQUIRE(f != NULL);
    ZT_REQUIRE(fputs(LR "app: { s = \"", f) >= 0);
    ZT_REQUIRE(fseek(f, 50L * 1000 * 1000, SEEK_SET) == 0);
    ZT_REQUIRE(fputs("\"; };\n", f) >= 0);
    ZT_REQUIRE(fclose(f) == 0);
    LOAD_IN_CHILD(huge, ZS_ERR_CONFIG,
                  "huge.cfg' is 50000006 bytes, more than the limit of 1048576 bytes for a "
                  "configuration file");
    /* Exactly 1 MiB loads; one byte more does not, also as an include. */
    size_t limit = (size_t)1 << 20;
    char *big = malloc(limit + 2);
    ZT_REQUIRE(big != NULL);
    size_t head = (size_t)sprintf(big, LR "app: { s = \"");
    memset(big + head, 'x', limit - head - 6);
    memcpy(big + limit - 6, "\"; };\n", 6);
    LOAD_IN_CHILD(write_bytes("mib.cfg", big, limit), ZS_OK, "");
    big[limit - 1] = ' ';
    big[limit] = '\n';
    LOAD_IN_CHILD(write_bytes("mib_plus.cfg", big, limit + 1), ZS_ERR_CONFIG,
                  "mib_plus.cfg' is 1048577 bytes, more than the limit of 1048576 bytes");
    LOAD_IN_CHILD(WRITE_TEXT("inc_big.cfg", "@include \"mib_plus.cfg\"\n"), ZS_ERR_CONFIG,
                  "inc_big.cfg:1: @include \"mib_plus.cfg\": '");
    /* The total over includes: five files just under 1 MiB each (comments,
     * so nothing is slow to parse) exceed 4 MiB together. */
    memset(big, '#', limit - 1);
    big[limit - 1] = '\n';
    write_bytes("part.cfg", big, limit);
    LOAD_IN_CHILD(WRITE_TEXT("parts.cfg", LR "@include \"part.cfg\"\n@include \"part.cfg\"\n"
                                             "@include \"part.cfg\"\n@include \"part.cfg\"\n"),
                  ZS_ERR_CONFIG,
                  "parts.cfg:5: @include \"part.cfg\": '");
    LOAD_IN_CHILD(hostile_path("parts.cfg"), ZS_ERR_CONFIG,
                  "past the limit of 4194304 bytes in all");
    free(big);
}

/* Issue 22, item 13: an override's value is read by the same literal
 * readers as a file's, so it is refused exactly when the same literal in a
 * file is, with the same words after the "file:line: " or "override '...': "
 * prefix. `file_text` holds the literal at `key`; `assignment` sets it. */
static void expect_same_refusal(const char *name, const char *file_text, const char *assignment,
                                const char *expected, int line) {
    zs_config *cfg = NULL;
    zs_status got = zs_config_load(write_file(name, file_text), &cfg);
    zt_fails_with_(got, ZS_ERR_CONFIG, expected, name, __FILE__, line);
    if (got == ZS_OK) zs_config_destroy(cfg);
    char from_file[1024] = "";
    const char *tail = strstr(zs_last_error(), expected);
    snprintf(from_file, sizeof from_file, "%s", tail ? tail : "(file message lacks it)");

    zs_status st;
    cfg = load_text("same_base.cfg", LR, &st);
    ZT_REQUIRE(cfg != NULL);
    got = zs_config_override(cfg, assignment);
    zt_fails_with_(got, ZS_ERR_CONFIG, expected, assignment, __FILE__, line);
    char prefix[512];
    snprintf(prefix, sizeof prefix, "override '%s': ", assignment);
    const char *message = zs_last_error();
    ZT_CHECK_MSG(strncmp(message, prefix, strlen(prefix)) == 0 &&
                     strcmp(message + strlen(prefix), from_file) == 0,
                 "line %d: the override and the file should be refused in the same words:\n"
                 "  file:     \"%s\"\n  override: \"%s\"",
                 line, from_file, message);
    zs_config_destroy(cfg);
}
#define SAME_REFUSAL(name, file_text, assignment, expected) \
    expect_same_refusal(name, file_text, assignment, expected, __LINE__)

static void test_override_literals(void) {
    /* 1e-400 became 0 through strtod and turned weight decay off. */
    SAME_REFUSAL("same_wd.cfg", "optimizer: { lr = 3e-4;\n  weight_decay = 1e-400; };\n",
                 "optimizer.weight_decay=1e-400",
                 "optimizer.weight_decay = 1e-400 is too small for a double");
    SAME_REFUSAL("same_minlr.cfg", LR "scheduler: { min_lr = 1e-400; };\n",
                 "scheduler.min_lr=1e-400", "scheduler.min_lr = 1e-400 is too small for a double");
    SAME_REFUSAL("same_sub.cfg", LR "app: { x = -4.9e-324; };\n", "app.x=-4.9e-324",
                 "app.x = -4.9e-324 is too small for a double"); /* a subnormal */
    SAME_REFUSAL("same_inf.cfg", LR "gradient_clipping = 1e400;\n", "gradient_clipping=1e400",
                 "gradient_clipping = 1e400 is too large for a double");
    SAME_REFUSAL("same_int64.cfg", LR "seed = 99999999999999999999L;\n",
                 "seed=99999999999999999999L",
                 "seed = 99999999999999999999L does not fit in 64 bits");
    SAME_REFUSAL("same_neg64.cfg", LR "app: { x = -9223372036854775809L; };\n",
                 "app.x=-9223372036854775809L", "app.x = -9223372036854775809L does not fit");
    SAME_REFUSAL("same_hex.cfg", LR "app: { x = 0x10000000000000000L; };\n",
                 "app.x=0x10000000000000000L", "app.x = 0x10000000000000000L does not fit");
    /* libconfig drops \x00 without a word: "a\x00b" read "ab". */
    SAME_REFUSAL("same_nul.cfg", LR "app: { s = \"a\\x00b\"; };\n", "app.s=\"a\\x00b\"",
                 "app.s = a string holds the escape \\x00, a NUL byte");
    SAME_REFUSAL("same_open.cfg", LR "app: { s = \"abc; };\n", "app.s=\"abc",
                 "app.s = a string is never closed");

    /* What is accepted reads the same both ways: zero written any way, the
     * extremes, 64-bit integers, and every escape libconfig knows (a
     * backslash before anything else stays a backslash). */
    zs_status st;
    zs_config *from_file = load_text(
        "same_good.cfg",
        LR "app: { z = 0e-400; tiny = 2.2250738585072014e-308; wide = -9223372036854775808L;\n"
           "  s = \"a\\x41\\q\\t\\\\\\\"\\x7e\"; };\n",
        &st);
    ZT_OK(st);
    zs_config *overridden = load_text("same_base2.cfg", LR, &st);
    ZT_OK(st);
    if (!from_file || !overridden) {
        zs_config_destroy(from_file);
        zs_config_destroy(overridden);
        return;
    }
    static const char *const sets[] = {"app.z=0e-400", "app.tiny=2.2250738585072014e-308",
                                       "app.wide=-9223372036854775808L",
                                       "app.s=\"a\\x41\\q\\t\\\\\\\"\\x7e\""};
    ZT_OK(zs_config_override_list(overridden, 4, sets));
    zs_config *both[2] = {from_file, overridden};
    for (int i = 0; i < 2; i++) {
        double z = 1, tiny = 0;
        int64_t wide = 0;
        const char *text = NULL;
        ZT_OK(zs_config_app_float(both[i], "z", 1, -1, 1, &z));
        ZT_CHECK(z == 0.0);
        ZT_OK(zs_config_app_float(both[i], "tiny", 0, 0, 1, &tiny));
        ZT_CHECK(tiny == 2.2250738585072014e-308);
        ZT_OK(zs_config_app_int(both[i], "wide", 0, INT64_MIN, INT64_MAX, &wide));
        ZT_CHECK(wide == INT64_MIN);
        ZT_OK(zs_config_app_string(both[i], "s", "", &text));
        ZT_CHECK_MSG(text && strcmp(text, "aA\\q\t\\\"~") == 0, "%s: s reads \"%s\"",
                     i == 0 ? "file" : "override", text ? text : "(null)");
    }
    zs_config_destroy(from_file);
    zs_config_destroy(overridden);
}

static void test_overrides(void) {
    zs_status st;
    zs_config *cfg = load_text("ovr.cfg",
                               "optimizer: {\n  type = \"sgd\";\n  lr = 0.1;\n  momentum = 0.9;\n"
                               "  nesterov = true;\n};\nzero: { stage = 1; };\napp: { steps = 10; };\n",
                               &st);
    ZT_OK(st);
    ZT_REQUIRE(cfg != NULL);
    const uint64_t h0 = zs_config_hash(cfg);
    ZT_OK(zs_config_override(cfg, "zero.stage=2"));
    ZT_EQ_INT(zs__config_settings(cfg)->zero.stage, 2);
    const uint64_t h2 = zs_config_hash(cfg);
    ZT_CHECK(h2 != h0);
    ZT_OK(zs_config_override(cfg, " zero.stage = 1 "));
    ZT_EQ_U64(zs_config_hash(cfg), h0); /* back to the same values, the same hash */

    /* Failures leave everything as it was and say which override failed. */
    ZT_FAILS_WITH(zs_config_override(cfg, "zero.stage=9"), ZS_ERR_CONFIG,
                  "override 'zero.stage=9': zero.stage = 9 is out of range; it must be 0, 1, 2 or 3");
    ZT_CHECK(strncmp(zs_last_error(), "override 'zero.stage=9': ", 25) == 0);
    ZT_EQ_INT(zs__config_settings(cfg)->zero.stage, 1);
    ZT_EQ_U64(zs_config_hash(cfg), h0);
    ZT_FAILS_WITH(zs_config_override(cfg, "zero.stag=2"), ZS_ERR_CONFIG,
                  "override 'zero.stag=2': unknown key 'zero.stag'; did you mean 'zero.stage'?");
    ZT_FAILS_WITH(zs_config_override(cfg, "zero.stage=2.5"), ZS_ERR_CONFIG,
                  "zero.stage = 2.5 is a float");
    ZT_FAILS_WITH(zs_config_override(cfg, "zero.stage"), ZS_ERR_CONFIG,
                  "override 'zero.stage': expected path=value");
    ZT_FAILS_WITH(zs_config_override(cfg, "seed=99999999999999999999"), ZS_ERR_CONFIG,
                  "override 'seed=99999999999999999999': seed = 99999999999999999999 does not fit "
                  "in 64 bits");
    ZT_FAILS_WITH(zs_config_override(cfg, "optimizer.lr=fast"), ZS_ERR_CONFIG,
                  "optimizer.lr must be a number, not a string");
    ZT_FAILS_WITH(zs_config_override(cfg, "zero=1"), ZS_ERR_CONFIG,
                  "override 'zero=1': 'zero' is a group; override the keys inside it one by one");
    ZT_FAILS_WITH(zs_config_override(cfg, "zero.stage.x=1"), ZS_ERR_CONFIG,
                  "'zero.stage' is an integer, not a group");
    ZT_FAILS_WITH(zs_config_override(cfg, "zero..stage=1"), ZS_ERR_CONFIG, "not a valid key path");
    /* The cross-key error points at nesterov's line in the file. */
    ZT_FAILS_WITH(zs_config_override(cfg, "optimizer.momentum=0"), ZS_ERR_CONFIG,
                  "ovr.cfg:5: optimizer.nesterov = true needs optimizer.momentum > 0");
    ZT_CHECK(strncmp(zs_last_error(), "override 'optimizer.momentum=0': ", 33) == 0);
    ZT_FAILS_WITH(zs_config_override(cfg, "optimizer.type=adamx"), ZS_ERR_CONFIG,
                  "optimizer.type = \"adamx\" is not an allowed value");
    ZT_FAILS_WITH(zs_config_override(NULL, "zero.stage=1"), ZS_ERR_INVALID_ARGUMENT, "");
    ZT_EQ_U64(zs_config_hash(cfg), h0);
    ZT_EQ_INT(zs__config_settings(cfg)->optimizer.kind, ZS_OPTIMIZER_SGD);

    /* A list is validated once, as a whole: keys that constrain each other can
     * change together in any order; a failure anywhere changes nothing. */
    ZT_FAILS_WITH(zs_config_override(cfg, "scheduler.type=warmup_cosine"), ZS_ERR_CONFIG,
                  "needs scheduler.total_steps > scheduler.warmup_steps");
    const char *together[] = {"scheduler.total_steps=3", "scheduler.type=warmup_cosine",
                              "scheduler.warmup_steps=1"};
    ZT_OK(zs_config_override_list(cfg, 3, together));
    ZT_EQ_INT(zs__config_settings(cfg)->scheduler.total_steps, 3);
    ZT_EQ_INT(zs__config_settings(cfg)->scheduler.warmup_steps, 1);
    const uint64_t h_sched = zs_config_hash(cfg);
    const char *one_bad[] = {"scheduler.warmup_steps=2", "zero.stage=5"};
    ZT_FAILS_WITH(zs_config_override_list(cfg, 2, one_bad), ZS_ERR_CONFIG,
                  "overrides (2 given): zero.stage = 5 is out of range");
    const char *bad_syntax[] = {"scheduler.warmup_steps=2", "nonsense"};
    ZT_FAILS_WITH(zs_config_override_list(cfg, 2, bad_syntax), ZS_ERR_CONFIG,
                  "override 'nonsense': expected path=value");
    ZT_EQ_INT(zs__config_settings(cfg)->scheduler.warmup_steps, 1);
    ZT_EQ_U64(zs_config_hash(cfg), h_sched);
    const char *back[] = {"scheduler.type=constant", "scheduler.total_steps=0", "scheduler.warmup_steps=0"};
    ZT_OK(zs_config_override_list(cfg, 3, back));
    ZT_EQ_U64(zs_config_hash(cfg), h0);

    /* Every value form; types are replaced where needed. */
    ZT_OK(zs_config_override(cfg, "seed=4294967296")); /* no wrapping on this path either */
    ZT_EQ_U64(zs__config_settings(cfg)->seed, 4294967296ull);
    ZT_OK(zs_config_override(cfg, "seed=0x10"));
    ZT_EQ_U64(zs__config_settings(cfg)->seed, 16);
    ZT_OK(zs_config_override(cfg, "optimizer.lr=1"));
    ZT_CHECK(zs__config_settings(cfg)->optimizer.lr == 1.0);
    ZT_OK(zs_config_override(cfg, "optimizer.lr=2.5e-3"));
    ZT_CHECK(zs__config_settings(cfg)->optimizer.lr == 2.5e-3);
    ZT_OK(zs_config_override(cfg, "optimizer.nesterov=false"));
    ZT_EQ_INT(zs__config_settings(cfg)->optimizer.nesterov, 0);
    ZT_OK(zs_config_override(cfg, "optimizer.type=adam"));
    ZT_EQ_INT(zs__config_settings(cfg)->optimizer.kind, ZS_OPTIMIZER_ADAM);
    ZT_OK(zs_config_override(cfg, "log.file=\"run %r.log\""));
    ZT_CHECK(strcmp(zs__config_settings(cfg)->log.file, "run %r.log") == 0);
    ZT_OK(zs_config_override(cfg, "log.level=debug")); /* creates the log group */
    ZT_EQ_INT(zs__config_settings(cfg)->log.level, ZS_LOG_DEBUG);
    /* total_steps defaults to 0, which warmup_cosine cannot use; the message
     * names the override, and the key it created has no file line. */
    ZT_FAILS_WITH(zs_config_override(cfg, "scheduler.type=warmup_cosine"), ZS_ERR_CONFIG,
                  "override 'scheduler.type=warmup_cosine': scheduler.type = \"warmup_cosine\" "
                  "needs scheduler.total_steps > scheduler.warmup_steps");
    ZT_EQ_INT(zs__config_settings(cfg)->scheduler.kind, ZS_SCHEDULE_CONSTANT);

    /* App keys. */
    ZT_OK(zs_config_override(cfg, "app.steps=5"));
    ZT_OK(zs_config_override(cfg, "app.model.dim=64"));
    ZT_OK(zs_config_override(cfg, "app.name=tiny"));
    int64_t steps = 0, dim = 0;
    const char *name = NULL;
    ZT_OK(zs_config_app_int(cfg, "steps", 1, 1, 100, &steps));
    ZT_EQ_INT(steps, 5);
    ZT_OK(zs_config_app_int(cfg, "model.dim", 1, 1, 4096, &dim));
    ZT_EQ_INT(dim, 64);
    ZT_OK(zs_config_app_string(cfg, "name", "", &name));
    ZT_CHECK(name && strcmp(name, "tiny") == 0);
    ZT_FAILS_WITH(zs_config_override(cfg, "app.steps.x=1"), ZS_ERR_CONFIG,
                  "override 'app.steps.x=1': 'app.steps' is an integer, not a group");
    ZT_FAILS_WITH(zs_config_override(cfg, "app.model=1"), ZS_ERR_CONFIG,
                  "'app.model' is a group; override the keys inside it one by one");
    ZT_OK(zs_config_app_finish(cfg));
    zs_config_destroy(cfg);
}

static void test_warmup_override(void) {
    zs_status st;
    zs_config *cfg = load_text("ovr2.cfg", LR "scheduler: {\n  total_steps = 100;\n};\n", &st);
    ZT_OK(st);
    ZT_REQUIRE(cfg != NULL);
    uint64_t h = zs_config_hash(cfg);
    ZT_OK(zs_config_override(cfg, "scheduler.warmup_steps=10"));
    ZT_OK(zs_config_override(cfg, "scheduler.type=\"warmup_cosine\""));
    ZT_FAILS_WITH(zs_config_override(cfg, "scheduler.warmup_steps=100"), ZS_ERR_CONFIG,
                  "ovr2.cfg:3: scheduler.type = \"warmup_cosine\" needs scheduler.total_steps > "
                  "scheduler.warmup_steps");
    ZT_CHECK(strncmp(zs_last_error(), "override 'scheduler.warmup_steps=100': ", 39) == 0);
    ZT_EQ_INT(zs__config_settings(cfg)->scheduler.warmup_steps, 10);
    ZT_CHECK(zs_config_hash(cfg) != h);
    zs_config_destroy(cfg);
}

static uint64_t hash_of(const char *name, const char *text) {
    zs_status st;
    zs_config *cfg = load_text(name, text, &st);
    ZT_OK(st);
    if (!cfg) return 0;
    uint64_t h = zs_config_hash(cfg);
    zs_config_destroy(cfg);
    return h;
}

static void test_hash(void) {
    uint64_t a = hash_of("h_a.cfg",
                         "optimizer: { lr = 1; type = \"adamw\"; };\n"
                         "zero: { stage = 2; align = 16; };\n"
                         "app: { steps = 100; name = \"x\"; model: { dim = 64; lr = 1; }; };\n");
    /* Same values: other order, formatting, comments, literal spellings,
     * defaults written out or left implicit. */
    uint64_t b = hash_of("h_b.cfg",
                         "# a comment\n"
                         "app:\n{\n  model: { lr = 1.0; dim = 0x40; };\n  name = \"x\";\n"
                         "  steps = 100L;\n};\n"
                         "zero = { align = 0x10; stage = 2; max_live_units = 2; };\n"
                         "optimizer: {\n  lr = 1.0\n  beta1 = 0.9\n};\n");
    ZT_EQ_U64(a, b);
    uint64_t no_app = hash_of("h_c.cfg", LR);
    uint64_t empty_app = hash_of("h_d.cfg", LR "app: { };\n");
    ZT_EQ_U64(no_app, empty_app);
    /* Any changed value changes the hash. */
    ZT_CHECK(hash_of("h_e.cfg", LR "seed = 43;\n") != no_app);
    ZT_CHECK(hash_of("h_f.cfg", "optimizer: { lr = 3.0001e-4; };\n") != no_app);
    ZT_CHECK(hash_of("h_g.cfg", LR "app: { steps = 1; };\n") != empty_app);
    ZT_CHECK(hash_of("h_h.cfg", LR "app: { steps = 2; };\n") !=
             hash_of("h_i.cfg", LR "app: { steps = 1; };\n"));
    ZT_CHECK(hash_of("h_j.cfg", LR "app: { steps = \"1\"; };\n") !=
             hash_of("h_k.cfg", LR "app: { steps = 1; };\n"));
    ZT_CHECK(hash_of("h_l.cfg", LR "app: { a = 1; };\n") !=
             hash_of("h_m.cfg", LR "app: { b = 1; };\n"));
    ZT_CHECK(hash_of("h_n.cfg", LR "log: { file = \"a\"; };\n") != no_app);
    ZT_CHECK(hash_of("h_o.cfg", LR "log: { level = \"warn\"; };\n") != no_app);
    ZT_CHECK(hash_of("h_p.cfg", LR "comm: { all_gather = \"mpi\"; };\n") != no_app);
    /* The new keys count too, and writing a default out changes nothing. */
    ZT_CHECK(hash_of("h_q.cfg", LR "gradient_accumulation_steps = 2;\n") != no_app);
    ZT_CHECK(hash_of("h_r.cfg", LR "gradient_clipping = 1.0;\n") != no_app);
    ZT_CHECK(hash_of("h_s.cfg", LR "precision: { dtype = \"bf16\"; };\n") != no_app);
    ZT_CHECK(hash_of("h_t.cfg", LR "precision: { dtype = \"bf16\"; };\n") !=
             hash_of("h_u.cfg", LR "precision: { dtype = \"fp16\"; };\n"));
    ZT_CHECK(hash_of("h_v.cfg", LR "precision: { hysteresis = 3; };\n") != no_app);
    ZT_CHECK(hash_of("h_w.cfg", LR "precision: { min_loss_scale = 2; };\n") != no_app);
    ZT_CHECK(hash_of("h_x.cfg", LR "precision: { check_overflow = false; };\n") != no_app);
    ZT_EQ_U64(hash_of("h_y.cfg", LR "precision: { dtype = \"fp32\"; loss_scale = 0; };\n"
                                    "gradient_clipping = 0;\n"),
              no_app);
}

static void test_app_keys(void) {
    zs_status st;
    zs_config *cfg = load_text("app.cfg",
                               LR
                               "app: {\n"
                               "  steps = 300;\n"      /* line 3 */
                               "  lr = 1;\n"           /* line 4 */
                               "  verbose = true;\n"   /* line 5 */
                               "  name = \"mlp\";\n"   /* line 6 */
                               "  bad_int = 2.5;\n"    /* line 7 */
                               "  word = \"ten\";\n"   /* line 8 */
                               "  model: { dim = 8; };\n" /* line 9 */
                               "};\n",
                               &st);
    ZT_OK(st);
    ZT_REQUIRE(cfg != NULL);
    int64_t i = 0;
    double f = 0;
    int b = 0;
    const char *s = NULL;
    ZT_OK(zs_config_app_int(cfg, "steps", 10, 1, 1000, &i));
    ZT_EQ_INT(i, 300);
    ZT_OK(zs_config_app_int(cfg, "absent", 17, 0, 100, &i));
    ZT_EQ_INT(i, 17);
    ZT_OK(zs_config_app_float(cfg, "lr", 0.5, 0.0, 10.0, &f));
    ZT_CHECK(f == 1.0);
    ZT_OK(zs_config_app_float(cfg, "absent_f", 0.25, 0.0, 1.0, &f));
    ZT_CHECK(f == 0.25);
    ZT_OK(zs_config_app_bool(cfg, "verbose", 0, &b));
    ZT_EQ_INT(b, 1);
    ZT_OK(zs_config_app_bool(cfg, "absent_b", 1, &b));
    ZT_EQ_INT(b, 1);
    ZT_OK(zs_config_app_string(cfg, "name", "none", &s));
    ZT_CHECK(s && strcmp(s, "mlp") == 0);
    const char *first = s;
    ZT_OK(zs_config_app_string(cfg, "absent_s", "fallback", &s));
    ZT_CHECK(s && strcmp(s, "fallback") == 0);
    ZT_OK(zs_config_app_string(cfg, "name", "none", &s)); /* reading again keeps `first` alive */
    ZT_CHECK(strcmp(first, "mlp") == 0);

    ZT_FAILS_WITH(zs_config_app_int(cfg, "steps", 10, 1, 100, &i), ZS_ERR_CONFIG,
                  "app.cfg:3: app.steps = 300 is out of range; it must be from 1 to 100");
    ZT_FAILS_WITH(zs_config_app_int(cfg, "bad_int", 0, 0, 10, &i), ZS_ERR_CONFIG,
                  "app.cfg:7: app.bad_int = 2.5 is a float, but app.bad_int takes only an integer literal");
    ZT_FAILS_WITH(zs_config_app_int(cfg, "word", 0, 0, 10, &i), ZS_ERR_CONFIG,
                  "app.cfg:8: app.word must be an integer, not a string");
    ZT_FAILS_WITH(zs_config_app_float(cfg, "lr", 0.5, 0.0, 0.9, &f), ZS_ERR_CONFIG,
                  "app.cfg:4: app.lr = 1.0 is out of range; it must be in [0.0, 0.9]");
    ZT_FAILS_WITH(zs_config_app_float(cfg, "word", 0, 0, 1, &f), ZS_ERR_CONFIG,
                  "app.word must be a number, not a string");
    ZT_FAILS_WITH(zs_config_app_bool(cfg, "steps", 0, &b), ZS_ERR_CONFIG,
                  "app.cfg:3: app.steps must be true or false, not an integer");
    ZT_FAILS_WITH(zs_config_app_string(cfg, "steps", "", &s), ZS_ERR_CONFIG,
                  "app.steps must be a string, not an integer");
    ZT_FAILS_WITH(zs_config_app_int(cfg, "model", 0, 0, 10, &i), ZS_ERR_CONFIG,
                  "app.cfg:9: app.model must be an integer, not a group");
    ZT_FAILS_WITH(zs_config_app_int(cfg, "steps.x", 0, 0, 10, &i), ZS_ERR_CONFIG,
                  "app.steps is an integer, not a group, so app.steps.x cannot be read");
    ZT_FAILS_WITH(zs_config_app_int(cfg, "bad key", 0, 0, 10, &i), ZS_ERR_INVALID_ARGUMENT,
                  "not a valid app key");
    ZT_FAILS_WITH(zs_config_app_int(cfg, "x", 50, 0, 10, &i), ZS_ERR_INVALID_ARGUMENT, "default");

    /* word, bad_int and model.dim were never read successfully: the first in
     * file order is reported, with the nearest key that was read. */
    ZT_FAILS_WITH(zs_config_app_finish(cfg), ZS_ERR_CONFIG, "app.cfg:7: unknown key 'app.bad_int'");
    zs_config_destroy(cfg);

    cfg = load_text("app2.cfg", LR "app: {\n  steps = 3;\n  stepz = 4;\n};\n", &st);
    ZT_OK(st);
    ZT_REQUIRE(cfg != NULL);
    ZT_OK(zs_config_app_int(cfg, "steps", 1, 0, 10, &i));
    ZT_FAILS_WITH(zs_config_app_finish(cfg), ZS_ERR_CONFIG,
                  "app2.cfg:4: unknown key 'app.stepz'; did you mean 'app.steps'?");
    ZT_OK(zs_config_app_int(cfg, "stepz", 1, 0, 10, &i));
    ZT_OK(zs_config_app_finish(cfg));
    zs_config_destroy(cfg);

    cfg = load_text("app3.cfg", LR "app: { model: { width = 3; }; };\n", &st);
    ZT_OK(st);
    ZT_REQUIRE(cfg != NULL);
    ZT_FAILS_WITH(zs_config_app_finish(cfg), ZS_ERR_CONFIG,
                  "unknown key 'app.model.width'; the program reads no app keys");
    ZT_OK(zs_config_app_int(cfg, "model.width", 1, 0, 10, &i));
    ZT_EQ_INT(i, 3);
    ZT_OK(zs_config_app_finish(cfg));
    zs_config_destroy(cfg);

    /* No app group at all: reads give defaults and finish passes. */
    cfg = load_text("app4.cfg", LR, &st);
    ZT_REQUIRE(cfg != NULL);
    ZT_OK(zs_config_app_int(cfg, "steps", 9, 0, 10, &i));
    ZT_EQ_INT(i, 9);
    ZT_OK(zs_config_app_finish(cfg));
    zs_config_destroy(cfg);
}

static void test_reference_and_docs(void) {
    zs_config *cfg = NULL;
    ZT_OK(zs_config_load(ZS_SOURCE_DIR "/configs/reference.cfg", &cfg));
    if (cfg) {
        ZT_OK(zs_config_app_finish(cfg));
        /* reference.cfg writes every default out, so it must hash like a file
         * that gives only the required key. */
        ZT_EQ_U64(zs_config_hash(cfg), hash_of("ref_min.cfg", LR));
        zs_config_destroy(cfg);
    }
    /* docs/config-keys.md is the schema's own rendering. */
    size_t needed = zs__config_keys_markdown(NULL, 0);
    char *generated = malloc(needed + 1);
    ZT_REQUIRE(generated != NULL);
    ZT_EQ_INT(zs__config_keys_markdown(generated, needed + 1), needed);
    FILE *f = fopen(ZS_SOURCE_DIR "/docs/config-keys.md", "rb");
    ZT_CHECK_MSG(f != NULL, "cannot open docs/config-keys.md");
    if (f) {
        char *doc = calloc(needed + 2, 1);
        size_t n = doc ? fread(doc, 1, needed + 1, f) : 0;
        fclose(f);
        ZT_CHECK_MSG(doc && n == needed && memcmp(doc, generated, needed) == 0,
                     "docs/config-keys.md differs from the schema; regenerate it:\n%s", generated);
        free(doc);
    }
    /* The README shows the same table (without the generator's comment line). */
    const char *table = strchr(generated, '\n');
    f = fopen(ZS_SOURCE_DIR "/README.md", "rb");
    ZT_CHECK_MSG(f != NULL, "cannot open README.md");
    if (f && table) {
        char *readme = calloc(1u << 20, 1);
        size_t n = readme ? fread(readme, 1, (1u << 20) - 1, f) : 0;
        ZT_CHECK_MSG(n > 0 && strstr(readme, table + 1) != NULL,
                     "README.md's configuration table differs from the schema; paste "
                     "docs/config-keys.md (without its first line) into it");
        free(readme);
    }
    if (f) fclose(f);
    free(generated);
}

/* Every .cfg file in tests/config/bad must fail with the message its first line
 * names. A file that loads is then read like a program would (app.steps) and
 * finished, which is where unknown app keys fail. */
static void test_bad_directory(void) {
    const char *dir = ZS_SOURCE_DIR "/tests/config/bad";
    DIR *d = opendir(dir);
    ZT_REQUIRE(d != NULL);
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 4, ".cfg") != 0) continue;
        char path[512], first[512] = "";
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        ZT_REQUIRE(f != NULL);
        if (!fgets(first, sizeof first, f)) first[0] = '\0';
        fclose(f);
        first[strcspn(first, "\n")] = '\0';
        ZT_CHECK_MSG(strncmp(first, "# expect: ", 10) == 0, "%s: first line must be '# expect: ...'",
                     path);
        const char *expected = first + 10;
        zs_config *cfg = NULL;
        zs_status st = zs_config_load(path, &cfg);
        if (st == ZS_OK) {
            int64_t steps;
            st = zs_config_app_int(cfg, "steps", 1, 0, INT64_MAX, &steps);
            if (st == ZS_OK) st = zs_config_app_finish(cfg);
            zs_config_destroy(cfg);
        }
        zt_fails_with_(st, st == ZS_OK ? ZS_ERR_CONFIG : st, expected, path, __FILE__, __LINE__);
        ZT_CHECK_MSG(st != ZS_OK, "%s loaded without error", path);
        files++;
    }
    closedir(d);
    ZT_CHECK_MSG(files >= 12, "only %d files in %s", files, dir);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/zs_config_XXXXXX");
    /* ZT_REQUIRE evaluates its condition twice, so no side effects inside. */
    char *made = mkdtemp(g_dir);
    ZT_REQUIRE(made != NULL);
    /* The whole test must finish in seconds; a load that hangs fails it. */
    alarm(120);
    snprintf(g_hostile, sizeof g_hostile, "%.63s/hostile", g_dir);
    ZT_REQUIRE(mkdir(g_hostile, 0700) == 0);
    g_hostile_owner = getpid();
    atexit(remove_hostile);
    test_defaults();
    test_every_key();
    test_precision_keys();
    test_bad_configs();
    test_good_literals();
    test_includes();
    test_include_targets();
    test_absolute_includes();
    test_hostile_text();
    test_overrides();
    test_override_literals();
    test_warmup_override();
    test_hash();
    test_app_keys();
    test_reference_and_docs();
    test_bad_directory();
    for (int i = 0; i < g_written_count; i++) {
        char path[256];
        snprintf(path, sizeof path, "%.63s/%.127s", g_dir, g_written[i]);
        unlink(path);
    }
    remove_hostile();
    g_hostile[0] = '\0';
    rmdir(g_dir);
    return zt_finish("test_config");
}

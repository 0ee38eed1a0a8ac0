/* The whole-text number readers of core/number.h, which every numeric
 * command-line option of the tools and benchmarks goes through (issue 22,
 * item 18: `bench_memory --unit-params 7.5e9` was read by atoll as 7). Each
 * case gives the text and either the value it must read as or the words the
 * refusal must contain; bad_numbers.sh runs the programs themselves. */
#include <float.h>
#include <stdint.h>
#include <string.h>

#include "core/number.h"
#include "test_util.h"

static void expect_int64(const char *text, int64_t min, int64_t max, int64_t expected, int line) {
    int64_t got = -12345;
    zs_status st = zs__number_option_int64("--n", text, min, max, &got);
    ZT_CHECK_MSG(st == ZS_OK && got == expected,
                 "line %d: '%s' should read as %lld, got %s %lld (%s)", line, text,
                 (long long)expected, zs_status_name(st), (long long)got,
                 st == ZS_OK ? "" : zs_last_error());
}
#define INT64_READS(text, min, max, expected) expect_int64(text, min, max, expected, __LINE__)

/* The refusal names the option, quotes the text and says `why`. */
static void expect_refused(zs_status st, const char *why, const char *text, int line) {
    ZT_CHECK_MSG(st == ZS_ERR_INVALID_ARGUMENT && strncmp(zs_last_error(), "--n ", 4) == 0 &&
                     strstr(zs_last_error(), why) != NULL,
                 "line %d: '%s' should be refused with \"--n ...%s...\", got %s \"%s\"", line,
                 text, why, zs_status_name(st), st == ZS_OK ? "" : zs_last_error());
}
#define INT64_REFUSED(text, min, max, why)                                                 \
    do {                                                                                   \
        int64_t v_ = 0;                                                                    \
        expect_refused(zs__number_option_int64("--n", text, min, max, &v_), why, text,     \
                       __LINE__);                                                          \
    } while (0)
#define SIZE_REFUSED(text, why)                                                            \
    do {                                                                                   \
        int64_t v_ = 0;                                                                    \
        expect_refused(zs__number_option_size("--n", text, 1, INT64_MAX, &v_), why, text,  \
                       __LINE__);                                                          \
    } while (0)
#define DOUBLE_REFUSED(text, why)                                                          \
    do {                                                                                   \
        double v_ = 0;                                                                     \
        expect_refused(zs__number_option_double("--n", text, -1e300, 1e300, &v_), why,     \
                       text, __LINE__);                                                    \
    } while (0)

static void test_integers(void) {
    INT64_READS("7", 1, INT64_MAX, 7);
    INT64_READS("7500000000", 1, INT64_MAX, 7500000000LL);
    INT64_READS("7.5e9", 1, INT64_MAX, 7500000000LL); /* atoll read 7 */
    INT64_READS("1e3", 1, INT64_MAX, 1000);
    INT64_READS("0x10", 1, INT64_MAX, 16);
    INT64_READS("-5", -10, 10, -5);
    INT64_READS("9223372036854775807", 0, INT64_MAX, INT64_MAX);
    INT64_READS("-9223372036854775808", INT64_MIN, 0, INT64_MIN);
    INT64_REFUSED("7.5e9x", 1, INT64_MAX, "\"7.5e9x\" is not an integer");
    INT64_REFUSED("12abc", 1, INT64_MAX, "\"12abc\" is not an integer");
    INT64_REFUSED(" 12", 1, INT64_MAX, "is not an integer");
    INT64_REFUSED("", 1, INT64_MAX, "\"\" is empty");
    INT64_REFUSED("1.5", 1, INT64_MAX, "\"1.5\" is not a whole number");
    INT64_REFUSED("1e-400", 0, INT64_MAX, "is not a whole number");
    INT64_REFUSED("inf", 1, INT64_MAX, "is not an integer");
    INT64_REFUSED("99999999999999999999", 1, INT64_MAX, "is too large; the largest accepted is "
                                                        "9223372036854775807");
    INT64_REFUSED("1e19", 1, INT64_MAX, "is too large");
    INT64_REFUSED("0", 1, 10, "\"0\" is too small; the smallest accepted is 1");
    INT64_REFUSED("11", 1, 10, "\"11\" is too large; the largest accepted is 10");
    INT64_REFUSED("-99999999999999999999", INT64_MIN, 0, "is too small");
    int small = 0;
    expect_refused(zs__number_option_int("--n", "2147483648", 1, INT32_MAX, &small),
                   "is too large; the largest accepted is 2147483647", "2147483648", __LINE__);
    ZT_OK(zs__number_option_int("--n", "2147483647", 1, INT32_MAX, &small));
    ZT_EQ_INT(small, INT32_MAX);
}

static void test_sizes(void) {
    static const struct {
        const char *text;
        int64_t bytes;
    } sizes[] = {{"4096", 4096},          {"64K", 65536},          {"64KiB", 65536},
                 {"1.5GiB", 1610612736},  {"80 GB", 80000000000}, {"2m", 2097152},
                 {"1T", 1099511627776LL}, {"512B", 512},           {"1e3", 1000}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int64_t got = 0;
        zs_status st = zs__number_option_size("--n", sizes[i].text, 1, INT64_MAX, &got);
        ZT_CHECK_MSG(st == ZS_OK && got == sizes[i].bytes, "'%s' should be %lld bytes, got %lld",
                     sizes[i].text, (long long)sizes[i].bytes, (long long)got);
    }
    SIZE_REFUSED("1.5GiBx", "is not a size such as");
    SIZE_REFUSED("GiB", "is not a size");
    SIZE_REFUSED("10XB", "is not a size");
    SIZE_REFUSED("0", "is too small; the smallest accepted is 1 bytes");
    SIZE_REFUSED("10000000TB", "is too large"); /* 1e19 bytes */
}

static void test_doubles(void) {
    double got = 0;
    ZT_OK(zs__number_option_double("--n", "2.5", 0, 10, &got));
    ZT_CHECK(got == 2.5);
    ZT_OK(zs__number_option_double("--n", "0e-999", 0, 10, &got));
    ZT_CHECK(got == 0.0);
    DOUBLE_REFUSED("2.5x", "\"2.5x\" is not a number");
    DOUBLE_REFUSED("1e-400", "is too small for a double (it would be read as 0)");
    DOUBLE_REFUSED("1e400", "is too large");
    DOUBLE_REFUSED("nan", "is not a number");
    DOUBLE_REFUSED("0x1p3", "is not a number");
    DOUBLE_REFUSED("", "\"\" is empty");
}

int main(void) {
    test_integers();
    test_sizes();
    test_doubles();
    return zt_finish("test_number_options");
}

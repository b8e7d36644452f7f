/* Memory accountant: live/peak per category and the peak of the total. */
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "harness.h"

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    dt_mem *m = NULL;
    DT_CHECK_OK(dt_mem_init(&m));
    void *a, *b, *c;
    DT_CHECK_OK(dt_mem_alloc(m, DT_MEM_PARAMS, "w", 1000, &a));
    DT_CHECK_OK(dt_mem_alloc(m, DT_MEM_ACTS, "x", 500, &b));
    DT_CHECK(((uintptr_t)a & 63) == 0, "not 64-byte aligned");
    dt_mem_release(m, b);
    DT_CHECK_OK(dt_mem_alloc(m, DT_MEM_TEMP, "t", 200, &c));
    DT_CHECK(dt_mem_peak(m, DT_MEM_ACTS) == 500, "acts peak");
    DT_CHECK(dt_mem_live(m, DT_MEM_ACTS) == 0, "acts live");
    DT_CHECK(dt_mem_peak_total(m) == 1500, "peak total %zu, want 1500 (not the sum of peaks)",
             dt_mem_peak_total(m));
    DT_CHECK(dt_mem_live_total(m) == 1200, "live total %zu", dt_mem_live_total(m));
    const char *path = "test_mem_report.json";
    DT_CHECK_OK(dt_mem_write_json(m, path));
    FILE *f = fopen(path, "r");
    char buf[4096] = {0};
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    DT_CHECK(n > 0 && strstr(buf, "\"activations\":\t500") && strstr(buf, "\"total\":\t1500"),
             "json report lacks the peaks: %s", buf);
    remove(path);
    dt_mem_free(m);
    return DT_TEST_END();
}

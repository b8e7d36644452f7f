/* CRC32C, byte at a time through one table. See crc32c.h. */
#include "io/crc32c.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "io/atomic.h"

static uint32_t table[256];
static int table_ready;

static void make_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[i] = c;
    }
    table_ready = 1;
}

uint32_t dt_crc32c(uint32_t crc, const void *data, size_t n) {
    if (!table_ready)
        make_table();
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

dt_status dt_crc32c_file(const char *path, void *buf, size_t cap, uint32_t *crc, uint64_t *size) {
    int fd;
    size_t len;
    DT_TRY(dt_file_open_regular(path, "checkpoint file", &fd, &len));
    uint32_t c = 0;
    uint64_t at = 0;
    dt_status st = DT_OK;
    while (at < len) {
        size_t want = len - at < cap ? len - at : cap;
        ssize_t got = pread(fd, buf, want, (off_t)at);
        if (got <= 0) {
            st = dt_err_set(DT_ERR_IO, "%s: read failed at byte %llu: %s", path,
                            (unsigned long long)at, got < 0 ? strerror(errno) : "end of file");
            break;
        }
        c = dt_crc32c(c, buf, (size_t)got);
        at += (uint64_t)got;
    }
    close(fd);
    *crc = c;
    *size = at;
    return st;
}
